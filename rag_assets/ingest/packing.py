"""Planning one document's chunks (Planner): the chunk spans under target/min words and max_chars.

Large atomic blocks get chunks of their own, prose runs are packed between them, and every
chunk after the first starts with an overlap (re-wrapping a code block it starts inside).
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_left, bisect_right
from dataclasses import replace

from rag_assets.config.settings import ChunkingParams
from rag_assets.ingest.blocks import (
    BLOCK_START,
    FENCE_NESTED,
    OPAQUE,
    REWRAP_KINDS,
    Atomic,
    Layout,
    unclosed_top_level_fence,
)
from rag_assets.ingest.cuts import IN_TOKEN_PUNCT, CutFinder
from rag_assets.ingest.spans import ChunkSpan, render_span


class Planner:
    """Chooses chunk boundaries for one document (one instance per call, no shared state)."""

    def __init__(self, layout: Layout, params: ChunkingParams, context: str) -> None:
        self.layout = layout
        self.params = params
        self.context = context
        self.overlap_cap = params.max_chars // 4
        self.closer_allowance = max(len(layout.closer) + 1 if layout.closer else 0, layout.risky_closer_length())
        self.cuts = CutFinder(layout, params)

    # --- top level ---------------------------------------------------------------

    def plan(self) -> list[ChunkSpan]:
        layout = self.layout
        if not layout.word_starts:
            if not self.context:
                return []
            return [ChunkSpan(0, 0, 0, self.context, "", False, ())]
        spans: list[ChunkSpan] = []
        groups = self._groups()
        # Whitespace between groups goes to the group before it, so the new parts of the
        # chunks tile the body exactly.
        ends = [start for _, start, _ in groups[1:]] + [layout.n]
        for (kind, start, _), end in zip(groups, ends):
            if kind == "hard":
                spans.append(self._span(start, end, first=not spans))
            else:
                spans.extend(self._pack_run(start, end, first=not spans))
        if spans and BLOCK_START.match(self.context):
            # A title like "- Intro" makes a list item that can swallow the body's
            # first lines (and a fence among them): check chunk 0 like a risky one.
            spans[0] = self._verified(spans[0], force=True)
        return [self._verified(span) for span in spans]

    def _verified(self, span: ChunkSpan, force: bool = False) -> ChunkSpan:
        """Close a fence left open by a container-nested block read out of its container.

        Top-level fences stay balanced by construction (see :mod:`rag_assets.ingest.chunking`); a
        fence nested in a list or quote, or an HTML block with fence-like lines, can
        read differently without the container's first line, so the (rare) chunks
        holding one are parsed again and, if needed, given a closing fence.
        """
        layout = self.layout
        i = bisect_left(layout.risky_starts, span.end) - 1
        if not force and (i < 0 or layout.risky_ends[i] <= span.overlap_start):
            return span
        markup = unclosed_top_level_fence(render_span(layout.text, span))
        if not markup:
            return span
        return replace(span, suffix=f"{span.suffix}\n{markup}" if span.suffix else markup)

    def _is_hard(self, atomic: Atomic) -> bool:
        """A block too big to share a chunk with ``min_words`` of other content."""
        params = self.params
        words = self.layout.words_before(atomic.end) - self.layout.words_before(atomic.start)
        return words > params.target_words - params.min_words or atomic.end - atomic.start > params.max_chars // 2

    def _segments(self) -> list[tuple[str, int, int]]:
        """Alternating prose runs and large atomic blocks (runs without words dropped)."""
        layout = self.layout
        segments: list[tuple[str, int, int]] = []
        pos = layout.snap(layout.word_starts[0])
        for atomic in layout.atomics:
            if atomic.end <= pos or not self._is_hard(atomic):
                continue
            start = self._pull_back_headings(atomic.start, pos)
            self._add_run(segments, pos, start)
            segments.append(("hard", start, atomic.end))
            pos = atomic.end
        self._add_run(segments, pos, layout.n)
        return segments

    def _pull_back_headings(self, start: int, floor: int) -> int:
        """Headings directly above a large block belong in its chunk, not at a run's end."""
        layout = self.layout
        while True:
            i = bisect_left(layout.heading_starts, start) - 1
            if i < 0 or layout.headings[i].zone_end != start or layout.headings[i].start < floor:
                return start
            start = layout.headings[i].start

    def _add_run(self, segments: list[tuple[str, int, int]], start: int, end: int) -> None:
        layout = self.layout
        if layout.words_before(end) > layout.words_before(start):
            segments.append(("run", layout.skip_blank_lines(start, end), end))

    def _groups(self) -> list[tuple[str, int, int]]:
        """Merge runs too small to stand alone into the neighbouring large block's chunk.

        A run before a large block usually introduces it, so it joins the following
        block; only a trailing run joins the preceding one.
        """
        params, layout = self.params, self.layout
        segments = self._segments()
        groups: list[list] = []
        pending_start: int | None = None
        for idx, (kind, start, end) in enumerate(segments):
            if kind == "hard":
                groups.append(["hard", start if pending_start is None else pending_start, end])
                pending_start = None
                continue
            words = layout.words_before(end) - layout.words_before(start)
            small = words < params.min_words and end - start <= params.max_chars // 2
            if small and idx + 1 < len(segments):
                pending_start = start  # the next segment is a large block
            elif small and groups:
                groups[-1][2] = end
            else:
                groups.append(["run", start, end])
        return [(kind, start, end) for kind, start, end in groups]

    # --- one chunk -----------------------------------------------------------------

    def _span(self, start: int, end: int, first: bool) -> ChunkSpan:
        return self._make_span(start, end, *self._lead(start, first))

    def _lead(self, start: int, first: bool) -> tuple[int, str, bool]:
        """Overlap start, prefix and whether the prefix re-wraps a code block."""
        if first:
            return start, self.context, False
        overlap_start, prefix = self._overlap(start)
        return overlap_start, prefix, bool(prefix)

    def _make_span(self, start: int, end: int, overlap_start: int, prefix: str, rewrapped: bool) -> ChunkSpan:
        layout = self.layout
        suffix = layout.closer if end == layout.n else ""
        return ChunkSpan(overlap_start, start, end, prefix, suffix, rewrapped, layout.heading_path_at(start))

    def _char_limit(self, span_start: int, overlap_start: int, prefix: str, first: bool) -> int:
        """Largest end offset keeping the chunk text within ``max_chars``."""
        budget = self.params.max_chars - len(prefix) - self.closer_allowance
        if first:
            budget = max(budget, self.params.max_chars // 4)
        return max(overlap_start + budget, span_start + 1)

    def _overlap(self, start: int) -> tuple[int, str]:
        """Start offset and re-wrap prefix of the overlap of a chunk beginning at ``start``."""
        layout, text = self.layout, self.layout.text
        words = layout.word_starts
        k = layout.words_before(start)
        if self.params.overlap_words == 0 or k == 0:
            return start, ""
        offset = layout.snap(words[max(0, k - self.params.overlap_words)])
        if start - offset > self.overlap_cap:
            offset = self._capped_overlap_start(start)
        while offset < start:
            atomic = layout.atomic_containing(offset)
            if atomic is not None:
                if atomic.kind == OPAQUE or offset >= atomic.closing_start:
                    offset = atomic.end  # nothing worth re-wrapping (or no safe way to)
                    continue
                if offset < atomic.content_start:
                    offset = atomic.content_start  # don't copy half an opening line
                    continue
                if atomic.kind == FENCE_NESTED and text[offset - 1] != "\n":
                    offset = layout.next_line_start(offset)  # keep the line's indentation/">"
                    continue
            if layout.starts_block_mid_line(offset):
                offset = layout.snap(layout.upto_word(bisect_right(words, offset)))
                continue
            prefix = atomic.opener + "\n" if atomic is not None and atomic.kind in REWRAP_KINDS else ""
            if prefix and len(prefix) + start - offset > self.overlap_cap:
                offset = atomic.end  # type: ignore[union-attr]  # a prefix comes only with an atomic
                continue
            return offset, prefix
        return start, ""

    def _capped_overlap_start(self, start: int) -> int:
        layout, text = self.layout, self.layout.text
        limit = start - self.overlap_cap
        i = bisect_left(layout.word_starts, limit)
        if i < len(layout.word_starts) and layout.word_starts[i] < start:
            word = layout.word_starts[i]
            snapped = layout.snap(word)
            return snapped if snapped >= limit else word
        match = IN_TOKEN_PUNCT.search(text, limit, start - 1)
        if match:
            return match.end()
        while limit < start and unicodedata.combining(text[limit]):
            limit += 1  # don't start on a combining mark
        return limit

    # --- packing a run ---------------------------------------------------------------

    def _pack_run(self, run_start: int, run_end: int, first: bool) -> list[ChunkSpan]:
        layout, params = self.layout, self.params
        spans: list[ChunkSpan] = []
        pos = run_start
        while True:
            lead = self._lead(pos, first)
            char_limit = self._char_limit(pos, lead[0], lead[1], first)
            words = layout.words_before(run_end) - layout.first_word_index(pos)
            if words <= params.target_words and self._trimmed_end(pos, run_end) <= char_limit:
                spans.append(self._make_span(pos, run_end, *lead))
                return spans
            cut = self.cuts.choose(pos, run_end, char_limit)
            if cut >= run_end:  # nothing can be cut off: the rest is one (oversized) chunk
                spans.append(self._make_span(pos, run_end, *lead))
                return spans
            spans.append(self._make_span(pos, cut, *lead))
            pos, first = cut, False

    def _trimmed_end(self, start: int, end: int) -> int:
        text = self.layout.text
        while end > start and text[end - 1].isspace():
            end -= 1
        return end
