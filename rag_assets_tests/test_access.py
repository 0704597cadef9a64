"""Access control of ``rag serve`` beyond loopback, proven from a genuine non-loopback client.

``rag serve`` runs as a process bound to the host side of a veth pair; every request comes from
inside a network namespace (netns.py), so the server sees a peer that is not loopback. For each
way in (GET /search, /context, POST /ask, MCP search, get_context, get_document, ask) and each
tier: without a token Public is open and Safe and Private are refused; wrong, revoked and expired
tokens are a 401; a safe token opens Safe only; a private token opens Private only on a server
started with --allow-private-remote. A refusal carries a JSON error and none of the tier's text.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import stat
from contextlib import closing

import pytest

from rag_assets.index import tier_logs
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .access_site import PRIVATE_WORD, PUBLIC_WORD, SAFE_WORD, bearer, build_site, wrong_token
from .chat_server import ChatServer
from .live_server import ServerThread
from .netns import network_namespace, rag_serve

WORDS = {"public": PUBLIC_WORD, "safe": SAFE_WORD, "private": PRIVATE_WORD}
DOCUMENTS = {"public": ("posts", "lighthouse"), "safe": ("safenotes", "zebra"), "private": ("privnotes", "quokka")}


@pytest.fixture(scope="module")
def chat():
    with ChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def site(tmp_path_factory, chat):
    # Limits out of the way: these tests make many requests from one address (test_limits.py tests them).
    generous = "  search_limit: {per_second: 1000, burst: 1000}\n  ask_limit: {per_second: 1000, burst: 1000}\n"
    return build_site(tmp_path_factory.mktemp("access"), chat.url, generous)


@pytest.fixture(scope="module")
def ns():
    with network_namespace() as namespace:
        yield namespace


@pytest.fixture(scope="module")
def server(site, ns):
    with rag_serve(site.config_path, ns.host_address, site.root / "serve.log") as running:
        yield running


@pytest.fixture(scope="module")
def server_private(site, ns):
    with rag_serve(
        site.config_path, ns.host_address, site.root / "serve-private.log", "--allow-private-remote"
    ) as running:
        yield running


def tier_calls(tier: str, headers: dict[str, str]) -> list[dict]:
    """Every way to read ``tier``: the HTTP routes and the MCP tools."""
    word = WORDS[tier]
    collection, slug = DOCUMENTS[tier]
    return [
        {"kind": "http", "path": "/search", "params": {"q": word, "tier": tier, "mode": "bm25"}, "headers": headers},
        {"kind": "http", "path": "/context", "params": {"q": word, "tier": tier, "mode": "bm25"}, "headers": headers},
        {
            "kind": "http",
            "method": "POST",
            "path": "/ask",
            "json": {"question": f"what about the {word}?", "tier": tier},
            "headers": headers,
        },
        {"kind": "mcp", "tool": "search", "arguments": {"query": word, "tier": tier}, "headers": headers},
        {"kind": "mcp", "tool": "get_context", "arguments": {"query": word, "tier": tier}, "headers": headers},
        {
            "kind": "mcp",
            "tool": "get_document",
            "arguments": {"collection": collection, "slug": slug, "tier": tier},
            "headers": headers,
        },
        {
            "kind": "mcp",
            "tool": "ask",
            "arguments": {"question": f"what about the {word}?", "tier": tier},
            "headers": headers,
        },
    ]


# The (server, tier, token) reads the tier tests below check: "plain" is `rag serve`, "remote"
# the one started with --allow-private-remote; a token by its name in the site, or one of these.
BAD_TOKENS = ("wrong", "revoked", "expired", "garbage")
TIER_READS = [
    *(("plain", tier, None) for tier in ("public", "safe", "private")),
    *(("plain", tier, bad) for bad in BAD_TOKENS for tier in ("public", "safe", "private")),
    *(("plain", tier, "reader") for tier in ("safe", "public", "private")),
    ("remote", "private", "reader"),
    ("plain", "private", "owner"),
    *(("remote", "private", name) for name in ("owner", None)),
]


def token_named(site, name: str | None) -> str | None:
    if name == "wrong":
        return wrong_token(site.tokens["owner"])  # the owner's id with another secret
    if name == "garbage":
        return "not-a-token"
    return site.tokens[name] if name else None


@pytest.fixture(scope="module")
def reads(site, ns, server, server_private) -> dict[tuple[str, str, str | None], list[dict]]:
    """Every way into each tier for each of TIER_READS, made by one client run (a client's start-up
    with the MCP SDK is about two CPU seconds: one run per test was most of this module's time);
    the results by (server, tier, token name). Each test checks its own."""
    urls = {"plain": server.url, "remote": server_private.url}
    groups = [
        [{**call, "base": urls[where]} for call in tier_calls(tier, bearer(token_named(site, name)))]
        for where, tier, name in TIER_READS
    ]
    results = ns.run_client(server.url, [call for group in groups for call in group])
    assert len(results) == sum(len(group) for group in groups)
    # The HTTP calls share the run's client: none may leave a cookie to the ones after it.
    assert not [r for r in results if "set-cookie" in r.get("headers", {})]
    out, start = {}, 0
    for key, group in zip(TIER_READS, groups, strict=True):
        out[key] = results[start : start + len(group)]
        start += len(group)
    return out


def assert_served(results: list[dict], tier: str) -> None:
    for result in results:
        if "status" in result:
            assert result["status"] == 200, result["text"][:300]
        else:
            assert result.get("isError") is False, result
        assert WORDS[tier] in (result.get("text") or ""), result


def assert_refused(results: list[dict], tier: str, http_statuses: tuple[int, ...]) -> None:
    """A JSON error for every HTTP route and a tool error (or an HTTP refusal) for every MCP call;
    the tier's text in none of them (its own word, nor any other tier's but Public)."""
    for result in results:
        if "status" in result:
            assert result["status"] in http_statuses, result
            assert list(json.loads(result["text"])) == ["error"], result["text"][:300]
        elif "httpStatus" in result:
            assert result["httpStatus"] in http_statuses, result
        else:
            assert result["isError"] is True, result
        text = json.dumps(result)
        assert SAFE_WORD not in text and PRIVATE_WORD not in text, result


def test_the_server_sees_a_non_loopback_client(ns, server):
    assert not ns.client_address.startswith("127.") and ns.client_address.startswith("198.18.")
    status = ns.run_client(server.url, [{"kind": "http", "path": "/status"}])[0]
    assert json.loads(status["text"])["access"] == {
        "user": "",
        "signedIn": False,
        "scopes": ["public"],
        "locked": ["safe", "private"],
    }


def test_without_a_token_public_is_open_and_safe_and_private_are_refused(reads):
    assert_served(reads["plain", "public", None], "public")
    assert_refused(reads["plain", "safe", None], "safe", (401,))
    assert_refused(reads["plain", "private", None], "private", (401, 403))


@pytest.mark.parametrize("which", BAD_TOKENS)
def test_wrong_revoked_and_expired_tokens_are_a_401_with_no_tier_text(reads, which):
    for tier in ("public", "safe", "private"):
        assert_refused(reads["plain", tier, which], tier, (401,))


def test_a_safe_token_opens_safe_but_not_private(reads):
    assert_served(reads["plain", "safe", "reader"], "safe")
    assert_served(reads["plain", "public", "reader"], "public")
    assert_refused(reads["plain", "private", "reader"], "private", (403,))
    # even where the Private tier is served to remote clients, scope safe does not open it
    assert_refused(reads["remote", "private", "reader"], "private", (403,))


def test_a_private_token_opens_private_only_with_allow_private_remote(reads):
    assert_refused(reads["plain", "private", "owner"], "private", (403,))
    assert_served(reads["remote", "private", "owner"], "private")
    # allow_private_remote opens nothing by itself: no token, or a token without the scope
    assert_refused(reads["remote", "private", None], "private", (401,))
    assert_refused(reads["remote", "private", "reader"], "private", (403,))


def test_status_and_listing_hide_locked_tiers(site, ns, server):
    status, listing, signed_in = ns.run_client(
        server.url,
        [
            {"kind": "http", "path": "/status"},
            {"kind": "mcp", "tool": "list_collections", "arguments": {}},
            {"kind": "http", "path": "/status", "headers": bearer(site.tokens["reader"])},
        ],
    )
    report = json.loads(status["text"])
    assert report["tiers"]["safe"] == {"exists": True, "served": True, "locked": True}
    assert set(report["chatService"]) == {"public"}
    for text in (status["text"], listing["text"]):
        assert "safenotes" not in text and "privnotes" not in text and SAFE_WORD not in text
    assert json.loads(signed_in["text"])["tiers"]["safe"]["chunks"] >= 1


def test_sign_in_with_the_form_then_csrf_guards_every_post(site, ns, server):
    ask = {"question": f"what about the {SAFE_WORD}?", "tier": "safe"}
    results = ns.run_client(
        server.url,
        [
            {"kind": "http", "path": "/login"},
            {
                "kind": "http",
                "method": "POST",
                "path": "/login",
                "data": {"token": site.tokens["reader"], "csrf_token": "wrong"},
            },
            {
                "kind": "http",
                "method": "POST",
                "path": "/login",
                "data": {"token": site.tokens["reader"], "csrf_token": "$cookie:rag_csrf"},
            },
            {"kind": "http", "path": "/search", "params": {"q": SAFE_WORD, "tier": "safe", "mode": "bm25"}},
            {"kind": "http", "method": "POST", "path": "/ask", "json": ask},
            {
                "kind": "http",
                "method": "POST",
                "path": "/ask",
                "json": ask,
                "headers": {"X-CSRF-Token": "$cookie:rag_csrf"},
            },
            {"kind": "http", "method": "POST", "path": "/logout", "data": {"csrf_token": "$cookie:rag_csrf"}},
            {"kind": "http", "path": "/search", "params": {"q": SAFE_WORD, "tier": "safe", "mode": "bm25"}},
        ],
    )
    page, forged, login, search, no_csrf, with_csrf, logout, after = results
    assert page["status"] == 200 and 'name="csrf_token"' in page["text"]
    assert forged["status"] == 403 and "rag_session" not in forged["headers"].get("set-cookie", "")
    assert login["status"] == 303
    cookie = login["headers"]["set-cookie"].lower()
    assert "rag_session=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert site.tokens["reader"] not in login["headers"]["set-cookie"]  # the session id, never the token
    assert search["status"] == 200 and SAFE_WORD in search["text"]
    assert no_csrf["status"] == 403 and "CSRF" in no_csrf["text"] and SAFE_WORD not in no_csrf["text"]
    assert with_csrf["status"] == 200 and SAFE_WORD in with_csrf["text"]
    assert logout["status"] == 303
    assert after["status"] == 401


def substrings(token: str, size: int = 8) -> set[str]:
    return {token[i : i + size] for i in range(len(token) - size + 1)}


def test_no_token_or_part_of_one_reaches_a_log(site, ns, server):
    """Requests with every kind of token, then the server's output, the answer and search logs
    and the build's Dagster storage hold no token and no 8-character piece of one."""
    presented = [
        site.tokens["reader"],
        site.tokens["owner"],
        site.tokens["revoked"],
        wrong_token(site.tokens["reader"]),
    ]
    calls = [c for token in presented for c in tier_calls("safe", bearer(token))[:3]]
    calls += [
        {"kind": "http", "path": "/login"},
        {
            "kind": "http",
            "method": "POST",
            "path": "/login",
            "data": {"token": presented[0], "csrf_token": "$cookie:rag_csrf"},
        },
    ]
    ns.run_client(server.url, calls)
    texts = [server.log()]
    for tier in ("public", "safe", "private"):
        with closing(sqlite3.connect(tier_logs.log_path(site.cfg.store_path(tier)))) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table in tables & {"answer_log", "search_log"}:  # made by the first answer / search
                texts.append(json.dumps(conn.execute(f"SELECT * FROM {table}").fetchall()))
    assert any("zebracorn" in t for t in texts[1:])  # the logs were written: they are what is checked
    pieces = set(itertools.chain.from_iterable(substrings(t) for t in presented))
    for text in texts:
        found = [p for p in pieces if p in text]
        assert not found, f"token material in a log: {found[:3]}"


def test_token_commands(site, capsys):
    args = ["--config", str(site.config_path)]
    assert rag(["token", "create", "--name", "cli-made", "--scope", "safe,admin", "--expires", "30", *args]) == 0
    token = capsys.readouterr().out.strip()
    assert site.store.verify(token).scopes == ("safe", "admin")
    assert stat.S_IMODE(site.store.path.stat().st_mode) == 0o600
    assert site.store.path.read_text().count(token[-20:]) == 0  # only a hash is kept
    assert rag(["token", "list", "--json", *args]) == 0
    listed = json.loads(capsys.readouterr().out)
    entry = next(t for t in listed["tokens"] if t["name"] == "cli-made")
    assert set(entry) == {"name", "scopes", "created", "expires", "expired"}
    assert rag(["token", "revoke", "cli-made", *args]) == 0
    assert site.store.verify(token) is None  # the cached answer did not outlive the file's change
    assert rag(["token", "revoke", "cli-made", *args]) == 1
    assert rag(["token", "create", "--name", "x", "--scope", "everything", *args]) == 2
    inside = site.root / "inside.yaml"  # beside rag.yaml: the same output folder
    inside.write_text(
        site.config_path.read_text().replace(
            str(site.root / "config" / "tokens.json"), str(site.root / "out" / "tokens.json")
        )
    )
    assert rag(["token", "list", "--config", str(inside)]) == 2
    assert "inside the output folder" in capsys.readouterr().err


def test_the_scopes_each_caller_gets(site, ns, server, server_private):
    """The contract routes (and the admin console) rely on: request.auth.scopes and the user's name."""

    asked = [(server, "reader"), (server, "owner"), (server_private, "owner"), (server, "admin")]
    calls = [
        {"kind": "http", "base": srv.url, "path": "/status", "headers": bearer(site.tokens[name])}
        for srv, name in asked
    ]
    reader, owner, owner_remote, admin = [json.loads(s["text"])["access"] for s in ns.run_client(server.url, calls)]
    assert reader["scopes"] == ["authenticated", "public", "safe"]
    assert reader["user"] == "reader"
    assert owner["scopes"] == ["authenticated", "public", "safe"]  # private: not here
    assert owner_remote["scopes"] == ["authenticated", "public", "safe", "private"]
    assert admin["scopes"] == ["authenticated", "public", "admin"]
    with ServerThread(create_app(site.cfg, preload=False)) as local:
        mine = local.get("/status").json()["access"]
    assert mine == {
        "user": "loopback",
        "signedIn": False,
        "locked": [],
        "scopes": ["authenticated", "public", "safe", "private", "admin"],
    }


def test_a_conversation_is_continued_only_by_the_caller_who_began_it(site, ns, server, chat):
    """A session name is no key: a stranger naming another caller's session must not continue
    it, so neither a prompt sent for them nor their answer shows that caller's earlier question."""
    secret = "marmaladesmuggler"
    first = {"question": f"does the {PUBLIC_WORD} know the {secret}?", "session": "shared"}
    follow_up = {"question": "and who else?", "session": "shared"}
    before = len(chat.prompts())
    mine, again = ns.run_client(
        server.url,
        [
            {"kind": "http", "method": "POST", "path": "/ask", "json": first, "headers": bearer(site.tokens["reader"])},
            {
                "kind": "http",
                "method": "POST",
                "path": "/ask",
                "json": follow_up,
                "headers": bearer(site.tokens["reader"]),
            },
        ],
    )
    assert mine["status"] == again["status"] == 200, again["text"][:300]
    assert json.loads(again["text"])["retrieval"]["rewrite"] != "first question"  # its own follow-up continues it
    assert any(secret in p and "and who else?" in p for p in chat.prompts()[before:])
    before = len(chat.prompts())
    (theirs,) = ns.run_client(server.url, [{"kind": "http", "method": "POST", "path": "/ask", "json": follow_up}])
    assert theirs["status"] == 200, theirs["text"][:300]
    assert json.loads(theirs["text"])["retrieval"]["rewrite"] == "first question"  # a conversation of its own
    assert secret not in theirs["text"] and not any(secret in p for p in chat.prompts()[before:])


def test_another_schemes_credentials_are_not_for_rag_to_judge(site, ns, server):
    """A reverse proxy with a sign-in of its own (HTTP Basic) passes its Authorization header on:
    the page and the Public tier still answer, and that header opens nothing more."""
    basic = {"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}
    page, public, safe = ns.run_client(
        server.url,
        [
            {"kind": "http", "path": "/", "headers": basic},
            {"kind": "http", "path": "/search", "params": {"q": PUBLIC_WORD, "mode": "bm25"}, "headers": basic},
            {
                "kind": "http",
                "path": "/search",
                "params": {"q": SAFE_WORD, "tier": "safe", "mode": "bm25"},
                "headers": basic,
            },
        ],
    )
    assert page["status"] == 200 and public["status"] == 200 and PUBLIC_WORD in public["text"]
    assert safe["status"] == 401 and SAFE_WORD not in safe["text"]


@pytest.mark.parametrize(
    "header", ["Forwarded: for=203.0.113.9", "X-Real-IP: 203.0.113.9", "X-Forwarded-For: 127.0.0.1"]
)
def test_a_request_a_proxy_forwarded_is_not_the_owners(site, header):
    """A loopback address behind a reverse proxy on the same machine is anyone's: a request that
    carries a proxy's header is judged by its token, not by its loopback address (uvicorn itself
    replaces the address only from X-Forwarded-For, and keeps it when that names loopback)."""
    name, value = header.split(": ")
    with ServerThread(create_app(site.cfg, preload=False)) as local:
        owner = local.get("/status").json()["access"]
        proxied = local.client.get("/status", headers={name: value}).json()["access"]
        safe = local.client.get(
            "/search", params={"q": SAFE_WORD, "tier": "safe", "mode": "bm25"}, headers={name: value}
        )
        signed_in = local.client.get(
            "/search",
            params={"q": SAFE_WORD, "tier": "safe", "mode": "bm25"},
            headers={name: value, **bearer(site.tokens["reader"])},
        )
    assert owner["user"] == "loopback" and proxied["scopes"] == ["public"]
    assert safe.status_code == 401 and SAFE_WORD not in safe.text
    assert signed_in.status_code == 200 and SAFE_WORD in signed_in.text
