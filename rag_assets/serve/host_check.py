"""DNS-rebinding protection for a server bound to loopback.

A web page the user opens can have its own name (``attacker.example``) resolve to 127.0.0.1;
the user's browser then reaches this server as a *loopback* client, the very caller that is
trusted with the Private tier, and reads the answers as same-origin. What gives the page
away is the Host header: it carries the page's name, not a loopback one. So a server bound
to a loopback address answers only requests whose Host is ``localhost`` or a loopback
address literal (any port); anything else is a 421 (as the MCP SDK answers on /mcp) before
any route runs.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from rag_assets.config.providers import is_loopback_host

ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def host_name(header: str) -> str:
    """The name in a Host header, without its port: ``[::1]:8765`` -> ``::1``."""
    header = header.strip()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class LoopbackHostOnly:
    """ASGI middleware: 421 for a request whose Host header is not a loopback name."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            headers = dict(scope.get("headers") or [])
            host = host_name(headers.get(b"host", b"").decode("latin-1"))
            if not is_loopback_host(host):
                await _refuse(send, host)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Any, host: str) -> None:
    message = (
        f"this server is bound to loopback and answers only Host: localhost or 127.0.0.1, not {host[:100]!r} "
        "(a page whose name points at 127.0.0.1 must not read your notes)"
    )
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 421,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
