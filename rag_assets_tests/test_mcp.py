"""The MCP server, driven by the official SDK's own client (`ClientSession`): over stdio (`rag mcp`
launched as a subprocess) and over streamable HTTP (`/mcp` of a real uvicorn), on stores built by
the real Dagster build of a small content tree with a Safe and a Private vault."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.ingest.parsing import split_frontmatter
from rag_assets.serve.http import create_app
from rag_assets.serve.mcp_server import caller_of
from rag_assets.serve.mcp_tools import SEARCH, Caller, ToolEnv, ToolError, call_tool, private_allowed
from rag_assets.serve.tiers import Tiers

from .chat_server import ChatServer
from .conftest import REPO_ROOT, instance_for_test
from .live_server import ServerThread
from .test_server import CONTENT, ZIGBEE

TOOLS = {"search", "get_context", "get_document", "list_collections", "related"}

SAFE_NOTE = """---
title: Router notes
tags: [network]
---
# Router notes

The router forwards port 51820 to the wireguard tunnel; the tunnel config lives in the router's backup.
"""

PRIVATE_NOTE = """---
title: Garden plans
---
# Garden plans

The heirloom tomatoes go in the south bed next to the basil, watered every second evening.
"""


def build_site(root: Path) -> Path:
    """Write a content tree, two vaults and a rag.yaml under ``root``, build it; the config's path."""
    for rel, text in CONTENT.items():
        path = root / "content" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for rel, text in {"vaults/homelab/router.md": SAFE_NOTE, "vaults/diary/garden.md": PRIVATE_NOTE}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    config = root / "rag.yaml"
    config.write_text(
        "content_dir: content\noutput_dir: out\nembedder: {name: hashing}\nidentity_map: null\n"
        "private_tier: {embedder: hashing}\nllm: {name: none}\n"
        "vaults:\n  - {name: homelab, path: vaults/homelab, tier: safe}\n  - {name: diary, path: vaults/diary, tier: private}\n",
        encoding="utf-8",
    )
    cfg = load_config(config, environ={})
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
    assert outcome.success, outcome.error or outcome.failed_checks
    return config


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory.mktemp("mcp"))


@pytest.fixture(scope="module")
def cfg(site):
    return load_config(site, environ={})


@pytest.fixture(scope="module")
def server(cfg):
    with ServerThread(create_app(cfg)) as running:
        yield running


# ------------------------------------------------------------------------------------ clients


def stdio_params(config: Path) -> StdioServerParameters:
    """`python -m rag_assets.serve.cli mcp --config FILE`, importing this source tree."""
    env = {"PYTHONPATH": str(REPO_ROOT), "RAG_EMBEDDER": "hashing", "RAG_PRIVATE_EMBEDDER": "hashing"}
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "rag_assets.serve.cli", "mcp", "--config", str(config)],
        env=env,
        cwd=str(config.parent),
    )


@asynccontextmanager
async def stdio_session(config: Path) -> AsyncIterator[ClientSession]:
    async with stdio_client(stdio_params(config)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def http_session(url: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(f"{url}/mcp") as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def run(session_factory: Callable[[], Any], body: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        with anyio.fail_after(120):
            async with session_factory() as session:
                return await body(session)

    return anyio.run(main)


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """A successful call's structured result (the text content is the same JSON)."""
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text
    assert not result.is_error, text
    assert json.loads(text) == result.structured_content
    return result.structured_content


async def call_error(session: ClientSession, tool: str, arguments: dict[str, Any]) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool}({arguments}) should be a tool error, got {result.structured_content}"
    return result.content[0].text


# ------------------------------------------------------------------------------------ the tools, every one


async def exercise_every_tool(session: ClientSession, *, private: bool) -> dict[str, Any]:
    listed = (await session.list_tools()).tools
    seen: dict[str, Any] = {"tools": {t.name: t for t in listed}}

    found = await call(session, "search", query="how do I flash the zigbee coordinator firmware", k=3)
    assert found["tier"] == "public" and 1 <= len(found["hits"]) <= 3
    top = found["hits"][0]
    assert (top["collection"], top["slug"], top["title"]) == ("docs", "zigbee", "Zigbee coordinator")
    assert top["headingPath"][-1] == "Flashing the coordinator firmware"
    assert top["anchor"] == "flashing-the-coordinator-firmware" and top["relevance"] >= 0.5
    assert "cc2538-bsl" in top["snippet"] and len(top["snippet"]) <= 330 and top["snippet"].startswith("… ")
    assert top["citation"] == "[docs:zigbee#flashing-the-coordinator-firmware]"
    assert top["sections"][0]["anchor"] == top["anchor"]

    filtered = await call(
        session, "search", query="restic snapshots backblaze", collections=["docs"], filters={"status": "draft"}
    )
    assert [h["slug"] for h in filtered["hits"]] == ["backups"]
    nothing = await call(session, "search", query="zzzzqqq xylophone quasar")
    assert nothing["hits"] == [] and "relevance threshold" in nothing["message"]

    context = await call(session, "get_context", query="how do I flash the zigbee coordinator firmware", budget=1200)
    assert 0 < context["tokens"] <= 1200 and context["budget"] == 1200
    assert context["context"].startswith("[docs:zigbee#") and "cc2538-bsl" in context["context"]
    assert context["citations"][0]["collection"] == "docs"
    # A budget under the best passage: an empty context that says the budget it needs, in the result.
    small = await call(session, "get_context", query="how do I flash the zigbee coordinator firmware", budget=50)
    assert small["context"] == "" and small["bestRelevance"] >= 0.5
    needed = small["neededBudget"]
    assert needed > 50 and f"at least {needed}." in small["message"]
    enough = await call(session, "get_context", query="how do I flash the zigbee coordinator firmware", budget=needed)
    assert enough["context"].startswith("[docs:zigbee#") and "message" not in enough

    page = await call(session, "get_document", collection="docs", slug="zigbee")
    assert page["markdown"].strip() == split_frontmatter(ZIGBEE)[1].strip()  # the page's body, verbatim
    assert page["frontmatter"]["status"] == "active" and page["tags"] == ["zigbee", "homeassistant"]
    assert [s["anchor"] for s in page["sections"]] == ["zigbee-coordinator", "flashing-the-coordinator-firmware"]
    section = await call(session, "get_document", collection="docs", slug="zigbee", anchor=top["anchor"])
    assert (
        section["markdown"].startswith("## Flashing the coordinator firmware\n")
        and "Hold the boot button" in section["markdown"]
    )
    assert "# Zigbee coordinator" not in section["markdown"]
    assert section["citation"] == top["citation"]

    listing = await call(session, "list_collections")
    tiers = {t["tier"]: t for t in listing["tiers"]}
    assert {c["name"]: (c["documents"], c["chunks"] > 0) for c in tiers["public"]["collections"]} == {
        "docs": (3, True),
        "posts": (1, True),
    }
    assert tiers["public"]["freshness"] == "Fresh" and all(
        c["freshness"] == "Fresh" for c in tiers["public"]["collections"]
    )
    assert [c["name"] for c in tiers["safe"]["collections"]] == ["homelab"]
    if private:
        assert {c["name"] for c in tiers["private"]["collections"]} == {"homelab", "diary"}
        garden = await call(session, "search", query="where do the heirloom tomatoes go", tier="private")
        assert garden["hits"][0]["slug"] == "garden" and garden["tier"] == "private"
        read = await call(session, "get_document", collection="diary", slug="garden", tier="private")
        assert "south bed" in read["markdown"]
    else:
        assert tiers["private"] == {
            "tier": "private",
            "available": False,
            "reason": "served only to a client on this machine",
        }
    safe = await call(session, "search", query="wireguard tunnel router port", tier="safe")
    assert safe["hits"][0]["collection"] == "homelab"
    note = await call(session, "get_document", collection="homelab", slug="router", tier="safe")
    assert note["markdown"].strip() == split_frontmatter(SAFE_NOTE)[1].strip() and note["tier"] == "safe"
    return seen


def check_tool_schemas(tools: dict[str, Any]) -> None:
    assert set(tools) == TOOLS
    for tool in tools.values():
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert len(tool.description) > 100 and tool.annotations.read_only_hint is True
        for name, prop in schema["properties"].items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
    search = tools["search"].input_schema
    assert search["required"] == ["query"]
    assert (search["properties"]["k"]["minimum"], search["properties"]["k"]["maximum"]) == (1, 50)
    assert search["properties"]["tier"]["enum"] == ["public", "safe", "private"]
    assert search["properties"]["collections"]["type"] == "array"
    assert tools["get_context"].input_schema["properties"]["budget"]["type"] == "integer"
    assert tools["get_document"].input_schema["required"] == ["collection", "slug"]
    assert tools["list_collections"].input_schema["required"] == []


def test_stdio_serves_every_tool_and_the_private_tier(site):
    seen = run(lambda: stdio_session(site), lambda s: exercise_every_tool(s, private=True))
    check_tool_schemas(seen["tools"])


def test_http_serves_every_tool_on_the_served_indexes(server):
    seen = run(lambda: http_session(server.url), lambda s: exercise_every_tool(s, private=True))
    check_tool_schemas(seen["tools"])
    # The same Tiers as /search: MCP searches loaded the indexes the HTTP routes use.
    assert set(server.get("/status").json()["server"]["loaded"]) >= {"public", "safe", "private"}


def test_the_http_endpoint_refuses_a_foreign_host_header(server):
    """DNS rebinding: a web page whose name resolves to 127.0.0.1 must not reach the tools."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Host": "attacker.example:8765", "Accept": "application/json, text/event-stream"}
    assert server.post("/mcp", json=body, headers=headers).status_code == 421
    origin = {"Accept": "application/json, text/event-stream", "Origin": "http://attacker.example"}
    assert server.post("/mcp", json=body, headers=origin).status_code == 403


# ------------------------------------------------------------------------------------ bad arguments

BAD_CALLS = [
    ("search", {"query": "x", "tier": "secret"}, "'secret' is not one of ['public', 'safe', 'private']"),
    ("search", {"query": "x", "k": 0}, "invalid k: 0 is less than the minimum of 1"),
    ("search", {"query": "x", "k": 10_000}, "invalid k: 10000 is greater than the maximum of 50"),
    ("search", {"query": "x", "k": "ten"}, "invalid k: 'ten' is not of type 'integer'"),
    ("search", {"query": ""}, "invalid query"),
    ("search", {"query": "   "}, "query is empty"),
    ("search", {}, "'query' is a required property"),
    ("search", {"query": "x", "sort": "date"}, "Additional properties are not allowed ('sort' was unexpected)"),
    ("search", {"query": "x", "collections": ["nope"]}, "unknown collection(s) nope; this tier holds docs, posts"),
    ("search", {"query": "x", "min_relevance": 2}, "invalid min_relevance"),
    ("get_context", {"query": "x", "budget": 0}, "invalid budget"),
    ("get_context", {"query": "x", "tier": "nowhere"}, "is not one of"),
    (
        "get_document",
        {"collection": "docs", "slug": "zigbe"},
        "no page 'zigbe' in collection 'docs'; did you mean zigbee?",
    ),
    (
        "get_document",
        {"collection": "nope", "slug": "zigbee"},
        "no collection 'nope' in this store; its collections: docs, posts",
    ),
    (
        "get_document",
        {"collection": "docs", "slug": "zigbee", "anchor": "nope"},
        "its anchors: zigbee-coordinator, flashing-the",
    ),
    ("get_document", {"collection": "docs"}, "'slug' is a required property"),
    ("list_collections", {"tier": "secret"}, "is not one of"),
]


async def check_bad_calls(session: ClientSession) -> None:
    for tool, arguments, expected in BAD_CALLS:
        message = await call_error(session, tool, arguments)
        assert expected in message, (tool, arguments, message)
    with pytest.raises(MCPError, match="unknown tool 'nope'"):  # not a tool: a protocol error, per the spec
        await session.call_tool("nope", {})
    await call(session, "search", query="zigbee")  # the session is still fine


def test_bad_arguments_are_tool_errors_over_http(server):
    run(lambda: http_session(server.url), check_bad_calls)


def test_bad_arguments_are_tool_errors_over_stdio(site):
    run(lambda: stdio_session(site), check_bad_calls)


def test_a_tier_without_a_store_is_a_tool_error(tmp_path, cfg):
    empty = load_config(None, content_dir=tmp_path, output_dir=tmp_path / "out", environ={})
    with ServerThread(create_app(empty)) as running:

        async def body(session: ClientSession) -> None:
            assert "has no store yet" in await call_error(session, "search", {"query": "x"})
            listing = await call(session, "list_collections", tier="public")
            assert listing["tiers"][0]["available"] is False

        run(lambda: http_session(running.url), body)


# ------------------------------------------------------------------------------------ the Private tier


@pytest.mark.parametrize(
    "caller, serve_private, allowed",
    [
        (Caller("stdio"), False, True),  # the user launched the process on this machine
        (Caller("http", "127.0.0.1"), True, True),
        (Caller("http", "::1"), True, True),
        (Caller("http", "127.0.0.1"), False, False),  # a server bound off loopback never serves it
        (Caller("http", "192.168.1.20"), True, False),  # a remote client, even with --allow-private-remote
        (Caller("http", "203.0.113.9"), True, False),
        (Caller("http", "localhost.evil.example"), True, False),
        (Caller("http", None), True, False),  # no client address: taken as remote
        (Caller("sse", "127.0.0.1"), True, False),  # an unknown transport: refused
    ],
)
def test_private_allowed(caller, serve_private, allowed):
    assert private_allowed(caller, serve_private) is allowed


def test_the_http_caller_is_the_requests_client_address():
    ctx = SimpleNamespace(request=SimpleNamespace(client=SimpleNamespace(host="203.0.113.9")))
    assert caller_of(ctx, "http") == Caller("http", "203.0.113.9")
    assert caller_of(SimpleNamespace(request=None), "http") == Caller("http", None)
    assert caller_of(SimpleNamespace(request=None), "stdio") == Caller("stdio")


def test_a_remote_caller_gets_a_tool_error_for_the_private_tier(cfg):
    env = ToolEnv(cfg, Tiers(cfg, serve_private=True, log_searches=False))
    try:
        with pytest.raises(ToolError, match="only served to this machine"):
            call_tool(env, Caller("http", "198.51.100.7"), SEARCH, {"query": "tomatoes", "tier": "private"})
        hits = call_tool(env, Caller("http", "127.0.0.1"), SEARCH, {"query": "heirloom tomatoes", "tier": "private"})[
            "hits"
        ]
        assert hits and hits[0]["slug"] == "garden"
    finally:
        env.tiers.close()


def test_a_server_bound_off_loopback_refuses_the_private_tier(cfg):
    with ServerThread(create_app(cfg, serve_private=False)) as running:

        async def body(session: ClientSession) -> None:
            message = await call_error(session, "search", {"query": "heirloom tomatoes", "tier": "private"})
            assert "only served to this machine" in message
            assert "only served" in await call_error(
                session, "get_document", {"collection": "diary", "slug": "garden", "tier": "private"}
            )
            assert "only served" in await call_error(session, "list_collections", {"tier": "private"})
            await exercise_every_tool(session, private=False)

        run(lambda: http_session(running.url), body)


def test_a_real_non_loopback_client_is_refused_the_private_tier(cfg, non_loopback_address):
    """A server allowed to serve the Private tier (bound to an interface, --allow-private-remote)
    still refuses it over MCP to a client whose address is not loopback."""
    address = non_loopback_address
    with ServerThread(create_app(cfg, serve_private=True, host=address), host=address) as running:

        async def body(session: ClientSession) -> None:
            message = await call_error(session, "search", {"query": "heirloom tomatoes", "tier": "private"})
            assert "only served to this machine" in message
            public = await call(session, "search", query="zigbee coordinator firmware")
            assert public["hits"]

        run(lambda: http_session(running.url), body)


def test_rag_mcp_is_a_cli_command():
    from rag_assets.serve.cli import build_parser

    args = build_parser().parse_args(["mcp", "--config", "x.yaml", "--output-dir", "out"])
    assert args.handler.__name__ == "cmd_mcp" and (args.config, args.output_dir) == ("x.yaml", "out")


# ------------------------------------------------------------------------------------ ask


def config_with_chat(site: Path, url: str) -> Path:
    """The site's rag.yaml with a loopback Ollama chat model (beside it: paths stay relative)."""
    text = site.read_text(encoding="utf-8").replace(
        "llm: {name: none}\n", f"llm: {{name: ollama, ollama: {{host: '{url}'}}}}\n"
    )
    path = site.with_name("rag-with-chat.yaml")
    path.write_text(text, encoding="utf-8")
    return path


def test_ask_is_offered_only_with_a_chat_model(cfg):
    from rag_assets.serve.mcp_tools import build_tools

    assert [t.name for t in build_tools(cfg)] == [
        "search",
        "get_context",
        "get_document",
        "list_collections",
        "related",
    ]
    with ChatServer() as chat:
        with_model = load_config(config_with_chat(Path(cfg.config_path), chat.url), environ={})
        assert [t.name for t in build_tools(with_model)][-1] == "ask"


def test_ask_answers_with_cited_sources_and_abstains_without_a_model_call_over_stdio(site):
    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS | {"ask"} and tools["ask"].input_schema["required"] == ["question"]
        answered = await call(session, "ask", question="how do I flash the zigbee coordinator firmware")
        assert answered["abstained"] is False and answered["citationCheck"] == {"unknown": [], "uncited": False}
        assert answered["citations"][0]["n"] == 1 and answered["citations"][0]["slug"] == "zigbee"
        assert "[1]" in answered["answer"] and answered["retrieval"]["sources"]
        before = len(chat.chat_requests)
        nothing = await call(session, "ask", question="zzzzqqq xylophone quasar")
        assert nothing["abstained"] is True and nothing["model"] is None
        assert len(chat.chat_requests) == before  # abstained: the model was not asked
        garden = await call(session, "ask", question="where do the heirloom tomatoes go", tier="private")
        assert garden["citations"][0]["slug"] == "garden"  # a loopback model may answer the Private tier
        error = await call_error(session, "ask", {"question": "   "})
        assert "empty" in error
        error = await call_error(session, "ask", {"question": "hi", "tier": "secret"})
        assert "tier" in error

    with ChatServer() as chat:
        run(lambda: stdio_session(config_with_chat(site, chat.url)), body)
        prompts = chat.prompts()
    assert any("cc2538-bsl" in p for p in prompts) and any("south bed" in p for p in prompts)


def test_ask_refuses_the_private_tier_to_a_remote_caller(cfg):
    with ChatServer() as chat:
        with_model = load_config(config_with_chat(Path(cfg.config_path), chat.url), environ={})
        from rag_assets.serve.mcp_tools import build_tools

        ask = build_tools(with_model)[-1]
        env = ToolEnv(with_model, Tiers(with_model, serve_private=True, log_searches=False))
        try:
            with pytest.raises(ToolError, match="private tier is only served to this machine"):
                call_tool(
                    env, Caller("http", "192.0.2.7"), ask, {"question": "where do the tomatoes go", "tier": "private"}
                )
        finally:
            env.tiers.close()
        assert not chat.chat_requests  # refused before retrieval, nothing sent
