"""The admin console beyond loopback, from a genuine non-loopback client (netns.py): every page,
API route and action of ``/admin`` is refused without a token and with a token that lacks scope
``admin`` (a ``safe`` one), works with an ``admin`` token, and, for a browser signed in with the
form, only with the CSRF token and never from another site's page. A refusal changes nothing:
rag.yaml stays byte for byte, and the action log records only what an admin did. Also in
Chromium: the console is refused to a visitor and to a reader, and works for an admin."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing

import pytest

from rag_assets.index import tier_logs
from rag_assets.serve.http import create_app

from .access_site import bearer, build_site
from .chat_server import ChatServer
from .live_server import ServerThread
from .netns import network_namespace, rag_serve

EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def chat():
    with ChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def site(tmp_path_factory, chat):
    generous = "  search_limit: {per_second: 1000, burst: 1000}\n  ask_limit: {per_second: 1000, burst: 1000}\n"
    built = build_site(tmp_path_factory.mktemp("admin-access"), chat.url, generous)
    extra = built.root / "vaults" / "extra"
    extra.mkdir(parents=True)
    (extra / "note.md").write_text("# Extra\n\nA note the console may add as a vault.\n")
    return built


@pytest.fixture(scope="module")
def ns():
    with network_namespace() as namespace:
        yield namespace


@pytest.fixture(scope="module")
def server(site, ns):
    with rag_serve(site.config_path, ns.host_address, site.root / "serve.log") as running:
        yield running


def admin_calls(headers: dict[str, str]) -> list[dict]:
    """Every page, read and action of the console (the actions with bodies it would accept)."""
    post = {"kind": "http", "method": "POST", "headers": headers}
    return [
        {"kind": "http", "path": "/admin", "headers": headers},
        {"kind": "http", "path": "/admin/api/overview", "headers": headers},
        {"kind": "http", "path": "/admin/api/actions", "headers": headers},
        {"kind": "http", "path": "/admin/api/runs/0123456789abcdef", "headers": headers},
        {**post, "path": "/admin/api/vaults/add", "json": {"name": "extra", "path": "vaults/extra", "tier": "safe"}},
        {**post, "path": "/admin/api/vaults/remove", "json": {"name": "safenotes"}},
        {**post, "path": "/admin/api/ingest", "json": {"tier": "safe"}},
        {**post, "path": "/admin/api/audit", "json": {"tier": "safe"}},
    ]


def logged_actions(site) -> list[tuple[str, str]]:
    path = tier_logs.log_path(site.cfg.store_path("public"))
    if not path.is_file():
        return []
    with closing(sqlite3.connect(path)) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'admin_actions'").fetchone():
            return []
        return [tuple(row) for row in conn.execute("SELECT who, action FROM admin_actions")]


@pytest.mark.parametrize("token", [None, "reader", "wrong"], ids=["no token", "safe-only token", "wrong token"])
def test_every_admin_route_is_refused_without_scope_admin(site, ns, server, token):
    before, actions_before = site.config_path.read_bytes(), logged_actions(site)
    presented = "rag_zzzzzzzzzzzz_notatokenatall" if token == "wrong" else site.tokens.get(token or "")
    results = ns.run_client(server.url, admin_calls(bearer(presented)))
    for call, result in zip(admin_calls({}), results):
        assert result["status"] in (401, 403), (call["path"], result)
        assert "safenotes" not in result["text"] and "zebra" not in result["text"].lower(), (
            call["path"],
            result["text"][:200],
        )
    assert site.config_path.read_bytes() == before
    assert logged_actions(site) == actions_before


def test_an_admin_token_opens_the_console_and_its_actions_are_logged_with_its_name(site, ns, server):
    headers = bearer(site.tokens["admin"])
    calls = [
        {"kind": "http", "path": "/admin", "headers": headers},
        {"kind": "http", "path": "/admin/api/overview", "headers": headers},
        {"kind": "http", "method": "POST", "path": "/admin/api/audit", "json": {"tier": "safe"}, "headers": headers},
        {"kind": "http", "path": "/admin/api/actions", "headers": headers},
    ]
    page, overview, audit, actions = ns.run_client(server.url, calls)
    assert page["status"] == 200 and "<html" in page["text"].lower()
    assert overview["status"] == 200 and "safe" in json.loads(overview["text"])["tiers"]
    assert audit["status"] == 200, audit["text"][:300]
    assert ("admin", "audit") in logged_actions(site)
    assert actions["status"] == 200 and "audit" in actions["text"]


def test_a_signed_in_admin_page_needs_the_csrf_token_and_its_own_origin(site, ns, server):
    before = logged_actions(site)
    audit = {"kind": "http", "method": "POST", "path": "/admin/api/audit", "json": {"tier": "safe"}}
    calls = [
        {"kind": "http", "path": "/login"},
        {
            "kind": "http",
            "method": "POST",
            "path": "/login",
            "data": {"token": site.tokens["admin"], "csrf_token": "$cookie:rag_csrf"},
        },
        {"kind": "http", "path": "/admin/api/overview"},  # the session cookie alone reads
        {**audit, "headers": {}},  # no CSRF token: a forged request from a form or script elsewhere
        {**audit, "headers": {"X-CSRF-Token": "not-the-cookie"}},
        {**audit, "headers": {"X-CSRF-Token": "$cookie:rag_csrf", "Origin": EVIL}},  # another site's page
        {**audit, "headers": {"X-CSRF-Token": "$cookie:rag_csrf"}},
    ]
    _, login, overview, no_csrf, wrong_csrf, foreign, good = ns.run_client(server.url, calls)
    assert login["status"] == 303, login
    assert overview["status"] == 200
    assert no_csrf["status"] == 403 and wrong_csrf["status"] == 403 and foreign["status"] == 403
    assert good["status"] == 200, good["text"][:300]
    assert len(logged_actions(site)) == len(before) + 1  # only the good one ran


# --- Chromium, off loopback -------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(site):
    with network_namespace() as namespace:
        app = create_app(site.cfg, preload=False, serve_private=False, host=namespace.host_address)
        with ServerThread(app, host=namespace.host_address) as running:
            yield running


def sign_in(page, url: str, token: str) -> None:
    page.goto(url + "/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(url + "/")


def test_in_the_browser_the_console_is_refused_to_a_visitor_and_a_reader_and_works_for_an_admin(site, served, page):
    page.set_default_timeout(15_000)
    response = page.goto(served.url + "/admin")
    assert response.status == 403 and "zebra" not in page.content().lower()
    sign_in(page, served.url, site.tokens["reader"])
    response = page.goto(served.url + "/admin")
    assert response.status == 403
    # The page's own script cannot act either: its POST is refused for want of scope admin.
    status = page.evaluate(
        """async () => (await fetch('/admin/api/audit', {method: 'POST', body: JSON.stringify({tier: 'safe'}),
            headers: {'Content-Type': 'application/json', 'X-CSRF-Token': document.cookie.match(/rag_csrf=([^;]+)/)[1]}})).status"""
    )
    assert status == 403
    page.context.clear_cookies()
    sign_in(page, served.url, site.tokens["admin"])
    response = page.goto(served.url + "/admin")
    assert response.status == 200
    page.wait_for_selector("text=Local only")
