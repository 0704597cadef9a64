"""Secrets named by the structure around them rather than by the words right before them.

The generic scanner (``generic.py``) reads ``password: hunter2``, where the name sits just
before the value. Notes often put the name elsewhere:

* a table cell under a ``Password`` / ``Token`` / ``Secret`` / ``API key`` column header, or
  beside a row label (``| Password | hunter2 |``), in Markdown or in an HTML ``<table>``
  (Obsidian renders both);
* a definition list's term (``Password`` on one line, ``: hunter2`` on the next);
* a line's label before a dash or an arrow, or a label of a few words
  (``- Password — hunter2``, ``Root password (nas): hunter2``), or before the ``::`` of an
  Obsidian Dataview field (``Root password (nas):: hunter2``; ``password:: hunter2`` and
  ``[password:: hunter2]`` are the generic scanner's);
* a frontmatter value under its key path (``db: {password: ...}``, a list under
  ``passwords:``), which the sanitiser reads one value at a time (:func:`field_line`).

This scanner finds the name through the structure, hands the pair to the generic scanner as
``name: value`` and maps what it finds back onto the text. The value still has to look like
a secret of that family (``generic_value_ok``), so a ``Key`` column of keyboard shortcuts or
a ``Token`` column of a tokenizer's vocabulary stays as it is.

Linear in the text: tables are found by their delimiter rows and each row is read once,
definitions by their ``:`` lines, labels from the keyword hits (each line start once), and
a name is at most ``MAX_NAME`` characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain

from rag_assets.privacy.secrets import generic
from rag_assets.privacy.secrets.context import lower_same_length

MAX_NAME = 64  # a longer header, term or label is prose, not a name
_MAX_LABEL_WORDS = 6
_MAX_VALUE_LINE = 1000  # the generic scanner reads at most 200 characters of a value

# A table's delimiter row (| --- | :---: |) after the header line; a pipe is required, since
# "---" alone is a thematic break or a heading underline. The patterns start with the newline,
# a literal the regex engine skips to, rather than "^" tried at every position.
_DELIMITER_ROW_RE = re.compile(r"\n[ \t]{0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*(?=\n|\Z)")
_PIPE_RE = re.compile(r"(?<!\\)\|")
# A definition: ": value" right under its term (Pandoc, PHP Markdown Extra, Obsidian plugins).
_DEFINITION_RE = re.compile(r"\n[ \t]{0,3}:[ \t]+(?=\S)")

# "- **Password** — value", "Root password (nas): value", "NAS password → value".
_LABEL_RE = re.compile(
    r"""
    [ \t]{0,3}(?:[-*+>][ \t]+|\d{1,3}[.)][ \t]+)?           # a list item or a quote
    (?:\*\*|__|\*|`)?
    (?P<label>[^\n:=|\u2014\u2013\u2192\[\]{}<>"`;,!?]{1,64}?)  # a name: no brackets, quotes or clause marks
    [ \t]*(?:\*\*|__|\*|`)?[ \t]*
    (?:\u2014|\u2013|\u2192|->|=>|::|:|=|-(?=[ \t]))        # em/en dash, arrows, colon(s), " - "
    [ \t]*(?:\*\*|__)?[ \t]*(?=\S)
    """,
    re.X,
)
_NAME_JUNK_RE = re.compile(r"[^A-Za-z0-9]+")


def spans(text: str, low: str) -> Iterable[tuple[int, int, str]]:
    """Values a table header or row label, a definition term or a line label names a secret."""
    if "|" in text:
        yield from _table_spans(text, low)
    if "<t" in low:
        yield from _html_table_spans(text)
    if ":" in text:
        yield from _definition_spans(text)
    yield from _label_spans(text, low)


def name_ident(name: str) -> str | None:
    """``name`` as an identifier the generic scanner reads ("Root password (nas)" becomes
    ``Root_password_nas``), or None when it names no secret."""
    if len(name) > MAX_NAME or not _has_keyword(name.lower()):
        return None
    ident = _NAME_JUNK_RE.sub("_", name).strip("_")
    if not ident or generic.classify_ident(generic.ident_parts(ident)) is None:
        return None
    return ident


def value_spans(ident: str, value: str, offset: int) -> Iterator[tuple[int, int, str]]:
    """What the generic scanner finds in ``value`` once named ``ident``, shifted by ``offset``."""
    line = f"{ident}: {value}"
    base = len(ident) + 2
    for start, end, kind in generic.spans(line, lower_same_length(line)):
        start = max(start, base)
        if start < end:
            yield start - base + offset, end - base + offset, kind


# --------------------------------------------------------------------------------------
# Markdown structures
# --------------------------------------------------------------------------------------


def _has_keyword(low: str) -> bool:
    """``low`` holds one of the generic scanner's keywords: only then can it name a secret."""
    return any(kw in low for kw in generic.KEYWORDS)


def _table_spans(text: str, low: str) -> Iterator[tuple[int, int, str]]:
    scanned_to = 0  # a delimiter-looking row inside a table already read starts nothing
    for delimiter in _DELIMITER_ROW_RE.finditer(text):
        if delimiter.start() < scanned_to or "|" not in delimiter.group():
            continue
        header_end = delimiter.start()  # the delimiter match starts with the header's newline
        header_start = text.rfind("\n", 0, header_end) + 1
        headers = [name_ident(_stripped(text, s, e)[2]) for s, e in _cells(text, header_start, header_end)]
        named = any(headers)
        pos = delimiter.end() + 1
        while pos < len(text):
            line_end = _line_end(text, pos)
            if text.find("|", pos, line_end) < 0:
                break  # a blank line or a paragraph ends the table
            if named or _has_keyword(low[pos:line_end]):  # else no cell of the row is named
                yield from _row_spans(text, _cells(text, pos, line_end), headers)
            pos = line_end + 1
        scanned_to = pos


def _row_spans(text: str, cells: list[tuple[int, int]], headers: list[str | None]) -> Iterator[tuple[int, int, str]]:
    """Each cell named by its column header and by the row's label (its first cell)."""
    row_label = name_ident(_stripped(text, *cells[0])[2]) if cells else None
    for i, (start, end) in enumerate(cells):
        names = [headers[i] if i < len(headers) else None, row_label if i > 0 else None]
        v_start, _, value = _stripped(text, start, end)
        for name in filter(None, names):
            yield from value_spans(name, value, v_start)


def _cells(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The cells of a table row as (start, end); the outer pipes are optional."""
    edges = [start - 1, *(m.start() for m in _PIPE_RE.finditer(text, start, end)), end]
    cells = [(a + 1, b) for a, b in zip(edges, edges[1:], strict=False)]
    if len(cells) > 1 and not text[cells[0][0] : cells[0][1]].strip():
        cells = cells[1:]
    if len(cells) > 1 and not text[cells[-1][0] : cells[-1][1]].strip():
        cells = cells[:-1]
    return cells


# An HTML table's tags, read as one stream (one pass over the text, whatever it holds): a cell's
# content runs from its <th>/<td> to the next table tag, so an unclosed cell costs nothing extra.
_HTML_TABLE_TAG_RE = re.compile(r"<(/?)(table|tr|th|td)\b[^<>]{0,200}>", re.I)
_HTML_LEAD_RE = re.compile(r"(?:\s|<[^<>]{0,100}>)*")
_MAX_EDGE_TAGS = 10  # inline tags closed after a cell's value (</code></b>...) that are looked past


def _html_table_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """Cells of HTML tables named by their column header (a <th> row) or their row's first cell."""
    headers: list[str | None] = []
    row: list[tuple[int, int, bool]] = []  # the current row's cells: content bounds, is a <th>
    cell: tuple[int, bool] | None = None  # (content start, is a <th>) of the open cell
    for tag in chain(_HTML_TABLE_TAG_RE.finditer(text), (None,)):  # None: the text ends, as a </table>
        at, name = (tag.start(), tag.group(2).lower()) if tag else (len(text), "table")
        if cell is not None:
            row.append((*_html_content(text, cell[0], at), cell[1]))
            cell = None
        if tag is not None and name in ("th", "td") and not tag.group(1):
            cell = (tag.end(), name == "th")
        elif name in ("tr", "table"):  # a row ends (with the table, its headers)
            if row and all(head for _, _, head in row) and not any(headers):
                headers = [name_ident(text[a:b]) for a, b, _ in row]
            elif row:
                yield from _row_spans(text, [(a, b) for a, b, _ in row], headers)
            row = []
            if name == "table":
                headers = []


def _html_content(text: str, start: int, end: int) -> tuple[int, int]:
    """A cell's bounds without the whitespace and inline tags (<code>, <b>) around its value; at
    most ``_MAX_VALUE_LINE`` characters are read (the generic scanner reads 200 of a value)."""
    end = min(end, start + _MAX_VALUE_LINE)
    lead = _HTML_LEAD_RE.match(text, start, end)
    assert lead is not None  # a starred pattern always matches, if only the empty string
    begin = lead.end()
    for _ in range(_MAX_EDGE_TAGS):
        end = begin + len(text[begin:end].rstrip())
        if end <= begin or text[end - 1] != ">" or (lt := text.rfind("<", begin, end)) < 0:
            break
        end = lt
    return begin, end


def _definition_spans(text: str) -> Iterator[tuple[int, int, str]]:
    previous: tuple[int, str] | None = None  # (end of the last definition's line, its term)
    for m in _DEFINITION_RE.finditer(text):
        v_start, v_end = m.end(), _line_end(text, m.end())
        term = _term_before(text, m.start() + 1, previous)
        previous = (v_end, term) if term else None
        if term:
            yield from value_spans(term, text[v_start : min(v_end, v_start + _MAX_VALUE_LINE)], v_start)


def _term_before(text: str, line_start: int, previous: tuple[int, str] | None) -> str | None:
    """The term of the definition starting at ``line_start``: the line above (a blank line may
    separate them), or the term of the definition right above it."""
    if previous is not None and previous[0] == line_start - 1:
        return previous[1]
    end = line_start - 1
    for _ in range(2):
        if end < 0:
            return None
        lo = max(0, end - MAX_NAME - 1)
        start = text.rfind("\n", lo, end) + 1
        if start == 0 and lo > 0:
            return None  # longer than a term
        term = text[start:end].strip()
        if term:
            return name_ident(term)
        end = start - 1
    return None


def _label_spans(text: str, low: str) -> Iterator[tuple[int, int, str]]:
    seen: set[int] = set()
    for hit, _ in generic.keyword_hits(low):
        lo = max(0, hit - MAX_NAME - 8)
        line_start = text.rfind("\n", lo, hit) + 1
        if (line_start == 0 and lo > 0) or line_start in seen:
            continue  # too far into its line to be part of a label, or that line was read
        seen.add(line_start)
        m = _LABEL_RE.match(text, line_start)
        if m is None or m.group("label").count(" ") >= _MAX_LABEL_WORDS:
            continue
        ident = name_ident(m.group("label").strip())
        if ident is not None:
            v_end = min(_line_end(text, m.end()), m.end() + _MAX_VALUE_LINE)
            yield from value_spans(ident, text[m.end() : v_end], m.end())


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _stripped(text: str, start: int, end: int) -> tuple[int, int, str]:
    """``text[start:end]`` without its surrounding whitespace, with its new bounds."""
    raw = text[start:end]
    value = raw.strip()
    if not value:
        return start, start, ""
    start += len(raw) - len(raw.lstrip())
    return start, start + len(value), value


# --------------------------------------------------------------------------------------
# Structured values (frontmatter)
# --------------------------------------------------------------------------------------


def field_line(path: Sequence[str], value: str) -> tuple[str, int, int]:
    """How the detector reads one structured value: ``db.password: "value"``, with the value's
    span in that line. The last two keys of the path name it (``password`` under ``db``, a
    ``policy`` under ``password``); a value with spaces is quoted, since its bounds are known."""
    ident = path_ident(path)
    if not ident:
        return value, 0, len(value)
    quote = ""
    if "\n" not in value and any(c.isspace() for c in value):
        quote = next((q for q in ('"', "'") if q not in value), "")
    prefix = f"{ident}: {quote}"
    return f"{prefix}{value}{quote}", len(prefix), len(prefix) + len(value)


def path_ident(path: Sequence[str]) -> str:
    """The last two keys of ``path`` as one identifier (``db.password``), at most MAX_NAME long."""
    names = [n for n in (_NAME_JUNK_RE.sub("_", str(k)).strip("_") for k in path[-2:]) if n]
    ident = ".".join(names)
    if len(ident) > MAX_NAME:
        ident = names[-1][:MAX_NAME]
    return ident


def item_path(path: Sequence[str]) -> tuple[str, ...]:
    """The path the items of a list under ``path`` are named by: its last key in the singular
    (``passwords`` names each item a ``password``, ``api_tokens`` an ``api_token``)."""
    if not path:
        return ()
    last = str(path[-1])
    if last.endswith("s") and not last.endswith("ss"):
        last = last[:-1]
    return (*path[:-1], last)
