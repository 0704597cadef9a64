"""What the served page shows is read as people read it, in Chromium over a real build: sources
rendered from a block boundary (a long table cut into chunks), chips named by their headings,
no CLI flag in the page's words, and a phone screen where the header is small and Ask is near."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.serve.http import create_app

from .browser import screenshot
from .live_server import ServerThread
from .shared_build import shared_build

ROWS = "\n".join(f"| host{i:02d} | 10.0.{i}.1 | vlan {i} | switch port {i} on the **rack** |" for i in range(70))
FILLER = "Plain words about the homelab keep this page long enough to be a real page with a few sentences. "
CONTENT = {
    "content/docs/inventory.md": f"""---
title: Hardware inventory
---
# Inventory

The machines of the homelab, one row each.

## Network hosts

| Host | Address | VLAN | Where |
|---|---|---|---|
{ROWS}

## Power

The UPS keeps the rack alive for twenty minutes.
""",
    # No H1: the text before the first heading belongs to the page itself.
    "content/docs/wireguard.md": f"""---
title: WireGuard tunnel
---
The wireguard tunnel links the homelab to the cloud box; wireguard keys rotate yearly.
{FILLER * 12}

## Tunnel setup

Create the wireguard interface wg0 with wg-quick and a private key per wireguard peer.
{FILLER * 12}

## Peers

Every wireguard peer lists its allowed IPs; a phone is a wireguard peer too.
{FILLER * 12}
""",
    **{
        f"content/posts/note-{i}.md": f"---\ntitle: Homelab note {i}\n---\n# Homelab note {i}\n\n{FILLER * 3}\n"
        for i in range(12)
    },
}


def build_site(root: Path) -> None:
    for rel, text in CONTENT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    (root / "identity_map.json").write_text(json.dumps({"version": 1, "salt": "test", "rules": []}), encoding="utf-8")
    (root / "rag.yaml").write_text(
        "content_dir: content\noutput_dir: out\nidentity_map: identity_map.json\n", encoding="utf-8"
    )
    # An ephemeral instance: the page reads the stores, not the run history.
    outcome = run_build(site_config(root), dg.DagsterInstance.ephemeral())
    assert outcome.success, outcome.error or outcome.failed_checks


def site_config(root: Path):
    return load_config(root / "rag.yaml", embedder="hashing", private_embedder="hashing", environ={})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One build shared by the xdist workers (the tests only read it), each worker's own server."""
    cfg = site_config(shared_build(tmp_path_factory, "rendered-site", build_site))
    with ServerThread(create_app(cfg)) as running:
        yield running


def open_page(page, server) -> list[str]:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.set_default_timeout(10_000)
    page.goto(server.url + "/")
    page.wait_for_selector("body[data-ready]")
    page.wait_for_function("() => document.getElementById('status-model').textContent !== '…'")
    return errors


def search(page, text: str) -> None:
    page.get_by_label("Search the notes").fill(text)
    page.wait_for_function(
        "q => new URL(location.href).searchParams.get('q') === q && document.querySelector('.result') !== null"
        " && !document.getElementById('results').hasAttribute('aria-busy')",
        arg=text,
    )


def test_a_section_cut_inside_a_table_opens_rendered_from_a_whole_row(server, page):
    errors = open_page(page, server)
    search(page, "host60")
    first = page.locator(".result").first
    assert first.locator(".result-title").inner_text() == "Hardware inventory"
    snippet = first.locator(".snippet").inner_text()
    assert "host60" in snippet and "|" not in snippet and "**" not in snippet  # plain text, no Markdown
    first.locator(".result-title button").click()
    text = page.locator("#source-text")
    # The chunk starts among the rows: shown as a table from a whole row, its cells rendered.
    assert text.evaluate("el => el.firstElementChild.tagName") == "TABLE"
    first_cell = text.locator("tbody tr").first.locator("td").first.inner_text()
    assert first_cell.startswith("host"), first_cell
    assert text.locator("td strong").first.inner_text() == "rack"
    assert "|" not in text.inner_text() and "**" not in text.inner_text()
    assert text.locator("mark").count() >= 1  # the query's words marked in the rendered text
    assert errors == []


def test_sections_are_chipped_by_their_headings(server, page):
    open_page(page, server)
    search(page, "wireguard peer keys")
    result = page.locator(".result", has=page.locator(".result-title", has_text="WireGuard tunnel"))
    chips = result.locator(".chip").all_inner_texts()
    assert chips, "the page matches in more than one section"
    assert "another section" not in chips
    assert set(chips) <= {
        "WireGuard tunnel",
        "Tunnel setup",
        "Peers",
        "Tunnel setup (continued)",
        "Peers (continued)",
        "WireGuard tunnel (continued)",
    }, chips


def test_the_page_does_not_tell_people_about_cli_flags(server, page):
    open_page(page, server)
    page.get_by_label("Search the notes").fill("qwxzv blorft")
    page.wait_for_function("() => document.getElementById('search-status').textContent.includes('threshold')")
    status = page.locator("#search-status").inner_text()
    assert "--min-score" not in status and "min_score" not in status, status
    assert "closest" in status
    assert "--" not in page.locator("body").inner_text()


def test_at_phone_width_the_header_is_small_and_ask_is_near(server, chromium):
    context = chromium.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        page = context.new_page()
        open_page(page, server)
        screenshot(page, "web-page-phone-top")
        header = page.locator("header").bounding_box()
        assert header["height"] <= 0.2 * 844, header  # the issue measured 45%
        search(page, "homelab")
        assert page.locator(".result").count() >= 8
        ask = page.get_by_label("Ask a question about the notes")
        last = page.locator(".result").last.bounding_box()
        box = ask.bounding_box()
        # Ask comes before the end of the results, within the first screen and a half.
        assert box["y"] < last["y"] + last["height"] and box["y"] + box["height"] <= 1.5 * 844, (box, last)
        width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width[0] <= width[1] == 390, width
    finally:
        context.close()
