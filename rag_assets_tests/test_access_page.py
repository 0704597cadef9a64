"""The web page off loopback: locked tiers shown as locked with a Sign in link, the login form,
and a signed-in page whose POSTs carry the CSRF token (Chromium, through Playwright).

The server is bound to the host side of a veth pair (netns.py); the browser reaches it at that
address, so the server sees a client address that is not loopback.
"""

from __future__ import annotations

import pytest

from rag_assets.serve.http import create_app

from .access_site import SAFE_WORD, build_site
from .chat_server import ChatServer
from .live_server import ServerThread
from .netns import network_namespace


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with ChatServer() as chat, network_namespace() as ns:
        site = build_site(tmp_path_factory.mktemp("access-page"), chat.url)
        app = create_app(site.cfg, preload=False, serve_private=False, host=ns.host_address)
        with ServerThread(app, host=ns.host_address) as server:
            yield site, server


def test_a_visitor_sees_safe_locked_signs_in_and_asks(served, page):
    site, server = served
    page.set_default_timeout(15_000)
    page.goto(server.url + "/")
    page.wait_for_selector("body[data-ready]")
    page.wait_for_function("() => document.getElementById('access').textContent.includes('Safe locked')")
    safe = page.locator("#tier-switch input[value=safe]")
    assert safe.is_disabled()
    assert page.locator("#tier-switch label.locked input[value=safe]").count() == 1
    assert page.locator("#tier-switch input[value=private]").count() == 0  # not served off loopback

    page.get_by_role("link", name="Sign in").click()
    page.get_by_label("Token").fill(site.tokens["reader"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_function("() => document.getElementById('access').textContent.includes('Signed in as reader')")
    assert not safe.is_disabled()

    safe.check()
    page.get_by_label("Search the notes").fill(SAFE_WORD)
    page.wait_for_function("() => document.getElementById('search-status').textContent.includes('safe tier')")
    assert SAFE_WORD in page.locator("#results").inner_text()
    page.get_by_label("Ask a question about the notes").fill(f"where does the {SAFE_WORD} graze?")
    page.get_by_role("button", name="Ask", exact=True).click()  # a POST that must carry X-CSRF-Token
    page.wait_for_function(
        "() => document.querySelector('.turn:last-child .answer-note')?.textContent.includes('Answered by')"
    )

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_function("() => document.getElementById('access').textContent.includes('Sign in')")
    assert page.locator("#tier-switch input[value=safe]").is_disabled()
