"""The Markdown block model the chunker cuts along: one markdown-it parse of a body into offsets.

Headings with their heading paths, block starts, atomic regions (code, fences, fenced HTML,
opaque lists/quotes) and the word/line offsets that say where a chunk boundary may fall.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np
from markdown_it import MarkdownIt
from markdown_it.token import Token

# Block structure only: the core "inline" rule is what makes a full parse ~2x slower,
# and chunking only needs block tokens and their line maps.  Only read after creation.
_BLOCK_MD = MarkdownIt("commonmark").disable(["inline", "text_join"])
# The same without the "normalize" core rule, which rewrites every line break with a regular
# expression (a tenth of the parse) and changes nothing in a text without "\r" or NUL.
_BLOCK_MD_NORMALISED = MarkdownIt("commonmark").disable(["inline", "text_join", "normalize"])
# Heading texts need inline parsing (to drop emphasis/link markup); used on headings only.
_INLINE_MD = MarkdownIt("commonmark")

_WORD = re.compile(r"\S+")
# re's \s and str.isspace() are the same test (Py_UNICODE_ISSPACE): per ASCII byte, whitespace or not.
_ASCII_SPACE = np.array([chr(b).isspace() for b in range(128)])
_NON_SPACE = re.compile(r"\S")
# A fence marker run; at the start of a line it would open or close a code fence.
FENCE_RUN = re.compile(r"`{3,}|~{3,}")
# Text that, moved to the start of a line, would begin a block other than a paragraph:
# a fence, list item, quote, ATX heading, HTML block or thematic break.  A chunk must not
# start mid-line on such text: a list item or quote could pull the following lines (and
# a fence among them) into a container the source does not have.  ("``` `x`" is no fence,
# but the chunk may end before the second backtick run, so every run counts.)
BLOCK_START = re.compile(
    r"[ \t]*(?:`{3,}|~{3,}|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|#{1,6}(?:[ \t]|$)"
    r"|<[A-Za-z/!?]|(?:[-*_][ \t]*){3,}$)",
    re.MULTILINE,
)
# BLOCK_START less the thematic break, which only the rest of the line can confirm (see
# Layout.starts_block_mid_line); a fence needs three markers, so longer runs are not read.
_BLOCK_OPENER = re.compile(
    r"[ \t]*(?:`{3}|~{3}|[-+*](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$)|>|#{1,6}(?:[ \t]|$)|<[A-Za-z/!?])",
    re.MULTILINE,
)
_THEMATIC_MARK = re.compile(r"[-*_]")
_THEMATIC_CHARS = "-*_ \t"
# A line that looks like a fence marker, allowing indentation and blockquote markers.
_FENCE_LIKE_LINE = re.compile(r"^[ \t>]*(?:`{3,}|~{3,})", re.MULTILINE)
# Goldmark/Pandoc heading attributes ("## Setup {#setup .wide}"): Hugo does not show them.
_HEADING_ATTRIBUTES = re.compile(r"\s*\{[#.][^{}]*\}\s*$")
# Characters whose presence makes parsing a heading's inline markup worthwhile.
_INLINE_MARKUP = re.compile(r"[`*_\[\]<>&!\\]")


# Kinds of atomic (never split) regions.
FENCE_TOP = "fence_top"  # fence at the top level: overlap may start mid-line inside it
FENCE_NESTED = "fence_nested"  # fence in a list/quote: overlap may only start at a line
HTML = "html"  # HTML block containing fence-like lines
CODE = "code"  # indented code block: no re-wrap needed, it holds no fences
OPAQUE = "opaque"  # list/quote holding a fence not explicitly closed: no overlap inside

REWRAP_KINDS = frozenset({FENCE_TOP, FENCE_NESTED, HTML})


@dataclass(frozen=True)
class Atomic:
    """A region a chunk boundary never falls inside (code, fenced HTML, an opaque list/quote)."""

    start: int  # offset of the first line
    end: int  # offset just after the last line
    kind: str
    opener: str  # first source line, prepended when an overlap starts inside
    content_start: int  # offset of the second line (overlap never starts on line 1)
    closing_start: int  # offset of an explicit closing fence line, else ``end``


@dataclass(frozen=True)
class Heading:
    """A top-level heading: where it starts, the zone a cut would orphan it in, its path."""

    start: int
    zone_end: int  # offset of the next block: a cut in (start, zone_end] orphans the heading
    level: int
    path: tuple[str, ...]


class Layout:
    """Offsets of everything the cut search needs, computed from one parse of the body."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.n = len(text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.word_starts = word_starts(text)
        # Per line, computed once when first asked: a long line must not be re-read for
        # every word on it (that made one 700 KB line take minutes).
        self._indent_ends: dict[int, int] = {}
        self._thematic_tails: dict[int, tuple[int, int]] = {}
        self.closer = ""  # closing fence for a top-level fence left open at end of body
        atomics: list[Atomic] = []
        headings: list[Heading] = []
        block_starts: list[int] = []
        tokens = block_tokens(text)
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
                headings.append(Heading(start, zone_end, level, tuple(t for _, t in stack)))
            elif tok.type in ("fence", "code_block", "html_block"):
                atomic = self._atomic(tok, top_map)
                if atomic is not None:
                    atomics.append(atomic)
        self.atomics = _merge_overlapping(atomics)
        self.atomic_starts = [a.start for a in self.atomics]
        risky = [a for a in self.atomics if a.kind in (FENCE_NESTED, OPAQUE, HTML)]
        self.risky_starts = [a.start for a in risky]
        self.risky_ends = [a.end for a in risky]
        self.headings = headings
        self.heading_starts = [h.start for h in headings]
        self.block_starts = sorted(set(block_starts))

    # --- construction helpers -------------------------------------------------

    def _line_offset(self, line: int) -> int:
        return self.line_starts[line] if line < len(self.line_starts) else self.n

    def _line_of(self, offset: int) -> int:
        return bisect_right(self.line_starts, offset) - 1

    def _line_end(self, line: int) -> int:
        """Offset of the line's newline (or of the end of the text)."""
        return self.line_starts[line + 1] - 1 if line + 1 < len(self.line_starts) else self.n

    def _indent_end(self, line: int) -> int:
        """Offset of the line's first non-space character (its end when it is blank)."""
        if line not in self._indent_ends:
            end = self._line_end(line)
            match = _NON_SPACE.search(self.text, self.line_starts[line], end)
            self._indent_ends[line] = match.start() if match else end
        return self._indent_ends[line]

    def _thematic_tail(self, line: int) -> tuple[int, int]:
        """Where the line's closing run of ``-*_`` and blanks starts, and its third-last marker.

        Text from an offset reads as a thematic break when it lies in that run and holds at
        least three markers, i.e. between the two (-1 when the run has fewer than three).
        """
        if line not in self._thematic_tails:
            start, end = self.line_starts[line], self._line_end(line)
            tail = start + len(self.text[start:end].rstrip(_THEMATIC_CHARS))
            marks = [m.start() for m in _THEMATIC_MARK.finditer(self.text, tail, end)]
            self._thematic_tails[line] = (tail, marks[-3] if len(marks) >= 3 else -1)
        return self._thematic_tails[line]

    def _line_text(self, line: int) -> str:
        return self.text[self._line_offset(line) : self._line_offset(line + 1)].rstrip("\n")

    def _next_block_start(self, tokens: list[Token], idx: int) -> int:
        # By index, not over a slice: copying ``tokens[idx:]`` for every heading made a
        # note of 40,000 headings take minutes (the next block is a few tokens away).
        for j in range(idx, len(tokens)):
            tok = tokens[j]
            if tok.map is not None and tok.nesting != -1:
                return self._line_offset(tok.map[0])
        return self.n

    def _atomic(self, tok: Token, top_map: list[int] | None) -> Atomic | None:
        first, last = tok.map  # type: ignore[misc]  # a block token always has its lines
        start, end = self._line_offset(first), self._line_offset(last)
        opener = self._line_text(first)
        content_start = self._line_offset(first + 1) if last > first + 1 else end
        if tok.type == "code_block":
            return Atomic(start, end, CODE, opener, start, end)
        if tok.type == "html_block":
            if not _FENCE_LIKE_LINE.search(tok.content):
                return None  # ordinary HTML: may be cut like prose
            return Atomic(start, end, HTML, opener, content_start, end)
        closed = last - 1 > first and _is_closing_fence(self._line_text(last - 1), tok.markup, tok.level == 0)
        closing_start = self._line_offset(last - 1) if closed else end
        if tok.level == 0:
            if not closed:
                self.closer = tok.markup  # a top-level fence only ends unclosed at end of body
            return Atomic(start, end, FENCE_TOP, opener, content_start, closing_start)
        if top_map is None or (closed and _balanced_out_of_context(self.text[start:end])):
            return Atomic(start, end, FENCE_NESTED, opener, content_start, closing_start)
        # A chunk starting inside its list/quote would read this fence without the
        # container's indentation, where it would not be closed (it is closed only by
        # the container's end, or its closing line is indented 4+ columns in absolute
        # terms): the whole top-level container becomes one opaque atomic region.
        top_start, top_end = self._line_offset(top_map[0]), self._line_offset(top_map[1])
        return Atomic(top_start, top_end, OPAQUE, "", top_start, top_end)

    # --- queries ---------------------------------------------------------------

    def risky_closer_length(self) -> int:
        """Room to keep for a closing fence :meth:`~rag_assets.ingest.packing.Planner._verified` may append."""
        runs = [
            len(m.group())
            for start, end in zip(self.risky_starts, self.risky_ends)
            for m in FENCE_RUN.finditer(self.text, start, end)
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
        line = self._line_of(offset)
        return self.line_starts[line] if self._indent_end(line) >= offset else offset

    def next_line_start(self, offset: int) -> int:
        line = self._line_of(offset)
        return self.line_starts[line + 1] if line + 1 < len(self.line_starts) else self.n

    def skip_blank_lines(self, offset: int, limit: int) -> int:
        match = _NON_SPACE.search(self.text, offset, limit)
        if match is None:
            return limit
        return max(offset, self.line_starts[self._line_of(match.start())])

    def atomic_containing(self, offset: int) -> Atomic | None:
        """The atomic region strictly containing ``offset`` (its start is not inside)."""
        i = bisect_right(self.atomic_starts, offset) - 1
        if i >= 0:
            atomic = self.atomics[i]
            if atomic.start < offset < atomic.end:
                return atomic
        return None

    def heading_zone_containing(self, offset: int) -> Heading | None:
        i = bisect_left(self.heading_starts, offset) - 1
        if i >= 0 and offset <= self.headings[i].zone_end:
            return self.headings[i]
        return None

    def starts_block_mid_line(self, offset: int) -> bool:
        """Would a chunk starting here begin with a block (fence, list...) the source lacks?"""
        if offset == 0 or self.text[offset - 1] == "\n":
            return False
        if _BLOCK_OPENER.match(self.text, offset) is not None:
            return True
        tail_start, third_last_mark = self._thematic_tail(self._line_of(offset))
        return tail_start <= offset <= third_last_mark

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
    return not unclosed_top_level_fence(block)


def unclosed_top_level_fence(text: str) -> str:
    """The marker of a top-level fence ``text`` leaves open (runs to its end), else ""."""
    lines = text.split("\n")
    for tok in block_tokens(text):
        if tok.type == "fence" and tok.level == 0:
            first, last = tok.map  # type: ignore[misc]  # as in _atomic
            if not (last - 1 > first and _is_closing_fence(lines[last - 1], tok.markup)):
                return tok.markup
    return ""


def block_tokens(text: str) -> list[Token]:
    """markdown-it's block tokens of ``text`` (no inline parse)."""
    if "\r" in text or "\0" in text:
        return _BLOCK_MD.parse(text)
    return _BLOCK_MD_NORMALISED.parse(text)


def _merge_overlapping(atomics: list[Atomic]) -> list[Atomic]:
    """Opaque containers may swallow other atomic regions; keep the list disjoint."""
    merged: list[Atomic] = []
    for atomic in sorted(atomics, key=lambda a: (a.start, -a.end)):
        if merged and atomic.start < merged[-1].end:  # only opaque regions overlap others
            last = merged[-1]
            end = max(last.end, atomic.end)
            merged[-1] = Atomic(last.start, end, OPAQUE, "", last.start, end)
        else:
            merged.append(atomic)
    return merged


def word_starts(text: str) -> list[int]:
    """Offsets where each ``\\S+`` word of ``text`` starts; ASCII text (most of it) with numpy,
    since a Python match object per word was a fifth of chunking."""
    if not text.isascii():
        return [m.start() for m in _WORD.finditer(text)]
    space = _ASCII_SPACE[np.frombuffer(text.encode("ascii"), dtype=np.uint8)]
    starts = ~space
    starts[1:] &= space[:-1]  # a non-space after a space (or at the start)
    return np.flatnonzero(starts).tolist()
