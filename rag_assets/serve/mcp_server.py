"""The MCP server, on the official ``mcp`` SDK's low-level :class:`mcp.server.Server`: the tools of
:mod:`rag_assets.serve.mcp_tools` over stdio (``rag mcp``) or streamable HTTP (``/mcp`` of ``rag serve``).

The low-level server is used (not MCPServer) because the tools' JSON schemas are written out,
not inferred from signatures, and because a call needs its transport, client address and scopes:
the tiers a caller may read are decided as for every HTTP route (:func:`caller_of`).

Tool work is blocking (numpy, SQLite, an embedding request), so each call runs in a worker
thread. A bad argument or a refused tier is a tool result with ``isError`` and a message saying
what to do; an unknown tool name is a protocol error (INVALID_PARAMS), as the spec asks; a bug is
an ``isError`` result too, logged with its traceback, never a dropped connection.
"""

from __future__ import annotations

import json
import logging
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import mcp.types as types
from anyio import to_thread
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.routing import Route

from rag_assets.config import RagConfig
from rag_assets.serve.limits import Limits
from rag_assets.serve.mcp_base import Caller, ToolEnv, ToolError, ToolSpec
from rag_assets.serve.mcp_tools import build_tools, call_tool
from rag_assets.serve.tiers import Tiers

log = logging.getLogger("rag_assets.serve.mcp")

SERVER_NAME = "rag-assets"
MCP_PATH = "/mcp"
INSTRUCTIONS = (
    "Search a Markdown knowledge base (site collections and note vaults). Start with `search` (or "
    "`get_context` for cited passages to answer from), read a whole page or section with `get_document`, "
    "list a note's links, backlinks and nearest notes with `related`, "
    "and see what is indexed with `list_collections`. Tier public is the default; safe holds sanitised "
    "notes; private (raw notes) is only available to a client on this machine. Cite the [collection:slug#anchor] "
    "tags you use."
)


def _version() -> str:
    try:
        return version("rag-assets")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0"


def caller_of(ctx: ServerRequestContext[Any, Any], transport: str) -> Caller:
    """The caller of one request. Over HTTP the SDK hands the Starlette request to the context;
    without one (which should not happen) the caller is taken as remote: no Private tier."""
    if transport == "stdio":
        return Caller("stdio")
    request = ctx.request
    client = getattr(request, "client", None)
    # The authentication middleware's verdict on this HTTP request (rag_assets.serve.access).
    auth = getattr(request, "scope", {}).get("auth") if isinstance(getattr(request, "scope", None), dict) else None
    scopes = tuple(auth.scopes) if auth is not None else None
    user = getattr(request, "scope", {}).get("user") if auth is not None else None
    name = user.display_name if user is not None and user.is_authenticated else ""
    return Caller("http", client.host if client else None, scopes, name)


def _tool_json(tool: ToolSpec) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        annotations=types.ToolAnnotations(read_only_hint=tool.read_only, open_world_hint=False),
    )


def _result(payload: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(payload, ensure_ascii=False)
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=payload)


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


def build_server(env: ToolEnv, transport: str) -> Server:
    """An MCP server answering tools/list and tools/call with ``build_tools(env.cfg)``.
    ``transport`` ("stdio" or "http") decides who counts as a local caller."""
    tools = {tool.name: tool for tool in build_tools(env.cfg)}

    async def list_tools(
        ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool_json(t) for t in tools.values()])

    async def on_call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = tools.get(params.name)
        if tool is None:
            raise MCPError(
                code=types.INVALID_PARAMS, message=f"unknown tool {params.name!r}; tools: {', '.join(tools)}"
            )
        caller = caller_of(ctx, transport)
        try:
            payload = await to_thread.run_sync(call_tool, env, caller, tool, params.arguments)
        except ToolError as exc:
            return _error(str(exc))
        except Exception as exc:  # a bug: the client gets a result, the log gets the traceback
            log.error("MCP tool %s failed", tool.name, exc_info=exc)
            return _error(f"internal error in {tool.name} ({type(exc).__name__}); the server log has the details")
        return _result(payload)

    def input_schema(name: str) -> dict[str, Any] | None:
        return tools[name].input_schema if name in tools else None

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=INSTRUCTIONS,
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
    )


# --------------------------------------------------------------------------- stdio


async def serve_stdio(cfg: RagConfig) -> None:
    """Serve over this process's stdin/stdout until the client closes them (``rag mcp``)."""
    tiers = Tiers(cfg, serve_private=True)  # stdio: the user launched us on this machine
    server = build_server(ToolEnv(cfg, tiers), "stdio")
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        tiers.close()


# --------------------------------------------------------------------------- streamable HTTP


@dataclass
class McpHttp:
    """The ``/mcp`` route for a Starlette app, and the session manager its lifespan must run."""

    route: Route
    session_manager: StreamableHTTPSessionManager

    def running(self) -> AbstractAsyncContextManager[None]:
        """Enter inside the app's lifespan: the session manager's task group lives there."""
        return self.session_manager.run()


def mcp_http(
    cfg: RagConfig, tiers: Tiers, *, host: str = "127.0.0.1", path: str = MCP_PATH, limits: Limits | None = None
) -> McpHttp:
    """Streamable HTTP at ``path``, sharing ``tiers`` (the app's indexes and embedders).

    ``host`` is the address the server binds: on loopback the SDK checks Host and Origin
    headers (DNS-rebinding protection: a web page cannot reach the local server through a
    name of its own)."""
    server = build_server(ToolEnv(cfg, tiers, limits), "http")
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    route = next(r for r in app.routes if isinstance(r, Route) and r.path == path)
    return McpHttp(route, server.session_manager)
