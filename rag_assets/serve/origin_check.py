"""Cross-site request protection for every route that changes state or calls a model.

A web page on any site can make the user's browser send a request to this server: a form, a
``fetch`` in ``no-cors`` mode or ``navigator.sendBeacon`` go out with no CORS preflight, as
long as their ``Content-Type`` is text/plain, a form encoding, or none at all. The page never
reads the answer, but the request still runs: POST /ask would call the chat model and write an
``answer_log`` row (a session's history) under a name the page chose, /embed would spend the
embedding provider's quota. So every request other than GET, HEAD and OPTIONS must

1. declare its body as ``Content-Type: application/json`` (a missing one included): a page
   can send that only after a preflight, which this server never grants to a foreign page
   (else 415), and
2. when it carries an ``Origin`` header (browsers always send one on such requests), come
   from the server's own origin (the scheme it is served with and the request's ``Host``) or
   one of ``serve.cors_origins`` in rag.yaml (else 403).

Programs (``curl``, httpx, the MCP SDK) send no Origin and are unaffected, as long as they
send JSON.

A GET can call a model and write a log too: ``/search`` and ``/context`` embed the query and
add a ``search_log`` row. A foreign page reaches them with an ``<img>`` or a no-cors fetch,
which carry no Origin; browsers mark every such request ``Sec-Fetch-Site: cross-site`` (or
``same-site``). On those ``reading`` paths a request marked so is refused unless its Origin is
a listed one (a static search page on another host, which fetches with CORS and so sends
its Origin). Programs send no ``Sec-Fetch-Site`` and are unaffected.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from starlette.routing import BaseRoute, Route

from rag_assets.config.serving import normal_origin

ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# What browsers send as Sec-Fetch-Site for a request another site's page started.
FOREIGN_FETCH_SITES = frozenset({"cross-site", "same-site"})
JSON_TYPE = "application/json"


class SameOriginJsonPosts:
    """ASGI middleware: 415 for a non-JSON body, 403 for a foreign Origin (see the module docstring),
    on the ``guarded`` paths: those of routes that take more than GET, HEAD and OPTIONS
    (:func:`posting_paths`; a POST to a GET-only route stays the router's 405)."""

    def __init__(
        self,
        app: ASGIApp,
        allowed_origins: Iterable[str] = (),
        guarded: Iterable[str] = (),
        reading: Iterable[str] = (),
        forms: Iterable[str] = (),
    ) -> None:
        self.app = app
        self.allowed = frozenset(allowed_origins)  # normalised by the config (normal_origin)
        self.guarded = frozenset(guarded)
        self.reading = frozenset(reading)
        self.forms = frozenset(forms)  # HTML forms' POSTs: any body type, their Origin still checked

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in self.reading and scope["method"] in SAFE_METHODS:
            headers = _headers(scope)
            if headers.get("sec-fetch-site") in FOREIGN_FETCH_SITES and not self.listed(headers.get("origin")):
                return await _refuse(
                    send,
                    403,
                    (
                        "a page of another site may not make this server search (it embeds the query and logs it); "
                        "list the page's origin in serve.cors_origins of rag.yaml to allow it"
                    ),
                )
        if scope["type"] == "http" and scope["method"] not in SAFE_METHODS and scope["path"] in self.guarded:
            headers = _headers(scope)
            problem = None if scope["path"] in self.forms else content_type_problem(headers.get("content-type", ""))
            if problem:
                return await _refuse(send, 415, problem)
            origin = headers.get("origin")
            if origin is not None and not self.origin_allowed(
                origin, scope.get("scheme", "http"), headers.get("host", "")
            ):
                return await _refuse(
                    send,
                    403,
                    (
                        f"a page of {origin[:100]!r} may not send {scope['method']} requests to this server; "
                        "list that origin in serve.cors_origins of rag.yaml to allow it"
                    ),
                )
        await self.app(scope, receive, send)

    def listed(self, origin: str | None) -> bool:
        """Is ``origin`` one of ``serve.cors_origins``? (A missing or "null" Origin is not.)"""
        try:
            return origin is not None and normal_origin(origin) in self.allowed
        except ValueError:
            return False

    def origin_allowed(self, origin: str, scheme: str, host: str) -> bool:
        """Is ``origin`` the server's own (as the request reached it) or a configured one?"""
        try:
            theirs = normal_origin(origin)
        except ValueError:  # "null" (a sandboxed frame, a file: page) or garbage
            return False
        if theirs in self.allowed:
            return True
        try:
            return bool(host) and theirs == normal_origin(f"{scheme}://{host}")
        except ValueError:
            return False


def posting_paths(routes: Iterable[BaseRoute]) -> frozenset[str]:
    """The paths of the routes that take a method other than GET, HEAD and OPTIONS (a route
    around an ASGI app, such as /mcp, takes every method)."""
    return frozenset(
        route.path
        for route in routes
        if isinstance(route, Route) and (route.methods is None or set(route.methods) - SAFE_METHODS)
    )


def content_type_problem(value: str) -> str | None:
    """What is wrong with a request's Content-Type for a JSON route, or None."""
    kind = value.split(";", 1)[0].strip().lower()
    if kind == JSON_TYPE:
        return None
    got = f"not {kind[:60]!r}" if kind else "and it had none"
    return f"the body must be sent as Content-Type: {JSON_TYPE}, {got}"


def _headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
