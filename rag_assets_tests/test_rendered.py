"""Sections as the web page shows them (rag_assets.search.rendered): real chunks of a page with a
long table, rendered to sanitised HTML and plain text from a block boundary."""

from __future__ import annotations

import re

from rag_assets.index.params import Hit
from rag_assets.ingest.chunking import chunk_document
from rag_assets.records import Document
from rag_assets.search.rendered import render_section, rendered_hit_json, rendered_source_json

ROWS = "\n".join(f"| host{i:02d} | 10.0.{i}.1 | vlan {i} | switch port {i} on the rack |" for i in range(70))
BODY = f"""# Inventory

Intro paragraph about the hardware, with **bold** words, `code` and <img src=x onerror="window.pwned=1">.

## Network hosts

| Host | Address | VLAN | Where |
|---|---|---|---|
{ROWS}

## Power

The UPS keeps the rack alive for twenty minutes. [Vendor](https://example.org/ups) [a script](javascript:alert(1))
[site page](/docs/power/) ![the rack](http://example.org/rack.png)
"""
DOC = Document(
    "docs",
    "inventory",
    "docs/inventory.md",
    "Hardware inventory",
    "What is in the rack",
    ["lab"],
    {},
    BODY,
    "2026-01-01",
    "x",
)
MARKDOWN_SYNTAX = re.compile(r"\*\*|`|^\s*\||\|\s*$|^#", re.MULTILINE)


def chunks():
    found = chunk_document(DOC)
    assert len(found) >= 3, "the table is long enough to be cut"
    return found


def test_every_chunk_renders_from_a_block_boundary_without_markdown_syntax():
    for chunk in chunks():
        rendered = render_section(chunk.text, chunk_index=chunk.chunk_index, title=DOC.title)
        first_tag = re.match(r"<(\w+)", rendered.html).group(1)
        assert first_tag in {"h3", "h4", "table", "p"}, rendered.html[:200]
        assert not MARKDOWN_SYNTAX.search(rendered.plain), rendered.plain[:200]
        # A chunk cut inside the table starts at a whole row, shown as a table, never with "| 10.0..." text.
        if chunk.chunk_index > 0 and chunk.text.lstrip()[:1] != "#":
            assert first_tag in {"table", "h3", "h4"}, rendered.html[:200]
            assert rendered.plain.startswith("host"), rendered.plain[:80]


def test_the_first_chunk_drops_the_context_lines_and_raw_html_is_escaped():
    first = chunks()[0]
    assert first.text.startswith("Hardware inventory\nWhat is in the rack\nTags: lab")  # the chunker's context lines
    rendered = render_section(first.text, chunk_index=0, title=DOC.title)
    assert rendered.html.startswith("<h3>Inventory</h3>") and "Tags: lab" not in rendered.plain
    assert "<strong>bold</strong>" in rendered.html and "<code>code</code>" in rendered.html
    assert "<img" not in rendered.html and "&lt;img src=x onerror=" in rendered.html
    assert '<img src=x onerror="window.pwned=1">' in rendered.plain  # as text, to be inserted as text


def test_links_are_only_http_and_images_become_their_alt_text():
    last = render_section("## Power\n\n" + BODY.split("## Power\n\n")[1], chunk_index=3)
    assert (
        '<a href="https://example.org/ups" target="_blank" rel="noopener noreferrer nofollow">Vendor</a>' in last.html
    )
    assert 'href="javascript' not in last.html and "a script" in last.plain  # markdown-it leaves it as text
    assert 'href="/docs' not in last.html and "site page" in last.plain
    assert "<img" not in last.html and "[image: the rack]" in last.plain


def test_hits_and_sources_carry_html_and_plain():
    first, second = chunks()[:2]
    hit = Hit(
        id=second.id,
        collection="docs",
        slug="inventory",
        title=DOC.title,
        heading_path=list(second.heading_path),
        text=second.text,
        score=1.0,
        vector_score=None,
        bm25_score=None,
        chunk_index=second.chunk_index,
    )
    out = rendered_hit_json(hit)
    assert out["html"] == out["sections"][0]["html"] and out["html"].startswith("<table>")
    source = rendered_source_json({"id": first.id, "title": DOC.title, "text": first.text})
    assert source["html"].startswith("<h3>Inventory</h3>") and source["text"] == first.text
