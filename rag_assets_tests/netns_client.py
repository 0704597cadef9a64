"""The client half of the access tests, run inside a network namespace (see netns.py).

``python netns_client.py BASE_URL`` reads a JSON list of calls on stdin and prints a JSON list of
their results, in order. One httpx client serves every ``http`` call, so cookies set by one
(``/login``) go with the next; a string ``"$cookie:NAME"`` in ``data`` or ``headers`` is replaced
by that cookie's current value. An ``http`` or ``mcp`` call with ``"base"`` goes to that server
instead of BASE_URL (one client run for calls to several servers: each run is a Python start-up).

- ``{"kind": "http", "method", "path", "params"?, "json"?, "data"?, "headers"?}``
  -> ``{"status", "headers", "text"}``
- ``{"kind": "mcp", "tool", "arguments", "headers"?}`` -> ``{"isError", "text"}`` (a tool call over
  the MCP SDK's streamable HTTP client), or ``{"httpStatus"}`` when the HTTP layer refused
- ``{"kind": "burst", "path", "params"?, "headers"?, "count", "seconds"}``: up to ``count`` GETs,
  one after another, stopping after ``seconds`` -> ``{"sent", "elapsed", "statuses": {code: n},
  "retryAfter": [values seen]}``
- ``{"kind": "parallel", "calls": [...], "stagger"}``: those calls at once, each ``stagger``
  seconds after the previous -> the list of their results
- ``{"kind": "cut", "method", "path", "json"?, "headers"?, "until"}``: a streamed request whose
  connection is closed as soon as the body holds ``until`` (a client that leaves mid-answer)
  -> ``{"status", "text"}``: what it had read
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from typing import Any

import httpx

BASE = sys.argv[1]
CLIENT = httpx.Client(base_url=BASE, timeout=120, follow_redirects=False)
LOCK = threading.Lock()


def _filled(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("$cookie:"):
        return CLIENT.cookies.get(value.split(":", 1)[1]) or ""
    if isinstance(value, dict):
        return {k: _filled(v) for k, v in value.items()}
    return value


def http_call(call: dict[str, Any]) -> dict[str, Any]:
    with LOCK:
        headers, data = _filled(call.get("headers") or {}), _filled(call.get("data"))
    r = CLIENT.request(
        call.get("method", "GET"),
        call.get("base", "") + call["path"],  # an absolute URL leaves the client's base aside
        params=call.get("params"),
        json=call.get("json"),
        data=data,
        headers=headers,
    )
    return {"status": r.status_code, "headers": dict(r.headers), "text": r.text}


async def _mcp(call: dict[str, Any], refused: list[int]) -> dict[str, Any]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def record(response: Any) -> None:  # the SDK raises on a 4xx; keep its status
        if response.status_code >= 400:
            refused.append(response.status_code)

    async with httpx2.AsyncClient(
        headers=call.get("headers") or {}, timeout=120, event_hooks={"response": [record]}
    ) as http:
        async with streamable_http_client(f"{call.get('base', BASE)}/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool(call["tool"], call["arguments"])
                return {"isError": bool(result.is_error), "text": result.content[0].text if result.content else ""}


def mcp_call(call: dict[str, Any]) -> dict[str, Any]:
    # The MCP SDK's imports are about a second of a client's start-up: made only for MCP calls,
    # and here, outside the try below, so that a failed import is an error and not a refusal.
    import anyio
    import httpx2  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401

    refused: list[int] = []
    try:
        return anyio.run(_mcp, call, refused)
    except BaseException as exc:  # the HTTP layer refused (401, 429): the SDK raises
        return {"httpStatus": refused[0] if refused else None, "error": f"{type(exc).__name__}: {exc}"[:500]}


def burst(call: dict[str, Any]) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    retry_after: set[str] = set()
    started, sent = time.monotonic(), 0
    while sent < call["count"] and time.monotonic() - started < call["seconds"]:
        r = CLIENT.get(call["path"], params=call.get("params"), headers=call.get("headers") or {})
        sent += 1
        statuses[r.status_code] += 1
        if r.status_code == 429:
            retry_after.add(r.headers.get("retry-after", ""))
    return {
        "sent": sent,
        "elapsed": time.monotonic() - started,
        "statuses": dict(statuses),
        "retryAfter": sorted(retry_after),
    }


def parallel(call: dict[str, Any]) -> list[dict[str, Any]]:
    results: list[Any] = [None] * len(call["calls"])

    def run(i: int, inner: dict[str, Any]) -> None:
        results[i] = one(inner)

    threads = []
    for i, inner in enumerate(call["calls"]):
        thread = threading.Thread(target=run, args=(i, inner))
        thread.start()
        threads.append(thread)
        time.sleep(call.get("stagger", 0.5))
    for thread in threads:
        thread.join()
    return results


def cut(call: dict[str, Any]) -> dict[str, Any]:
    """Read a streamed answer until ``until`` shows, then drop the connection (its own client, so
    closing it closes the socket rather than returning it to a pool)."""
    text = ""
    with httpx.Client(base_url=BASE, timeout=120) as own:
        with own.stream(
            call.get("method", "POST"), call["path"], json=call.get("json"), headers=call.get("headers") or {}
        ) as r:
            for piece in r.iter_text():
                text += piece
                if call["until"] in text:
                    break
    return {"status": r.status_code, "text": text}


def one(call: dict[str, Any]) -> Any:
    kind = call.get("kind", "http")
    return {"http": http_call, "mcp": mcp_call, "burst": burst, "parallel": parallel, "cut": cut}[kind](call)


if __name__ == "__main__":
    print(json.dumps([one(c) for c in json.load(sys.stdin)]))
