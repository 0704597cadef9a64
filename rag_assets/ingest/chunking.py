"""Split a parsed Markdown :class:`~rag_assets.records.Document` into retrievable chunks.

Why it works the way it does
----------------------------
Retrieval quality depends on chunks that are (a) about one topic, (b) small enough
for the embedding model, and (c) still valid Markdown, because the chunk text is
shown to a language model (an unclosed code fence turns everything after it into
"code").  So the chunker:

* parses the body **once** with markdown-it (block rules only: inline parsing is
  not needed for structure and would double the cost) and works with the token
  ``.map`` line ranges, so ``#`` lines inside code fences are never taken for
  headings and setext headings are;
* treats every code block (fenced or indented, at any nesting level) as
  **atomic**: a chunk boundary never falls inside one.  So is an HTML block that
  contains fence-like lines, and a whole top-level list/quote holding a fence that
  would not be closed if read without its container (closed only by the
  container's end, or by a closing line indented 4+ columns);
* cuts, in order of preference, before a heading (the outermost one available,
  which keeps a whole section together when it fits; never right after one), at a
  block boundary, after a sentence, between words; text without spaces (CJK) is
  cut after sentence punctuation (``。！？.!?``) or, failing that, at a character
  boundary.

Every chunk's text is a verbatim slice of the body ``body[overlap_start:end]``
(so no word is lost or altered), preceded by an optional prefix: the frontmatter
context for chunk 0, or a *re-wrap* line for an overlap that starts inside a code
block (see below), and followed by an optional closing fence when the body
itself leaves a top-level fence open at its very end.  A slice starts either at a
whole source line (indentation included) or mid-line on a word that reads as
paragraph text there (never on a triple backtick, list marker, ``>``...), so a
top-level fence reads in the chunk exactly as in the source and stays balanced.
Fences nested in lists/quotes can read differently without their container's
first line; the rare chunks holding one are parsed again and, if a fence is left
open, get a closing fence appended.

Sizes (all "words" are whitespace-separated tokens, i.e. ``str.split()``)
-----------------------------------------------------------------------
``target_words`` counts **new** words only: the overlap copied from the previous
chunk and the frontmatter context of chunk 0 are not counted.  Guarantees:

* new words per chunk <= ``target_words``, and chunk text <= ``max_chars``
  characters, except for a chunk built around a *large atomic block* (one with
  more than ``target_words - min_words`` words or more than ``max_chars // 2``
  characters).  Such a block always gets a chunk of its own, which may exceed
  both limits; the only other new content that chunk holds is the headings
  directly above the block and, on each side, a stretch of fewer than
  ``min_words`` words (and at most ``max_chars // 2`` characters) lying between
  it and the next large block or the document edge, merged into it rather than
  left as a tiny chunk.  (Also exempt, as degenerate inputs: a heading line
  longer than the limits, as headings are never split, and chunk 0 when the
  frontmatter context alone takes more than three quarters of ``max_chars``.)
* new words per chunk >= ``min_words`` whenever the structure allows it (and
  ``target_words >= 2 * min_words``, as with the defaults): the cut search first
  looks for a cut leaving at least ``min_words`` on both sides.
  A chunk can be smaller only if the whole document is (a document under
  ``min_words`` words that fits in ``max_chars`` is exactly one chunk), if it or
  its neighbour was cut by ``max_chars`` (long tokens, CJK), or if the range where
  the cut should go holds no legal cut point (it lies in a code block, or on words
  such as a mid-line ``~~~`` that must not start a chunk).  Conversely, a long
  run of such words (say fifty ``~~~`` in a row) may push a chunk past the limits.

Overlap and fences
------------------
Chunk *i > 0* starts with the last ``overlap_words`` words of the body before its
new content, which are the last words of chunk *i-1* (exactly so whenever chunk
*i-1* has at least ``overlap_words`` words of body text).  When those words start
inside a fenced code block, the block's opening line (with its info string) is
prepended, so the copied tail of the block and its original closing fence form a
balanced block again; the same is done for an HTML block that contains
fence-like lines.  To keep this guarantee simple the overlap may be a few words
*shorter* than ``overlap_words`` when its first word falls on a fence's opening
or closing line, on a mid-line word that would begin a block (see above),
mid-line inside a fence nested in a list or quote (its indentation or ``>``
prefix would be lost), or inside an atomic list/quote.  The overlap is also capped at ``max_chars // 4`` characters (otherwise 50 "words" of
CJK text could be the whole previous chunk); a capped overlap may begin inside a
long token.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, replace

from markdown_it import MarkdownIt
from markdown_it.token import Token

from rag_assets.config.settings import ChunkingParams
from rag_assets.records import Chunk, Document

__all__ = ["ChunkingParams", "ChunkSpan", "chunk_document", "plan_chunks", "render_span"]

# Block structure only: the core "inline" rule is what makes a full parse ~2x slower,
# and chunking only needs block tokens and their line maps.  Only read after creation.
_BLOCK_MD = MarkdownIt("commonmark").disable(["inline", "text_join"])
# Heading texts need inline parsing (to drop emphasis/link markup); used on headings only.
_INLINE_MD = MarkdownIt("commonmark")

_WORD = re.compile(r"\S+")
_NON_SPACE = re.compile(r"\S")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
# A cut after sentence punctuation (optionally followed by closing quotes/brackets).
_SENTENCE_BREAK = re.compile(r"[.!?\u3002\uff01\uff1f\u2026][\"'\u201d\u2019\u00bb)\]]*\s+")
# Cut points inside a token that is longer than a whole chunk (CJK text).
_IN_TOKEN_PUNCT = re.compile(r"[\u3002\uff01\uff1f.!?]")
# A fence marker run; at the start of a line it would open or close a code fence.
_FENCE_RUN = re.compile(r"`{3,}|~{3,}")
# Text that, moved to the start of a line, would begin a block other than a paragraph:
# a fence, list item, quote, ATX heading, HTML block or thematic break.  A chunk must not
# start mid-line on such text: a list item or quote could pull the following lines (and
# a fence among them) into a container the source does not have.  ("``` `x`" is no fence,
# but the chunk may end before the second backtick run, so every run counts.)
_BLOCK_START = re.compile(
    r"[ \t]*(?:`{3,}|~{3,}|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|#{1,6}(?:[ \t]|$)"
    r"|<[A-Za-z/!?]|(?:[-*_][ \t]*){3,}$)",
    re.MULTILINE,
)
# A line that looks like a fence marker, allowing indentation and blockquote markers.
_FENCE_LIKE_LINE = re.compile(r"^[ \t>]*(?:`{3,}|~{3,})", re.MULTILINE)
# Goldmark/Pandoc heading attributes ("## Setup {#setup .wide}"): Hugo does not show them.
_HEADING_ATTRIBUTES = re.compile(r"\s*\{[#.][^{}]*\}\s*$")
# Characters whose presence makes parsing a heading's inline markup worthwhile.
_INLINE_MARKUP = re.compile(r"[`*_\[\]<>&!\\]")


@dataclass(frozen=True)
class ChunkSpan:
    """Where one chunk's text comes from: ``prefix + body[overlap_start:end] + suffix``.

    ``body[start:end]`` is the chunk's new content; ``body[overlap_start:start]`` is
    the overlap repeated from before.  ``prefix`` is the frontmatter context (chunk 0)
    or the opening line of a code block the overlap starts in (``rewrapped``);
    ``suffix`` is a closing fence line: for a fence the body leaves open at its end,
    or (rarely) for a fence nested in a list/quote that the chunk cuts off from its
    container.  Exposed so tests and debugging tools can check the chunker's
    guarantees against the source.
    """

    overlap_start: int
    start: int
    end: int
    prefix: str
    suffix: str
    rewrapped: bool
    heading_path: tuple[str, ...]


# Kinds of atomic (never split) regions.
_FENCE_TOP = "fence_top"  # fence at the top level: overlap may start mid-line inside it
_FENCE_NESTED = "fence_nested"  # fence in a list/quote: overlap may only start at a line
_HTML = "html"  # HTML block containing fence-like lines
_CODE = "code"  # indented code block: no re-wrap needed, it holds no fences
_OPAQUE = "opaque"  # list/quote holding a fence not explicitly closed: no overlap inside

_REWRAP_KINDS = frozenset({_FENCE_TOP, _FENCE_NESTED, _HTML})


@dataclass(frozen=True)
class _Atomic:
    start: int  # offset of the first line
    end: int  # offset just after the last line
    kind: str
    opener: str  # first source line, prepended when an overlap starts inside
    content_start: int  # offset of the second line (overlap never starts on line 1)
    closing_start: int  # offset of an explicit closing fence line, else ``end``


@dataclass(frozen=True)
class _Heading:
    start: int
    zone_end: int  # offset of the next block: a cut in (start, zone_end] orphans the heading
    level: int
    path: tuple[str, ...]


class _Layout:
    """Offsets of everything the cut search needs, computed from one parse of the body."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.word_starts = [m.start() for m in _WORD.finditer(text)]
        self.closer = ""  # closing fence for a top-level fence left open at end of body
        atomics: list[_Atomic] = []
        headings: list[_Heading] = []
        block_starts: list[int] = []
        tokens = _BLOCK_MD.parse(text)
        top_map: list[int] | None = None
        stack: list[tuple[int, str]] = []  # (level, text) of enclosing headings
        for idx, tok in enumerate(tokens):
            if tok.map is None or tok.nesting == -1:
                continue
            if tok.level == 0:
                top_map = tok.map
            start = self._line_offset(tok.map[0])
            block_starts.append(start)
            if tok.type == "heading_open" and tok.level == 0:
                level = int(tok.tag[1])
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, _heading_text(tokens[idx + 1].content)))
                zone_end = self._next_block_start(tokens, idx + 3)
                headings.append(_Heading(start, zone_end, level, tuple(t for _, t in stack)))
            elif tok.type in ("fence", "code_block", "html_block"):
                atomic = self._atomic(tok, top_map)
                if atomic is not None:
                    atomics.append(atomic)
        self.atomics = _merge_overlapping(atomics)
        self.atomic_starts = [a.start for a in self.atomics]
        risky = [a for a in self.atomics if a.kind in (_FENCE_NESTED, _OPAQUE, _HTML)]
        self.risky_starts = [a.start for a in risky]
        self.risky_ends = [a.end for a in risky]
        self.headings = headings
        self.heading_starts = [h.start for h in headings]
        self.block_starts = sorted(set(block_starts))

    # --- construction helpers -------------------------------------------------

    def _line_offset(self, line: int) -> int:
        return self.line_starts[line] if line < len(self.line_starts) else self.n

    def _line_text(self, line: int) -> str:
        return self.text[self._line_offset(line) : self._line_offset(line + 1)].rstrip("\n")

    def _next_block_start(self, tokens: list[Token], idx: int) -> int:
        for tok in tokens[idx:]:
            if tok.map is not None and tok.nesting != -1:
                return self._line_offset(tok.map[0])
        return self.n

    def _atomic(self, tok: Token, top_map: list[int] | None) -> _Atomic | None:
        first, last = tok.map  # type: ignore[misc]
        start, end = self._line_offset(first), self._line_offset(last)
        opener = self._line_text(first)
        content_start = self._line_offset(first + 1) if last > first + 1 else end
        if tok.type == "code_block":
            return _Atomic(start, end, _CODE, opener, start, end)
        if tok.type == "html_block":
            if not _FENCE_LIKE_LINE.search(tok.content):
                return None  # ordinary HTML: may be cut like prose
            return _Atomic(start, end, _HTML, opener, content_start, end)
        closed = last - 1 > first and _is_closing_fence(self._line_text(last - 1), tok.markup, tok.level == 0)
        closing_start = self._line_offset(last - 1) if closed else end
        if tok.level == 0:
            if not closed:
                self.closer = tok.markup  # a top-level fence only ends unclosed at end of body
            return _Atomic(start, end, _FENCE_TOP, opener, content_start, closing_start)
        if top_map is None or (closed and _balanced_out_of_context(self.text[start:end])):
            return _Atomic(start, end, _FENCE_NESTED, opener, content_start, closing_start)
        # A chunk starting inside its list/quote would read this fence without the
        # container's indentation, where it would not be closed (it is closed only by
        # the container's end, or its closing line is indented 4+ columns in absolute
        # terms): the whole top-level container becomes one opaque atomic region.
        top_start, top_end = self._line_offset(top_map[0]), self._line_offset(top_map[1])
        return _Atomic(top_start, top_end, _OPAQUE, "", top_start, top_end)

    # --- queries ---------------------------------------------------------------

    def risky_closer_length(self) -> int:
        """Room to keep for a closing fence :meth:`_Planner._verified` may append."""
        runs = [
            len(m.group())
            for start, end in zip(self.risky_starts, self.risky_ends)
            for m in _FENCE_RUN.finditer(self.text, start, end)
        ]
        return max(runs) + 1 if runs else 0

    def words_before(self, offset: int) -> int:
        """Number of words starting before ``offset``."""
        return bisect_left(self.word_starts, offset)

    def first_word_index(self, offset: int) -> int:
        """Index of the first word at or after ``offset``, counting a word cut in two.

        A chunk starting inside a long (CJK) token holds the rest of that token as a
        word of its own, so size bounds must count it.
        """
        i = bisect_left(self.word_starts, offset)
        text = self.text
        if 0 < offset < self.n and not text[offset].isspace() and not text[offset - 1].isspace():
            return i - 1
        return i

    def after_word(self, i: int) -> int:
        """Smallest cut offset that keeps word ``i - 1`` on the left of the cut."""
        if i > len(self.word_starts):
            return self.n + 1  # there is no such word: nothing can satisfy the bound
        return self.word_starts[i - 1] + 1 if i >= 1 else 0

    def upto_word(self, i: int) -> int:
        """Largest cut offset that keeps word ``i`` on the right of the cut."""
        return self.word_starts[i] if i < len(self.word_starts) else self.n

    def snap(self, offset: int) -> int:
        """Move a word start back to its line start when only indentation precedes it.

        Cutting there keeps the indentation (or list nesting) that gives the line its
        meaning, e.g. an indented code line stays code instead of becoming a fence.
        """
        if offset == 0 or self.text[offset - 1] == "\n":
            return offset
        line_start = self.text.rfind("\n", 0, offset) + 1
        if self.text[line_start:offset].isspace():
            return line_start
        return offset

    def next_line_start(self, offset: int) -> int:
        nl = self.text.find("\n", offset)
        return self.n if nl < 0 else nl + 1

    def skip_blank_lines(self, offset: int, limit: int) -> int:
        match = _NON_SPACE.search(self.text, offset, limit)
        if match is None:
            return limit
        return max(offset, self.text.rfind("\n", 0, match.start()) + 1)

    def atomic_containing(self, offset: int) -> _Atomic | None:
        """The atomic region strictly containing ``offset`` (its start is not inside)."""
        i = bisect_right(self.atomic_starts, offset) - 1
        if i >= 0:
            atomic = self.atomics[i]
            if atomic.start < offset < atomic.end:
                return atomic
        return None

    def heading_zone_containing(self, offset: int) -> _Heading | None:
        i = bisect_left(self.heading_starts, offset) - 1
        if i >= 0 and offset <= self.headings[i].zone_end:
            return self.headings[i]
        return None

    def starts_block_mid_line(self, offset: int) -> bool:
        """Would a chunk starting here begin with a block (fence, list...) the source lacks?"""
        return (
            offset > 0 and self.text[offset - 1] != "\n" and _BLOCK_START.match(self.text, offset) is not None
        )

    def can_cut(self, offset: int, keep_headings: bool = True) -> bool:
        """May a chunk boundary fall here?  ``keep_headings=False`` allows orphaning one."""
        return (
            0 < offset < self.n
            and self.atomic_containing(offset) is None
            and (not keep_headings or self.heading_zone_containing(offset) is None)
            and not self.starts_block_mid_line(offset)
        )

    def heading_path_at(self, offset: int) -> tuple[str, ...]:
        match = _NON_SPACE.search(self.text, offset)
        first_char = match.start() if match else offset
        i = bisect_right(self.heading_starts, first_char) - 1
        return self.headings[i].path if i >= 0 else ()


def _heading_text(inline_source: str) -> str:
    """Heading text as a reader sees it: markup such as `code`, *em* or links removed.

    A trailing ``{#id .class}`` attribute list is dropped too: Hugo renders it as
    an anchor, not as text, so it would only add noise to ``headingPath``.
    """
    inline_source = _HEADING_ATTRIBUTES.sub("", inline_source)
    if _INLINE_MARKUP.search(inline_source):
        parsed = _INLINE_MD.parseInline(inline_source)
        text = _plain_text(parsed[0].children or []) if parsed else inline_source
    else:
        text = inline_source
    return " ".join(text.split())


def _plain_text(tokens: list[Token]) -> str:
    parts: list[str] = []
    for tok in tokens:
        if tok.type in ("text", "code_inline"):
            parts.append(tok.content)
        elif tok.type in ("softbreak", "hardbreak"):
            parts.append(" ")
        elif tok.type == "image":
            parts.append(_plain_text(tok.children or []))
    return "".join(parts)


def _is_closing_fence(line: str, markup: str, top_level: bool = True) -> bool:
    """Is ``line`` a closing fence for ``markup``?  Nested lines may carry "> " prefixes."""
    if top_level:
        stripped = line.lstrip(" ")
        if len(line) - len(stripped) > 3:
            return False  # indented 4+ columns: code content, not a fence
    else:
        stripped = line.lstrip(" \t>")
    run = len(stripped) - len(stripped.lstrip(markup[0]))
    return run >= len(markup) and stripped[run:].strip() == ""


def _balanced_out_of_context(block: str) -> bool:
    """Do these lines, read at the top level of a document, leave no fence open?"""
    return not _unclosed_top_level_fence(block)


def _unclosed_top_level_fence(text: str) -> str:
    """The marker of a top-level fence ``text`` leaves open (runs to its end), else ""."""
    lines = text.split("\n")
    for tok in _BLOCK_MD.parse(text):
        if tok.type == "fence" and tok.level == 0:
            first, last = tok.map  # type: ignore[misc]
            if not (last - 1 > first and _is_closing_fence(lines[last - 1], tok.markup)):
                return tok.markup
    return ""


def _merge_overlapping(atomics: list[_Atomic]) -> list[_Atomic]:
    """Opaque containers may swallow other atomic regions; keep the list disjoint."""
    merged: list[_Atomic] = []
    for atomic in sorted(atomics, key=lambda a: (a.start, -a.end)):
        if merged and atomic.start < merged[-1].end:  # only opaque regions overlap others
            last = merged[-1]
            end = max(last.end, atomic.end)
            merged[-1] = _Atomic(last.start, end, _OPAQUE, "", last.start, end)
        else:
            merged.append(atomic)
    return merged


def _context_prefix(doc: Document) -> str:
    """Title, description and tags, so the first chunk says what the page is about."""
    lines = []
    for part in (doc.title, doc.description):
        text = " ".join(str(part or "").split())
        if text:
            lines.append(_escape_fence_start(text))
    tags = [" ".join(str(tag).split()) for tag in (doc.tags or [])]
    tags = [tag for tag in tags if tag]
    if tags:
        lines.append(_escape_fence_start("Tags: " + ", ".join(tags)))
    return "\n".join(lines) + "\n\n" if lines else ""


def _escape_fence_start(line: str) -> str:
    # A title like "```foo" would open a code fence swallowing the whole chunk.
    return "\\" + line if _FENCE_RUN.match(line) else line


class _Planner:
    """Chooses chunk boundaries for one document (one instance per call, no shared state)."""

    def __init__(self, layout: _Layout, params: ChunkingParams, context: str) -> None:
        self.layout = layout
        self.params = params
        self.context = context
        self.overlap_cap = params.max_chars // 4
        self.closer_allowance = max(len(layout.closer) + 1 if layout.closer else 0, layout.risky_closer_length())

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
        if spans and _BLOCK_START.match(self.context):
            # A title like "- Intro" makes a list item that can swallow the body's
            # first lines (and a fence among them): check chunk 0 like a risky one.
            spans[0] = self._verified(spans[0], force=True)
        return [self._verified(span) for span in spans]

    def _verified(self, span: ChunkSpan, force: bool = False) -> ChunkSpan:
        """Close a fence left open by a container-nested block read out of its container.

        Top-level fences stay balanced by construction (see the module docstring); a
        fence nested in a list or quote, or an HTML block with fence-like lines, can
        read differently without the container's first line, so the (rare) chunks
        holding one are parsed again and, if needed, given a closing fence.
        """
        layout = self.layout
        i = bisect_left(layout.risky_starts, span.end) - 1
        if not force and (i < 0 or layout.risky_ends[i] <= span.overlap_start):
            return span
        markup = _unclosed_top_level_fence(render_span(layout.text, span))
        if not markup:
            return span
        return replace(span, suffix=f"{span.suffix}\n{markup}" if span.suffix else markup)

    def _is_hard(self, atomic: _Atomic) -> bool:
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
                if atomic.kind == _OPAQUE or offset >= atomic.closing_start:
                    offset = atomic.end  # nothing worth re-wrapping (or no safe way to)
                    continue
                if offset < atomic.content_start:
                    offset = atomic.content_start  # don't copy half an opening line
                    continue
                if atomic.kind == _FENCE_NESTED and text[offset - 1] != "\n":
                    offset = layout.next_line_start(offset)  # keep the line's indentation/">"
                    continue
            if layout.starts_block_mid_line(offset):
                offset = layout.snap(layout.upto_word(bisect_right(words, offset)))
                continue
            prefix = atomic.opener + "\n" if atomic is not None and atomic.kind in _REWRAP_KINDS else ""
            if prefix and len(prefix) + start - offset > self.overlap_cap:
                offset = atomic.end  # type: ignore[union-attr]
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
        match = _IN_TOKEN_PUNCT.search(text, limit, start - 1)
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
            cut = self._choose_cut(pos, run_end, char_limit)
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

    def _choose_cut(self, pos: int, run_end: int, char_limit: int) -> int:
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
        best: _Heading | None = None
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
        for match in _IN_TOKEN_PUNCT.finditer(text, floor, hi):
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


def plan_chunks(doc: Document, params: ChunkingParams = ChunkingParams()) -> tuple[str, list[ChunkSpan]]:
    """The body as chunked (line endings normalised) and where each chunk's text comes from."""
    body = doc.body.replace("\r\n", "\n").replace("\r", "\n")
    layout = _Layout(body)
    return body, _Planner(layout, params, _context_prefix(doc)).plan()


def render_span(body: str, span: ChunkSpan) -> str:
    """The chunk text of ``span``; blank lines around it are dropped, nothing else changes."""
    text = body[span.overlap_start : span.end].rstrip()
    if not span.rewrapped:  # inside a re-wrapped block, leading blank lines are code
        text = _LEADING_BLANK_LINES.sub("", text, count=1)
    if span.suffix:
        text += "\n" + span.suffix
    return (span.prefix + text).rstrip()


def chunk_document(doc: Document, params: ChunkingParams = ChunkingParams()) -> list[Chunk]:
    """Split ``doc`` into heading-aware, overlapping chunks with balanced code fences.

    See the module docstring for the size, overlap and fence guarantees.  The output
    depends only on ``doc`` and ``params`` (IDs are index based: ``<collection>/<slug>/
    chunk-<i>``), so rebuilding an unchanged document yields identical chunks.
    """
    body, spans = plan_chunks(doc, params)
    texts = [render_span(body, span) for span in spans]
    total = len(texts)
    return [
        Chunk(
            id=f"{doc.collection}/{doc.slug}/chunk-{i}",
            text=text,
            collection=doc.collection,
            slug=doc.slug,
            title=doc.title,
            chunk_index=i,
            total_chunks=total,
            heading_path=list(span.heading_path),
            word_count=len(text.split()),
            tags=list(doc.tags),
        )
        for i, (span, text) in enumerate(zip(spans, texts))
    ]
