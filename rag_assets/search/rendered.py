"""A chunk's Markdown as people read it: sanitised HTML and plain text, from a block boundary.

The web page shows a section's text in its source dialog and a snippet of it under each result.
Raw chunk text reads badly there: Markdown syntax (``|`` cells, ``**``, fences) shows as typed,
and a chunk other than a page's first begins with the overlap it repeats from the chunk before,
cut wherever 50 words back fell: mid-sentence, mid-table. :func:`render_section` gives

- ``html``: the text rendered by markdown-it-py (CommonMark and tables) with raw HTML off, so
  ``<script>`` or ``<img onerror=...>`` in a note comes out as escaped text; images become their
  alt text (the page loads nothing from elsewhere), a link only an ``http(s)`` one (opened in a
  new tab, without referrer), headings two levels down (under the dialog's own title);
- ``plain``: the same text without any markup, for snippets;

both starting at a block boundary: a chunk after a page's first that starts among a table's rows
starts at its first whole row, the rows shown as a table under an empty header (the header is in
a chunk before); any other such chunk drops its first, partial block (the overlap: the chunk
before holds it whole) unless it starts with a heading or is a single block; a page's first chunk drops the context lines the chunker put before the body (title,
description, tags: :func:`rag_assets.ingest.chunking.context_prefix`), which the title shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape
from html.parser import HTMLParser
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from rag_assets.index.params import Hit

_CHUNK_INDEX = re.compile(r"/chunk-(\d+)$")
_SAFE_LINK = re.compile(r"^https?://", re.IGNORECASE)
_DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_BLOCK_TAGS = frozenset({"p", "li", "tr", "td", "th", "pre", "h3", "h4", "h5", "h6", "blockquote", "hr", "br"})


@dataclass(frozen=True)
class RenderedText:
    """A section's text for people: sanitised HTML and plain text, from a block boundary."""

    html: str
    plain: str


def chunk_index_of(chunk_id: str) -> int:
    """The ``i`` of a chunk id ``collection/slug/chunk-<i>`` (0 when it has none)."""
    match = _CHUNK_INDEX.search(chunk_id or "")
    return int(match.group(1)) if match else 0


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    md.add_render_rule("image", _render_image)
    md.add_render_rule("link_open", _render_link_open)
    md.add_render_rule("link_close", _render_link_close)
    md.add_render_rule("heading_open", _render_heading)
    md.add_render_rule("heading_close", _render_heading)
    return md


def _render_image(self, tokens: list[Token], idx: int, options, env) -> str:
    alt = "".join(child.content for child in tokens[idx].children or [])
    return f'<span class="image-alt">[image{": " + escape(alt) if alt else ""}]</span>'


def _render_link_open(self, tokens: list[Token], idx: int, options, env) -> str:
    href = str(tokens[idx].attrs.get("href", ""))
    if not _SAFE_LINK.match(href):  # a site path or another scheme: its text only
        env.setdefault("dropped_links", []).append(True)
        return ""
    env.setdefault("dropped_links", []).append(False)
    return f'<a href="{escape(href)}" target="_blank" rel="noopener noreferrer nofollow">'


def _render_link_close(self, tokens: list[Token], idx: int, options, env) -> str:
    # Links do not nest in CommonMark, so the last one opened is the one closing.
    return "" if env.get("dropped_links", [False]).pop() else "</a>"


def _render_heading(self, tokens: list[Token], idx: int, options, env) -> str:
    level = min(6, int(tokens[idx].tag[1]) + 2)
    return f"<h{level}>" if tokens[idx].nesting == 1 else f"</h{level}>\n"


_MD = _markdown()  # only read after creation
# Block structure alone (no inline parsing: most of a parse's time), for finding block starts.
_BLOCKS = MarkdownIt("commonmark", {"html": False}).enable("table").disable(["inline", "text_join"])


def _top_blocks(tokens: list[Token]) -> list[int]:
    """The first line of each top-level block."""
    return [t.map[0] for t in tokens if t.level == 0 and t.nesting >= 0 and t.map is not None]


def _table_rows_start(lines: list[str]) -> int | None:
    """Where the whole rows begin when ``lines`` start inside a table's rows (a chunk cut
    between rows, or its overlap starting mid-row), else None."""
    first_row = 0 if _is_row(lines[0]) else 1
    if first_row == 1 and not (lines[0].rstrip().endswith("|") and len(lines) > 1 and _is_row(lines[1])):
        return None
    if first_row < len(lines) and _DELIMITER_ROW.match(lines[first_row]):
        return None  # a header's delimiter row: the table is whole from here (markdown-it reads it)
    if first_row == 0 and len(lines) > 1 and _is_row(lines[1]) and _cells(lines[0]) < _cells(lines[1]):
        return 1  # "| the end of a row |": cut inside the row, so it has fewer cells than the next
    return first_row


def _is_row(line: str) -> bool:
    return line.lstrip().startswith("|")


def _cells(row: str) -> int:
    return len(row.strip().strip("|").split("|"))


def _headless_table(lines: list[str], first_row: int) -> str:
    """Rows cut off from their table's header, given an empty one so they render as a table."""
    end = first_row
    while end < len(lines) and _is_row(lines[end]):
        end += 1
    cells = _cells(lines[first_row])
    header = "|" + " |" * cells + "\n|" + "---|" * cells
    return "\n".join([header, *lines[first_row:end], "", *lines[end:]])


def block_start(text: str, *, first_chunk: bool, title: str = "") -> str:
    """``text`` from its first whole block (see the module docstring)."""
    lines = text.split("\n")
    if not first_chunk:
        rows = _table_rows_start(lines)
        if rows is not None:  # mid-table: from the first whole row, as a table (its header is in a chunk before)
            return _headless_table(lines, rows)
    tokens = _BLOCKS.parse(text)
    starts = _top_blocks(tokens)
    if len(starts) < 2:
        return text
    first = next(t for t in tokens if t.level == 0 and t.map is not None)
    if first_chunk:
        prefix = lines[starts[0]].strip() == " ".join(title.split()) and first.type == "paragraph_open"
        return "\n".join(lines[starts[1] :]) if title and prefix else text
    if first.type == "heading_open":
        return text
    return "\n".join(lines[starts[1] :])


class _TextOnly(HTMLParser):
    """The text of rendered HTML, a space between blocks."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag in _BLOCK_TAGS:
            self.parts.append(" ")

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "br":
            self.parts.append(" ")


def plain_text(html: str) -> str:
    """Rendered HTML as one line of text."""
    parser = _TextOnly()
    parser.feed(html)
    parser.close()
    return " ".join("".join(parser.parts).split())


def render_section(text: str, *, chunk_index: int = 0, title: str = "") -> RenderedText:
    """``text`` (a chunk's, or a passage starting with chunk ``chunk_index``) for people."""
    html = _MD.render(block_start(text, first_chunk=chunk_index == 0, title=title), {})
    return RenderedText(html=html, plain=plain_text(html))


def rendered_hit_json(hit: Hit) -> dict[str, Any]:
    """``hit.to_json()`` with ``html`` and ``plain`` (:func:`render_section`) on it and on each
    of its sections: what the web page shows instead of the raw Markdown."""
    out = hit.to_json()
    for section, source in zip(out["sections"], hit.sections or [hit]):
        index = source.chunk_index or chunk_index_of(source.id)
        rendered = render_section(source.text, chunk_index=index, title=hit.title)
        section.update(html=rendered.html, plain=rendered.plain)
    out.update(html=out["sections"][0]["html"], plain=out["sections"][0]["plain"])
    return out


def rendered_source_json(source: dict[str, Any]) -> dict[str, Any]:
    """An answer's source (``Source.to_json()``) with ``html`` and ``plain``; its passage starts
    with the chunk its ``id`` names."""
    rendered = render_section(
        source.get("text") or "", chunk_index=chunk_index_of(source.get("id", "")), title=source.get("title") or ""
    )
    return {**source, "html": rendered.html, "plain": rendered.plain}
