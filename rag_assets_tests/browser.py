"""A real Chromium for web-page tests: Debian's /usr/bin/chromium driven by Playwright for Python.

Browsers cannot be downloaded on these machines, so Playwright is pointed at the Debian
package (`.ci/run` installs it when missing). Where Chromium is absent the browser tests are
skipped with the reason, except under CI (``CI`` set), where its absence is a failure: a
test that cannot run there must not pass quietly.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run the browser tests: .ci/run installs Debian's chromium)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def chromium():
    """A headless Chromium (Playwright ``Browser``), shared by the tests of one worker."""
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
