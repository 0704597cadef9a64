"""A real Chromium for web-page tests: Debian's /usr/bin/chromium driven by Playwright for Python.

Browsers cannot be downloaded on these machines, so Playwright is pointed at the Debian
package (`.ci/run` installs it when missing). Where Chromium is absent the browser tests are
skipped with the reason, except under CI (``CI=true``), where its absence is a failure: a
test that cannot run there must not pass quietly.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .skip_allowlist import under_ci

CHROMIUM = Path(os.environ.get("RAG_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(os.environ.get("RAG_TEST_SCREENSHOTS", Path(__file__).resolve().parents[1] / ".screenshots"))


def _absent(reason: str) -> None:
    if under_ci():
        pytest.fail(f"{reason} (CI must run the browser tests: .ci/run installs Debian's chromium)")
    pytest.skip(reason)


# Module scope, not session: Playwright's sync API holds an asyncio loop on the main thread
# while it runs, so a later test in the same worker that calls asyncio.run or anyio.run (the
# MCP tests) failed with "Already running asyncio in this thread". Stopped after each browser
# test module, it is gone before they run; a launch costs about a second.
@pytest.fixture(scope="module")
def chromium():
    """A headless Chromium (Playwright ``Browser``), shared by the tests of one module."""
    if not CHROMIUM.is_file():
        _absent(f"no Chromium at {CHROMIUM}: install Debian's package (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _absent("playwright is not installed: pip install -e '.[dev]'")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium):
    """A fresh browser page (its own context: no cookies or storage shared between tests)."""
    context = chromium.new_context(viewport={"width": 1200, "height": 900})
    try:
        yield context.new_page()
    finally:
        context.close()


def screenshot(page, name: str) -> Path:
    """Save a PNG of the page under .screenshots/ (the README shows one of them)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def process_signal_state(pid: int) -> str:
    """A process's state and signal masks from /proc (why it may not have ended on a signal)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as exc:
        return f"no /proc status ({exc})"
    return "; ".join(
        line for line in lines if line.startswith(("State", "SigBlk", "SigIgn", "SigCgt", "SigPnd", "ShdPnd"))
    )


@contextlib.contextmanager
def static_server(folder: Path):
    """``python -m http.server`` on a free loopback port serving ``folder`` (a static host, as a
    site would publish public/); yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(url + "/embeddings-meta.json", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the static server did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            # Seen once under the whole suite on a clean clone (15 tests, both workers), never
            # alone: say what kept the server from ending, then end it.
            state = process_signal_state(proc.pid)
            proc.kill()
            proc.wait(10)
            raise AssertionError(f"the static server outlived SIGTERM by 10 s: {state}") from None


def open_search(page, url: str) -> None:
    """Open the published search.html and wait until rag-search.js has loaded the index."""
    page.goto(url + "/search.html")
    page.wait_for_selector("body[data-ready]", timeout=60_000)
    assert page.evaluate("document.body.dataset.ready") == "true", page.inner_text("#status")
