"""The page at `rag serve`'s /, in a real browser: Debian's Chromium driven by Playwright, over
a real server (uvicorn on loopback), stores from a real build with all three tiers, and the
real POST /ask answering with the loopback chat server (chat_server.py) as its model."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from filelock import FileLock  # the dev extra (pyproject.toml)

from rag_assets.config import load_config
from rag_assets.config.settings import LlmOllamaSettings, LlmSettings
from rag_assets.defs.runner import run_build
from rag_assets.embed.errors import ProviderUnavailable
from rag_assets.serve.http import create_app

from .browser import screenshot
from .chat_server import ChatServer
from .conftest import instance_for_test
from .live_server import ServerThread

FILLER = (
    "This paragraph is ordinary prose about the homelab so that every document is long enough to be "
    "chunked like a real page, with enough words to keep the chunker happy and the ranking honest. "
)

CONTENT = {
    "content/docs/zigbee.md": f"""---
title: Zigbee coordinator
tags: [zigbee]
url: https://example.org/docs/zigbee/
---
# Zigbee coordinator

{FILLER * 6}

## Flashing the coordinator firmware

The Sonoff dongle needs the zigbee2mqtt coordinator firmware flashed with cc2538-bsl before pairing.
Hold the boot button while plugging it in. A note may hold markup: <img src=x onerror="window.pwned=1">
{FILLER * 6}
""",
    "content/docs/backups.md": f"""---
title: Restic backups
---
# Restic backups

{FILLER * 2}

## Offsite repository

Restic pushes encrypted snapshots to a Backblaze B2 bucket every night; prune keeps thirty daily copies.
{FILLER * 2}
""",
    "content/posts/proxmox.md": f"""---
title: Proxmox on a small box
---
# Proxmox on a small box

## Network configuration

Make the bridge vlan-aware so that guests can be tagged per VLAN.
{FILLER * 3}
""",
    "vaults/lab/restore-vm.md": f"""# Restore a VM

## From the nightly backup

Restore the virtual machine from the nightly Proxmox backup with qmrestore, then start it.
{FILLER * 3}
""",
    "vaults/me/garden.md": f"""# Garden diary

## Tomatoes

Planted the cherry tomatoes along the south fence; water them every second evening.
{FILLER * 3}
""",
}

RAG_YAML = """\
content_dir: content
output_dir: out
vaults:
  - {name: lab, path: vaults/lab, tier: safe}
  - {name: me, path: vaults/me, tier: private}
identity_map: identity_map.json
"""


def build_site(root: Path):
    """Content, two vaults (Safe and Private) and a rag.yaml under ``root``, built for real."""
    for rel, text in CONTENT.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "identity_map.json").write_text(json.dumps({"version": 1, "salt": "test", "rules": []}), encoding="utf-8")
    (root / "rag.yaml").write_text(RAG_YAML, encoding="utf-8")
    cfg = load_config(root / "rag.yaml", embedder="hashing", private_embedder="hashing", environ={})
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
    assert outcome.success, outcome.error or outcome.failed_checks
    return cfg


# ------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    """One build shared by the xdist workers (the temp root's parent is common to them):
    the first builds, the other waits on the lock, so two cores do not build it twice."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "web-page-site"
    with FileLock(f"{root}.lock"):
        if not (root / "built").is_file():
            root.mkdir(parents=True, exist_ok=True)
            build_site(root)
            (root / "built").touch()
    return load_config(root / "rag.yaml", embedder="hashing", private_embedder="hashing", environ={})


TOKEN_DELAY = 0.04  # the chat server's pause before each streamed word
ZIGBEE_QUESTION = "how do I flash the zigbee coordinator firmware?"
# Scripted so the streamed answer cites its source twice and a source that does not exist.
SCRIPTED = "Flash the coordinator firmware with cc2538-bsl [1], holding the boot button while plugging it in [1]; see also [7]."


@pytest.fixture(scope="module")
def chat():
    """The loopback chat server: Ollama's /api/chat, one word per streamed piece."""
    with ChatServer(token_delay=TOKEN_DELAY) as server:
        yield server


@pytest.fixture(scope="module")
def server(cfg, chat):
    llm = LlmSettings(name="ollama", ollama=LlmOllamaSettings(host=chat.url), max_retries=0)
    with ServerThread(create_app(dataclasses.replace(cfg, llm=llm))) as running:
        yield running


def open_page(page, server, path: str = "/"):
    errors: list[str] = []  # uncaught exceptions, and anything the page's own policy blocked
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.set_default_timeout(10_000)
    page.goto(server.url + path)
    page.wait_for_selector("body[data-ready]")
    page.wait_for_function("() => document.getElementById('status-model').textContent !== '…'")
    return errors


def search(page, text: str) -> None:
    page.get_by_label("Search the notes").fill(text)
    page.wait_for_selector(".result")


def ask(page, question: str) -> None:
    page.get_by_label("Ask a question about the notes").fill(question)
    page.get_by_role("button", name="Ask", exact=True).click()


def wait_answered(page) -> None:
    page.wait_for_function(
        "() => document.querySelector('.turn:last-child .answer-note')?.textContent.includes('Answered by')"
    )


# ------------------------------------------------------------------------------ tests


def test_the_page_and_its_assets_are_served_with_a_strict_policy(server):
    page = server.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert '<input id="search-input"' in page.text and 'type="module"' in page.text
    script = server.get("/web/js/main.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert server.get("/web/app.css").headers["content-type"].startswith("text/css")
    assert server.get("/web/%2e%2e/web_routes.py").status_code == 404  # only the web folder is served
    # The header's figures: the embedding service and, per served tier, the chat model.
    status = server.get("/status").json()
    assert status["embeddingService"] == {
        "configured": "hashing",
        "selected": "hashing",
        "model": "rag-assets/feature-hash-v1",
        "reachable": True,
        "reason": "configured: hashing",
    }
    assert set(status["chatService"]) == {"public", "safe", "private"}
    assert status["chatService"]["private"] == {
        "available": True,
        "model": "ollama:llama3.2",
        "reason": "configured: ollama",
    }


def test_typing_a_question_shows_results_with_the_words_marked(server, page):
    errors = open_page(page, server)
    header = page.locator("header")
    assert "rag-assets/feature-hash-v1" in header.inner_text()
    assert page.locator("#status-freshness").inner_text() == "Fresh"
    assert page.locator("#status-built").get_attribute("datetime").endswith("Z")
    # The embedder that embeds this tier's queries: the index's own, in use, nothing to warn of.
    embedding = page.locator("#status-embedding")
    assert "hashing: rag-assets/feature-hash-v1 (in use)" in embedding.inner_text()
    assert embedding.locator(".dot.ok").count() == 1 and embedding.locator(".status-warning").count() == 0

    search(page, "flashing the zigbee firmware")
    first = page.locator(".result").first
    assert first.locator(".result-title").inner_text() == "Zigbee coordinator"
    assert first.locator(".heading-path").inner_text() == "Flashing the coordinator firmware"
    assert "docs" in first.locator(".meta").inner_text()
    relevance = float(first.locator(".relevance strong").inner_text())
    assert 0.5 <= relevance <= 1
    marked = {m.lower() for m in first.locator(".snippet mark").all_inner_texts()}
    assert {"flashing", "firmware", "flashed", "zigbee2mqtt"} <= marked  # a word's forms are marked too
    assert "the" not in marked  # a stop word is not marked
    assert "in the public tier" in page.locator("#search-status").inner_text()

    # The section opens in a dialog; markup in a note is shown as text, never run.
    first.locator(".result-title button").click()
    dialog = page.get_by_role("dialog")
    assert "cc2538-bsl" in dialog.inner_text() and '<img src=x onerror="window.pwned=1">' in dialog.inner_text()
    assert page.evaluate("window.pwned") is None
    page.keyboard.press("Escape")
    assert not dialog.is_visible()

    page.get_by_label("Search the notes").fill("qwxzv blorft")
    page.wait_for_function("() => document.getElementById('search-status').textContent.includes('threshold')")
    assert page.locator(".result").count() == 0
    assert errors == []


def test_an_answer_streams_in_and_its_citations_open_the_cited_section(server, chat, page):
    errors = open_page(page, server)
    assert "ollama:llama3.2 (ready)" in page.locator("#status-chat").inner_text()
    search(page, "zigbee coordinator firmware")
    # Record the answer's length at each change: a streamed answer grows in many steps.
    page.evaluate("""() => {
        window.lengths = [];
        new MutationObserver(() => {
            const answer = document.querySelector('.answer-text');
            if (answer) window.lengths.push([performance.now(), answer.textContent.length]);
        }).observe(document.getElementById('chat-log'), {subtree: true, childList: true, characterData: true});
    }""")
    chat.reply(f"text:{SCRIPTED}")
    ask(page, ZIGBEE_QUESTION)
    wait_answered(page)
    answer = page.locator(".answer-text")
    assert answer.inner_text() == SCRIPTED

    lengths = page.evaluate("window.lengths")
    words = len(SCRIPTED.split())
    assert len({length for _, length in lengths}) >= words // 2, lengths  # partial answers were on screen
    assert lengths[-1][0] - lengths[0][0] >= TOKEN_DELAY * 1000 * (words // 2)
    request = chat.chat_requests[-1].json
    assert request["stream"] is not False and ZIGBEE_QUESTION in request["messages"][-1]["content"]
    assert "llama3.2 (answered)" in page.locator("#status-chat").inner_text()

    # [1] opens its section; [7] names no source: shown struck out, and said under the answer.
    cites = page.locator(".answer-text button.cite")
    assert cites.all_inner_texts() == ["1", "1"]
    assert page.locator(".answer-text .cite.unknown").inner_text() == "7"
    assert "cites [7], which no source has" in page.locator(".answer-note").inner_text()
    cites.first.click()
    dialog = page.get_by_role("dialog")
    assert dialog.get_by_role("heading", name="Zigbee coordinator").is_visible()
    assert dialog.locator("#source-path").inner_text() == "Zigbee coordinator › Flashing the coordinator firmware"
    assert "cc2538-bsl" in dialog.locator("#source-text").inner_text()
    link = dialog.get_by_role("link", name="Open the page")
    assert link.get_attribute("href") == "https://example.org/docs/zigbee/#flashing-the-coordinator-firmware"
    page.keyboard.press("Escape")
    assert not dialog.is_visible()
    assert page.locator(".sources li").count() == 1
    # The README's picture (docs/web-page.png is a copy): no focus ring, no empty space below.
    page.evaluate("() => document.activeElement.blur()")
    page.set_viewport_size({"width": 1100, "height": 560})
    screenshot(page, "web-page-desktop")

    # A citation split over several streamed pieces ("[", "1", "]") is still one button.
    split = page.evaluate("""async () => {
        const { AnswerView } = await import('./web/js/answer-view.js');
        const view = new AnswerView('q');
        view.showSources({sources: [{n: 1, title: 'T', headingPath: [], text: 'x'}]});
        for (const piece of ['See ', '[', '1', ']', ' and [', '1, ', '2]']) view.addToken(piece);
        view.flush();
        return [view.answer.textContent, view.answer.querySelectorAll('button.cite').length,
                view.answer.querySelectorAll('.cite.unknown').length];
    }""")
    assert split == ["See [1] and [1, 2]", 2, 1]
    assert errors == []


def test_an_abstention_and_a_failed_answer_say_why(server, chat, page):
    errors = open_page(page, server)
    ask(page, "zxqv blorptangle wibbleflux quandorium")
    page.wait_for_selector(".turn.abstained")
    turn = page.locator(".turn").last
    assert "Nothing in these notes answers that." in turn.locator(".answer-note").inner_text()
    assert turn.locator(".answer-text").inner_text() == ""  # no answer, no model call
    assert "Nearest pages" in turn.inner_text() and turn.locator(".sources li").count() >= 1

    page.get_by_role("button", name="New conversation").click()  # a follow-up would ask the model to rewrite it
    assert page.locator(".turn").count() == 0
    chat.reply("500")
    ask(page, ZIGBEE_QUESTION)
    page.wait_for_selector(".turn.failed")
    turn = page.locator(".turn").last
    assert "No answer:" in turn.inner_text() and "HTTP 500" in turn.inner_text()
    assert turn.locator(".sources li").count() == 1  # the sources found are still shown
    assert "(failed)" in page.locator("#status-chat").inner_text()
    assert errors == []


def test_an_unreachable_embedder_gives_keyword_results_and_says_so(server, page, monkeypatch):
    def unavailable(tier, index):
        raise ProviderUnavailable("Ollama at http://127.0.0.1:11434 is not reachable")

    monkeypatch.setattr(server.server.config.app.state.tiers, "embedder", unavailable)
    errors = open_page(page, server)
    search(page, "restic snapshots")
    assert page.locator(".result-title").first.inner_text() == "Restic backups"
    assert "keyword (BM25) results" in page.locator("#search-status").inner_text()
    embedding = page.locator("#status-embedding")
    assert "(unreachable)" in embedding.inner_text() and "not reachable" in embedding.get_attribute("title")
    assert errors == []


def test_the_header_names_the_embedder_that_answers_not_the_next_builds(cfg, chromium, monkeypatch):
    """With an API key set, `auto` would build the next index with the remote model; the queries
    of this index are still embedded by the model that built it, and the header says both."""
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-never-sent")
    auto = dataclasses.replace(cfg, embedding=cfg.embedding.model_copy(update={"name": "auto"}))
    with ServerThread(create_app(auto, preload=False)) as running:
        status = running.get("/status").json()
        assert status["embeddingService"]["model"] == "openai/text-embedding-3-small"  # a next build's pick
        used = status["tiers"]["public"]["queryEmbedder"]
        assert (used["provider"], used["model"], used["ready"]) == ("hashing", "rag-assets/feature-hash-v1", True)
        assert used["nextBuild"] == "openai/text-embedding-3-small" and "next build" in used["warning"]
        assert "nextBuild" not in status["tiers"]["private"]["queryEmbedder"]  # Private embeds by its own settings
        page = chromium.new_page()
        try:
            errors = open_page(page, running)
            line = page.locator("#status-embedding")
            text = line.inner_text()
            assert "hashing: rag-assets/feature-hash-v1 (in use)" in text, text
            assert "next build: openai/text-embedding-3-small" in text and "(online)" not in text
            assert line.locator(".dot.warn").count() == 1 and "re-embeds" in line.get_attribute("title")
            # Searches work without the key ever being used: the queries go to the hashing embedder.
            search(page, "restic snapshots")
            assert page.locator(".result-title").first.inner_text() == "Restic backups"
            assert "next build" in line.inner_text()  # a search that worked does not turn it into "online"
            assert errors == []
        finally:
            page.close()


def test_tiers_switch_and_private_is_offered_on_loopback_only(server, cfg, page, chromium):
    open_page(page, server)
    tiers = page.get_by_role("group", name="Tier")
    assert [r.get_attribute("value") for r in tiers.get_by_role("radio").all()] == ["public", "safe", "private"]

    page.get_by_label("Search the notes").fill("restore the virtual machine from the nightly backup")
    page.wait_for_function("() => document.getElementById('search-status').textContent.includes('threshold')")
    assert page.locator(".result").count() == 0  # the public site has no such page
    page.get_by_role("radio", name="Safe").check()
    page.wait_for_function("() => document.getElementById('search-status').textContent.includes('safe tier')")
    assert page.locator(".result-title").first.inner_text() == "Restore a VM"
    assert "tier=safe" in page.url

    page.get_by_label("Search the notes").fill("cherry tomatoes")
    page.get_by_role("radio", name="Private").check()
    page.wait_for_function("() => document.querySelector('.result-title')?.textContent === 'Garden diary'")
    assert "private tier" in page.locator("#search-status").inner_text()

    # The address keeps the tier and the query: a reload (or a shared link) shows the same.
    assert "tier=private" in page.url and "q=cherry+tomatoes" in page.url
    page.reload()
    page.wait_for_function("() => document.querySelector('.result-title')?.textContent === 'Garden diary'")
    assert page.get_by_role("radio", name="Private").is_checked()

    # A server that does not serve Private (not bound to loopback) does not offer it.
    with ServerThread(create_app(cfg, serve_private=False, preload=False)) as remote:
        assert set(remote.get("/status").json()["chatService"]) == {"public", "safe"}
        other = chromium.new_page()
        try:
            open_page(other, remote, "/?tier=private")
            assert [r.get_attribute("value") for r in other.get_by_role("radio").all()] == ["public", "safe"]
            assert other.get_by_role("radio", name="Public").is_checked()
        finally:
            other.close()


def test_everything_works_from_the_keyboard(server, page):
    open_page(page, server)
    page.locator("body").press("/")
    assert page.evaluate("document.activeElement.id") == "search-input"
    page.keyboard.type("restic snapshots")
    # The search of the whole query has run and rendered: on a busy machine the typing is slower
    # than the debounce, and a search of "restic snap" renders first.
    page.wait_for_function(
        "() => new URL(location.href).searchParams.get('q') === 'restic snapshots'"
        " && !document.getElementById('results').hasAttribute('aria-busy')"
        " && document.querySelector('.result') !== null"
    )
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.textContent") == "Restic backups"
    page.keyboard.press("Enter")
    assert page.get_by_role("dialog").is_visible()
    page.keyboard.press("Escape")
    assert page.evaluate("document.activeElement.textContent") == "Restic backups"  # focus came back
    page.keyboard.press("ArrowUp")
    assert page.evaluate("document.activeElement.id") == "search-input"

    page.get_by_label("Ask a question about the notes").focus()
    page.keyboard.type(ZIGBEE_QUESTION)
    page.keyboard.press("Enter")
    wait_answered(page)
    page.locator(".answer-text .cite").first.focus()
    page.keyboard.press("Enter")
    assert "Zigbee coordinator" in page.get_by_role("dialog").inner_text()
    page.keyboard.press("Escape")

    # The tier switch is one radio group: arrow keys move within it.
    page.get_by_role("radio", name="Public").focus()
    page.keyboard.press("ArrowRight")
    assert page.get_by_role("radio", name="Safe").is_checked()


def test_a_phone_width_screen_has_no_horizontal_scroll(server, chromium):
    context = chromium.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, device_scale_factor=2
    )
    try:
        page = context.new_page()
        open_page(page, server)
        search(page, "zigbee coordinator firmware")
        ask(page, ZIGBEE_QUESTION)
        wait_answered(page)
        width = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert width[0] <= width[1] == 390, width
        box = page.locator(".chat-panel").bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390
        screenshot(page, "web-page-phone")
        page.locator(".answer-text .cite").first.tap()  # the cited section fits the screen too
        dialog = page.get_by_role("dialog").bounding_box()
        assert dialog["x"] >= 0 and dialog["x"] + dialog["width"] <= 390
    finally:
        context.close()
