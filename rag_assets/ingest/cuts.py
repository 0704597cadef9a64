"""Where, inside one run of prose, the next chunk boundary goes (CutFinder).

In order of preference: before a heading, at a block start, after a sentence, between words,
and inside a token too long for a chunk (CJK text) after punctuation or at a character boundary.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right

from rag_assets.config.settings import ChunkingParams
from rag_assets.ingest.blocks import Heading, Layout

# A cut after sentence punctuation (optionally followed by closing quotes/brackets).
_SENTENCE_BREAK = re.compile(r"[.!?\u3002\uff01\uff1f\u2026][\"'\u201d\u2019\u00bb)\]]*\s+")
# Cut points inside a token that is longer than a whole chunk (CJK text).
IN_TOKEN_PUNCT = re.compile(r"[\u3002\uff01\uff1f.!?]")


class CutFinder:
    """The cut search over one document's layout (stateless apart from layout and params)."""

    def __init__(self, layout: Layout, params: ChunkingParams) -> None:
        self.layout = layout
        self.params = params

    def choose(self, pos: int, run_end: int, char_limit: int) -> int:
        """Best cut in (pos, run_end): structure first, then size, then anything legal."""
        layout, params = self.layout, self.params
        n0 = layout.first_word_index(pos)
        n_end = layout.words_before(run_end)
        min_w = max(params.min_words, 1)
        hi = min(char_limit, layout.upto_word(n0 + params.target_words), run_end - 1)
        lo = layout.after_word(n0 + min_w) if n0 + min_w <= n_end else None
        mid = layout.after_word(n0 + max(min_w, params.target_words // 2))
        rem_hi = layout.upto_word(n_end - min_w) if n_end - min_w > n0 else None
        # The chunk must hold some text: a word start, unless it begins inside a long token.
        some_word = pos + 1 if not layout.text[pos].isspace() else layout.after_word(n0 + 1)
        leave_word = layout.upto_word(n_end - 1)  # and leave at least one for the next
        searches = []
        for upper in ([min(hi, rem_hi)] if rem_hi is not None else []) + [hi]:
            upper = min(upper, leave_word)
            if lo is not None:
                searches += [
                    (self._best_heading, lo, upper),
                    (self._last_block, mid, upper),
                    (self._last_sentence, mid, upper),
                    (self._last_block, lo, upper),
                    (self._last_sentence, lo, upper),
                    (self._last_word, lo, upper),
                ]
        searches.append((self._last_word, max(some_word, pos + 1), min(hi, leave_word)))
        for search, a, b in searches:
            if a <= b:
                cut = search(max(a, pos + 1), b)
                if cut is not None:
                    return cut
        cut = self._in_token_cut(pos, min(hi, run_end - 1))
        if cut is None:
            # Rather than overflow, separate a heading from the block that follows it.
            cut = self._last_block(max(some_word, pos + 1), min(hi, leave_word), keep_headings=False)
        if cut is not None:
            return cut
        return self._first_cut_after(max(hi, pos), run_end)

    def _best_heading(self, a: int, b: int) -> int | None:
        """The outermost heading in [a, b] (furthest among equals): keeps sections whole."""
        layout = self.layout
        best: Heading | None = None
        for i in range(bisect_left(layout.heading_starts, a), bisect_right(layout.heading_starts, b)):
            heading = layout.headings[i]
            if (best is None or heading.level <= best.level) and layout.can_cut(heading.start):
                best = heading
        return best.start if best is not None else None

    def _last_block(self, a: int, b: int, keep_headings: bool = True) -> int | None:
        layout = self.layout
        starts = layout.block_starts
        for i in range(bisect_right(starts, b) - 1, bisect_left(starts, a) - 1, -1):
            if layout.can_cut(starts[i], keep_headings):
                return starts[i]
        return None

    def _last_sentence(self, a: int, b: int) -> int | None:
        layout = self.layout
        ends = [m.end() for m in _SENTENCE_BREAK.finditer(layout.text, max(0, a - 16), b + 1)]
        for end in reversed(ends):
            cut = layout.snap(end)
            if a <= cut <= b and layout.can_cut(cut):
                return cut
        return None

    def _last_word(self, a: int, b: int) -> int | None:
        layout = self.layout
        words = layout.word_starts
        i = bisect_right(words, b) - 1
        while i >= 0 and words[i] >= a:
            cut = layout.snap(words[i])
            blocker = layout.atomic_containing(cut) or layout.heading_zone_containing(cut)
            if blocker is not None:
                if blocker.start >= a and layout.can_cut(blocker.start):
                    return blocker.start
                i = bisect_left(words, blocker.start) - 1
                continue
            if cut >= a and layout.can_cut(cut):
                return cut
            i -= 1
        return None

    def _in_token_cut(self, pos: int, hi: int) -> int | None:
        """Cut inside a token longer than a chunk (CJK text has no spaces to cut at)."""
        layout, text = self.layout, self.layout.text
        if hi <= pos + 1:
            return None
        floor = pos + max(1, (hi - pos) // 2)  # don't make a tiny chunk to reach punctuation
        cut = None
        for match in IN_TOKEN_PUNCT.finditer(text, floor, hi):
            if layout.can_cut(match.end()) and not text[match.end()].isspace():
                cut = match.end()
        if cut is None:
            cut = _char_boundary(text, hi, pos)
            while cut > pos + 1 and text[cut - 1].isspace():
                cut -= 1
        return cut if pos < cut and layout.can_cut(cut) else None

    def _first_cut_after(self, offset: int, run_end: int) -> int:
        """Last resort (an atomic block or heading wider than the budget): the next legal cut."""
        layout = self.layout
        words = layout.word_starts
        i = bisect_right(words, offset)
        while i < len(words) and words[i] < run_end:
            cut = layout.snap(words[i])
            atomic = layout.atomic_containing(cut)
            if atomic is not None:
                if layout.can_cut(atomic.end) and atomic.end < run_end:
                    return layout.skip_blank_lines(atomic.end, run_end)
                i = bisect_left(words, atomic.end)
                continue
            if cut > offset and layout.can_cut(cut):
                return cut
            i += 1
        return run_end


def _char_boundary(text: str, offset: int, floor: int) -> int:
    """Step back so a cut does not separate a base character from its combining marks."""
    while offset > floor + 1 and offset < len(text) and unicodedata.combining(text[offset]):
        offset -= 1
    return offset
