"""Limits for the public, from a genuine non-loopback client (netns.py): per-client rate limits
with 429 and Retry-After, the cap on answers in flight, the anonymous daily chat allowance (kept
across a restart), loopback and admin exemptions, and CORS closed unless an origin is listed."""

from __future__ import annotations

import dataclasses
import itertools
import json
import threading
import time

import pytest

from rag_assets.config.serving import RateLimit
from rag_assets.serve.http import USAGE_FILE, create_app

from .access_site import PUBLIC_WORD, bearer, build_site
from .chat_server import ChatServer, default_answer
from .live_server import ServerThread
from .netns import network_namespace, rag_serve

TIGHT = "  search_limit: {per_second: 10, burst: 10}\n"


@pytest.fixture(scope="module")
def chat():
    with ChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def site(tmp_path_factory, chat):
    return build_site(tmp_path_factory.mktemp("limits"), chat.url, TIGHT)


@pytest.fixture(scope="module")
def ns():
    with network_namespace() as namespace:
        yield namespace


def served_with(cfg, **serve):
    return dataclasses.replace(cfg, serve=dataclasses.replace(cfg.serve, **serve))


def test_a_client_over_its_rate_gets_429_with_retry_after(site, ns):
    """100 searches one after another (well under a tenth of a second each, so most of them over
    TIGHT's 10 a second after its burst of 10), then 50 with an admin token from the same
    client, whose bucket the first 100 left empty: each of those 50 would be refused if the
    token did not exempt it."""
    search = {"q": PUBLIC_WORD, "mode": "bm25"}
    with rag_serve(site.config_path, ns.host_address, site.root / "rate.log") as server:
        anonymous, admin = ns.run_client(
            server.url,
            [
                {"kind": "burst", "path": "/search", "params": search, "count": 100, "seconds": 10},
                {
                    "kind": "burst",
                    "path": "/search",
                    "params": search,
                    "count": 50,
                    "seconds": 10,
                    "headers": bearer(site.tokens["admin"]),
                },
            ],
        )
    served = anonymous["statuses"].get("200", 0)
    assert anonymous["sent"] == 100 or anonymous["elapsed"] >= 10
    assert 10 <= served <= min(100, 10 + 10 * anonymous["elapsed"] + 1), anonymous
    assert anonymous["statuses"].get("429", 0) == anonymous["sent"] - served
    assert anonymous["retryAfter"] and all(v.isdigit() and int(v) >= 1 for v in anonymous["retryAfter"])
    assert admin["statuses"] == {"200": admin["sent"]} and admin["sent"] == 50  # an admin token is exempt


def test_a_loopback_client_is_exempt(site):
    with ServerThread(create_app(site.cfg, preload=False)) as server:
        statuses = [server.get("/search", q=PUBLIC_WORD, mode="bm25").status_code for _ in range(100)]
    assert statuses == [200] * 100  # 100 requests at once, ten times the burst


def test_the_ask_rate_applies_to_ask_and_to_mcp_ask(site, ns):
    cfg = served_with(site.cfg, ask_limit=RateLimit(per_second=0.01, burst=2))
    ask = {"kind": "http", "method": "POST", "path": "/ask", "json": {"question": f"who is the {PUBLIC_WORD}?"}}
    mcp = {"kind": "mcp", "tool": "ask", "arguments": {"question": f"who is the {PUBLIC_WORD}?"}}
    with ServerThread(
        create_app(cfg, preload=False, serve_private=False, host=ns.host_address), host=ns.host_address
    ) as server:
        results = ns.run_client(server.url, [ask, ask, ask, mcp])
    assert [r["status"] for r in results[:3]] == [200, 200, 429]
    assert int(results[2]["headers"]["retry-after"]) >= 1
    assert results[3]["isError"] and "too many questions" in results[3]["text"]


def test_answers_in_flight_are_capped(site, ns):
    """With one answer allowed at once, a second question sent while the first is being answered
    is refused, and the slot is given back when the first ends. The model holds the first answer
    until the second question has had its 429 (or, were the cap broken, until the second reached
    the model too), so the first is in flight for as long as that takes and no longer: no timer
    has to outlast the second request."""
    from .test_ask import with_llm

    cfg = served_with(site.cfg, max_concurrent_asks=1)
    ask = {
        "kind": "http",
        "method": "POST",
        "path": "/ask",
        "json": {"question": f"who is the {PUBLIC_WORD}?", "stream": True},
    }
    second_done = threading.Event()
    answers = itertools.count()

    def held_answer(prompt: str) -> str:
        if next(answers) > 0:
            second_done.set()  # another answer reached the model: nothing held this one back
        second_done.wait(60)  # a hang deadline only
        return default_answer(prompt)

    def noting_refusals(app):
        async def wrapped(scope, receive, send):
            async def watched(message):
                if message["type"] == "http.response.start" and message["status"] == 429:
                    second_done.set()
                await send(message)

            await app(scope, receive, watched)

        return wrapped

    with ChatServer(answer=held_answer) as held:
        app = create_app(with_llm(cfg, held.url), preload=False, serve_private=False, host=ns.host_address)
        with ServerThread(noting_refusals(app), host=ns.host_address) as server:
            first, second = ns.run_client(server.url, [{"kind": "parallel", "calls": [ask, ask], "stagger": 1.0}])[0]
            (third,) = ns.run_client(server.url, [ask])
    assert first["status"] == 200 and "event: done" in first["text"]
    assert second["status"] == 429 and int(second["headers"]["retry-after"]) >= 1
    assert third["status"] == 200 and "event: done" in third["text"]  # the slot was given back


def test_the_anonymous_daily_allowance_survives_a_restart(site, ns, chat):
    cfg = served_with(site.cfg, anonymous_chat_tokens_per_day=50)
    usage = cfg.data_dir / USAGE_FILE
    usage.unlink(missing_ok=True)
    ask = {"kind": "http", "method": "POST", "path": "/ask", "json": {"question": f"who is the {PUBLIC_WORD}?"}}
    signed_in = {**ask, "headers": bearer(site.tokens["reader"])}

    def serve_and_ask(calls):
        app = create_app(cfg, preload=False, serve_private=False, host=ns.host_address)
        with ServerThread(app, host=ns.host_address) as server:
            return ns.run_client(server.url, calls)

    first, second, member = serve_and_ask([ask, ask, signed_in])
    assert first["status"] == 200 and json.loads(first["text"])["model"]
    assert json.loads(usage.read_text())["tokens"] >= 50  # the provider's reported usage, counted
    refused = json.loads(second["text"])
    assert second["status"] == 503 and "allowance" in refused["error"]
    assert refused["retrieval"]["sources"] and PUBLIC_WORD in json.dumps(refused["retrieval"]["sources"])
    assert member["status"] == 200 and json.loads(member["text"])["model"]  # a token holder is not counted
    (after_restart,) = serve_and_ask([ask])
    assert after_restart["status"] == 503 and "allowance" in json.loads(after_restart["text"])["error"]


def spent_today(usage) -> int:
    """The anonymous chat tokens the usage file counts (0 before the first answer writes it)."""
    return json.loads(usage.read_text())["tokens"] if usage.exists() else 0


def test_an_answer_left_mid_stream_still_counts_against_the_allowance(site, ns):
    """A stranger who reads the first words of each streamed answer and hangs up must not get
    answers for free: the model was asked (the provider bills the prompt), so the answer counts."""
    from .test_ask import with_llm

    cfg = served_with(site.cfg, anonymous_chat_tokens_per_day=50)
    usage = cfg.data_dir / USAGE_FILE
    usage.unlink(missing_ok=True)
    question = {"question": f"who is the {PUBLIC_WORD}?"}
    with ChatServer(token_delay=0.2) as slow:
        app = create_app(with_llm(cfg, slow.url), preload=False, serve_private=False, host=ns.host_address)
        with ServerThread(app, host=ns.host_address) as server:
            (left,) = ns.run_client(
                server.url,
                [
                    {
                        "kind": "cut",
                        "method": "POST",
                        "path": "/ask",
                        "json": {**question, "stream": True},
                        "until": "event: token",
                    }
                ],
            )
            assert left["status"] == 200 and "event: done" not in left["text"]  # it left mid-answer
            deadline = time.monotonic() + 60  # a hang deadline only: the server notices at its next write
            while spent_today(usage) == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            counted = spent_today(usage)
            (after,) = ns.run_client(server.url, [{"kind": "http", "method": "POST", "path": "/ask", "json": question}])
    assert counted >= 50  # the prompt and the words sent, estimated
    assert after["status"] == 503 and "allowance" in json.loads(after["text"])["error"]


def test_cors_is_closed_unless_the_origin_is_listed(site):
    cfg = served_with(site.cfg, cors_origins=("https://site.example",))
    with (
        ServerThread(create_app(cfg, preload=False)) as listed,
        ServerThread(create_app(site.cfg, preload=False)) as closed,
    ):
        for server, origin, allowed in (
            (listed, "https://site.example", True),
            (listed, "https://evil.example", False),
            (closed, "https://site.example", False),
        ):
            answer = server.client.post("/embed", json={"text": "lamp"}, headers={"Origin": origin})
            # An unlisted page's POST is refused outright, too (rag_assets.serve.origin_check)
            assert answer.status_code == (200 if allowed else 403)
            assert answer.headers.get("access-control-allow-origin") == (origin if allowed else None)
            preflight = server.client.options(
                "/embed", headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
            )
            assert preflight.headers.get("access-control-allow-origin") == (origin if allowed else None)


def test_an_ipv6_client_cannot_escape_its_bucket_by_changing_address(site):
    """One subscriber is given a whole IPv6 /64 and may use any address in it: the bucket is the
    /64's, or a client would get a fresh burst per request. Another /64 has its own."""
    import asyncio

    import httpx

    cfg = served_with(site.cfg, search_limit=RateLimit(per_second=0.01, burst=3))
    app = create_app(cfg, preload=False, serve_private=False, host="2001:db8::ff")

    async def status_from(host: str) -> int:
        """One search's status, sent from ``host``."""
        transport = httpx.ASGITransport(app, client=(host, 40000))  # the app as served, the client's address set
        async with httpx.AsyncClient(transport=transport, base_url="http://[2001:db8::ff]") as client:
            return (await client.get("/search", params={"q": PUBLIC_WORD, "mode": "bm25"})).status_code

    async def run() -> tuple[list[int], int]:
        """Six searches from six addresses of one /64, then one from the next /64."""
        same = [await status_from(f"2001:db8::{i}") for i in range(1, 7)]
        return same, await status_from("2001:db8:0:1::1")

    same_64, other_64 = asyncio.run(run())
    assert same_64 == [200, 200, 200, 429, 429, 429] and other_64 == 200
