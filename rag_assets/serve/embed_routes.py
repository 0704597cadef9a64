"""``POST /embed``: the Public tier's query vector, for ``rag-search.js`` over an index built with
a remote model (a browser cannot call the provider: the key must stay on the server).

Request ``{"text": "...", "model": "..."?}``; answer ``{"model", "dimension", "vector"}``, the
vector the server itself would search with (the public store's provider and model). Public
tier only: the route takes no tier, so Safe and Private text never reaches it. A site served
from another origin calls it across origins: list that origin in ``serve.cors_origins`` (the
app's CORSMiddleware answers the preflight; no other origin gets CORS headers, and its POST is
refused by :mod:`.origin_check`: a foreign page must not spend the provider's quota).
Errors are JSON ``{"error"}``: 400 for bad
input, 409 when ``model`` is not the index's (the page holds an older index), 503 when the
provider cannot embed; the script then falls back to BM25 alone.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rag_assets.embed.errors import EmbeddingError
from rag_assets.index.params import SearchError
from rag_assets.serve.http_params import MAX_QUERY_CHARS
from rag_assets.serve.tiers import BadRequest, Tiers

MAX_BODY_BYTES = 64 * 1024


class _Conflict(Exception):
    """The caller's index was built with another model than the store's."""


def _answer(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def _text_of(body: bytes) -> tuple[str, str | None]:
    """(text, model or None) from the request body; BadRequest when it is not as documented."""
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is too large (over {MAX_BODY_BYTES} bytes); send at most {MAX_BODY_BYTES}")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadRequest('the body must be JSON: {"text": "..."}') from None
    if not isinstance(data, dict) or set(data) - {"text", "model"}:
        raise BadRequest('the body must be a JSON object with "text" (and optionally "model"), nothing else')
    text, model = data.get("text"), data.get("model")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest('"text" is required: the query to embed')
    if len(text) > MAX_QUERY_CHARS:
        raise BadRequest(f'"text" is too long ({len(text)} characters); keep it under {MAX_QUERY_CHARS}')
    if model is not None and not isinstance(model, str):
        raise BadRequest('"model" must be the index\'s model name')
    return text, model


async def _read_capped(request: Request) -> bytes:
    """The body, read no further than one byte past MAX_BODY_BYTES (``request.body()`` would
    hold a body of any size in memory before _text_of could refuse it)."""
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            break
    return raw


def embed_routes(tiers: Tiers) -> list[Route]:
    """The ``/embed`` routes over the server's tiers (the Public tier's store and embedder)."""

    def embed(request: Request, text: str, model: str | None) -> dict[str, Any]:
        index = tiers.index("public", request)
        embedder = tiers.embedder("public", index)
        if model is not None and model != embedder.model:
            raise _Conflict(f"the public index is built with {embedder.model}, not {model}; reload the index")
        vector = embedder.embed_query(text)
        return {"model": embedder.model, "dimension": int(len(vector)), "vector": [float(x) for x in vector]}

    async def post(request: Request) -> JSONResponse:
        try:
            text, model = _text_of(await _read_capped(request))
            return _answer(200, await run_in_threadpool(embed, request, text, model))
        except (BadRequest, SearchError) as exc:
            return _answer(400, {"error": str(exc)})
        except _Conflict as exc:
            return _answer(409, {"error": str(exc)})
        except EmbeddingError as exc:
            return _answer(503, {"error": f"cannot embed the query: {exc}; search with BM25 alone"})

    return [Route("/embed", post, methods=["POST"])]
