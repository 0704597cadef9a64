"""``POST /ask``: a question answered from a tier's sources, as JSON or as server-sent events.

Request body (JSON; any other key is a 400)::

    {"question": "...", "tier": "public" | "safe" | "private", "session"?: "name",
     "collections"?: ["a", "b"] or "a,b", "stream"?: true}

``question`` is required, at most ``MAX_QUESTION_CHARS`` characters; ``tier`` defaults to
public; ``session`` continues a conversation (1-64 letters, digits, ``.``, ``_``, ``-``): the
caller's own, as each remote caller's sessions are kept apart (:func:`caller_session`).

JSON (the default) answers what ``rag ask --json`` prints::

    {"answer", "citations": [{"n", "id", "collection", "slug", "title", "headingPath"}], "model",
     "usage", "abstained", "citationCheck": {"unknown": [n, ...], "uncited": bool}, "retrieval": {...}}

Server-sent events when the ``Accept`` header contains ``text/event-stream`` or the body says
``"stream": true``, in this order:

- ``sources``: ``{"question", "query", "tier", "abstained", "message"?, "sources": [{"n", "id",
  "collection", "slug", "title", "headingPath", "anchor", "url", "relevance", "text", and for the
  page "html" and "plain": the text rendered and sanitised from a block boundary}]}``
- ``token`` (one per streamed piece): ``{"text"}``
- ``done``: ``{"answer", "citations", "model", "usage", "abstained", "citationCheck", "latencyMs"}``
- or, instead of ``done``, ``error``: ``{"error", "status"}`` (502: the chat model failed;
  503: no chat model is available; the sources were sent already).

Statuses: 400 bad input (empty or over-long question, unknown tier or key, malformed JSON),
401/403 a tier the caller's token does not open (:mod:`rag_assets.serve.access`), 429 over the
client's ask rate or ``serve.max_concurrent_asks`` answers in flight (with ``Retry-After``),
403 the Private tier off loopback (as for /search) or a non-local chat model for it, 413 a
body over ``MAX_BODY_BYTES``, 415 a body sent as other than ``application/json`` (none included)
and 403 a page of another site (:mod:`.origin_check`); in JSON mode 502/503 as above with ``retrieval`` (the sources)
in the body. An abstained answer (nothing relevant enough) is a 200 with ``abstained: true``
and no model call. An anonymous question past ``serve.anonymous_chat_tokens_per_day`` is
answered as when no model is available: the sources, and the reason.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import replace
from typing import Any

import anyio
import orjson
from starlette.background import BackgroundTask
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rag_assets.answer.ask import AskRequest, Event, Prepared, collect, generate, prepare
from rag_assets.answer.selection import ChatSelection, chat_for_tier
from rag_assets.answer.sessions import check_session_name
from rag_assets.base.egress import PrivacyError
from rag_assets.config import RagConfig
from rag_assets.embed.errors import EmbeddingError
from rag_assets.index.params import SearchError
from rag_assets.search.rendered import rendered_source_json
from rag_assets.search.rerank.stage import search_reranked
from rag_assets.serve.access import TierDenied
from rag_assets.serve.http_params import MAX_QUERY_CHARS
from rag_assets.serve.limits import Limits, Slot, client_key, counted, exempt, too_many
from rag_assets.serve.tiers import BadRequest, Refused, Tiers

log = logging.getLogger("rag_assets.serve.ask_routes")

MAX_QUESTION_CHARS = MAX_QUERY_CHARS
MAX_BODY_BYTES = 64 * 1024
ASK_KEYS = ("question", "tier", "session", "collections", "stream")
BUSY_RETRY_SECONDS = 5  # an answer takes seconds; sooner would likely find every slot still taken


def ask_routes(cfg: RagConfig, tiers: Tiers, limits: Limits) -> list[Route]:
    """The routes this module serves, for ``create_app``'s route list; ``limits``: the cap on
    answers in flight and the anonymous daily allowance (:mod:`rag_assets.serve.limits`)."""
    models = ChatModels(cfg)

    def prepare_answer(request: AskRequest, caller: Request) -> Prepared:
        tiers.check_tier(request.tier, caller)  # before anything is searched or a model chosen
        # Sanitised before the rewrite, the search, the model and the answer log see it
        request = replace(
            request,
            question=tiers.question(request.tier, request.question),
            session=caller_session(request.session, caller),
        )
        selection = models.get(request.tier)
        budget = limits.anonymous_budget(caller)
        if budget is not None and selection.provider is not None and budget.exhausted():
            selection = ChatSelection(None, budget.reason())  # the sources only, and why
        index = tiers.index(request.tier, caller)
        stage = tiers.rerank_stage(request.tier, None)

        def search(query, params):
            return search_reranked(index, query, tiers.embedder(request.tier, index), params, stage)

        return prepare(request, search, selection, index.path, cfg.llm)

    async def ask(request: Request) -> Response:
        unlimited = exempt(request)  # admin scope: loopback owner or an admin token
        slot = None if unlimited else limits.slots.acquire()
        if slot is None and not unlimited:
            return too_many(f"{limits.slots.size} answers are being written already", BUSY_RETRY_SECONDS)
        try:
            body = await read_body(request)
            ask_request, streamed = parse_ask(body, request.headers.get("accept", ""))
            prepared = await run_in_threadpool(prepare_answer, ask_request, request)
        except Exception as exc:
            if slot is not None:
                slot.release()
            return _refusal(exc)
        events = counted(generate(prepared, streamed=streamed), prepared, limits.anonymous_budget(request))
        if streamed:
            return StreamingResponse(
                _released(sse(events), slot),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
                background=BackgroundTask(slot.release) if slot is not None else None,
            )
        try:
            collected = await run_in_threadpool(lambda: collect(prepared, events))
        finally:
            if slot is not None:
                slot.release()
        return JSONResponse(collected.body, status_code=collected.status)

    return [Route("/ask", ask, methods=["POST"])]


def caller_session(session: str | None, caller: Request) -> str | None:
    """A conversation's name as stored. The owner's (a loopback client of a loopback server) as
    given, shared with ``rag ask --session``; anyone else's under their token's name or address,
    so a caller who names another's session starts a conversation of their own instead of
    continuing (and reading, through the rewrite) that one."""
    if session is None or getattr(caller.user, "via", None) == "loopback":
        return session
    return f"{client_key(caller.scope)}/{session}"


def _refusal(exc: Exception) -> JSONResponse:
    """The JSON error for what stopped a question before any answer (a bug is re-raised: a 500)."""
    if isinstance(exc, (BadRequest, SearchError)):
        return _error(400, str(exc))
    if isinstance(exc, (Refused, PrivacyError)):
        return _error(403, str(exc))
    if isinstance(exc, TierDenied):
        return _error(exc.status, str(exc))
    if isinstance(exc, TooLarge):
        return _error(413, str(exc))
    if isinstance(exc, EmbeddingError):
        return _error(503, f"cannot embed the question: {exc}")
    raise exc


async def _released(frames: Generator[bytes, None, None], slot: Slot | None) -> AsyncIterator[bytes]:
    """The stream's frames; its answer slot is freed when it ends, fails or the client leaves.

    When the client leaves, ``frames`` is closed here rather than whenever the garbage collector
    gets to it (tracebacks keep it alive): closing runs :func:`~rag_assets.serve.limits.counted`'s
    accounting and closes the model's stream."""
    try:
        async for frame in iterate_in_threadpool(frames):
            yield frame
    finally:
        if slot is not None:
            slot.release()
        # The thread pool's next() has returned by now (it is not abandoned on cancellation);
        # shielded, as a stream cancelled on disconnect would cancel this await too.
        with anyio.CancelScope(shield=True):
            await run_in_threadpool(_close, frames)


def _close(frames: Generator[bytes, None, None]) -> None:
    """Close an answer's frames (and with them its accounting and model stream), in a worker thread."""
    try:
        frames.close()
    except ValueError:  # still running in a worker thread: it ends with the generator's own return
        log.warning("an answer's stream could not be closed at once; it is closed when it ends")


class TooLarge(ValueError):
    """A request body over MAX_BODY_BYTES (HTTP 413)."""


class ChatModels:
    """One chat model per tier, chosen on first use and kept (its connections reused); a tier
    without one is chosen again on the next request, so starting Ollama later is noticed."""

    def __init__(self, cfg: RagConfig) -> None:
        self.cfg = cfg
        self._chosen: dict[str, ChatSelection] = {}
        self._lock = threading.Lock()

    def get(self, tier: str) -> ChatSelection:
        chosen = self._chosen.get(tier)
        if chosen is not None:
            return chosen
        with self._lock:
            chosen = self._chosen.get(tier)
            if chosen is None:
                chosen = chat_for_tier(self.cfg.llm, tier, private_hosts=self.cfg.private_hosts)
                if chosen.provider is not None:
                    self._chosen[tier] = chosen
            return chosen


async def read_body(request: Request) -> Any:
    # The Content-Type (JSON only) and the Origin were checked before any route ran (.origin_check).
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise TooLarge(f"the request body is over {MAX_BODY_BYTES} bytes")
    try:
        # orjson, not json: it refuses deep nesting (json raises RecursionError, a 500) and
        # lone surrogates (which would fail later, when the question is logged or streamed)
        return orjson.loads(raw or b"null")
    except ValueError:
        raise BadRequest('the body must be JSON, e.g. {"question": "how do I ...?", "tier": "public"}') from None


def parse_ask(body: Any, accept: str) -> tuple[AskRequest, bool]:
    """The request and whether to stream; BadRequest saying what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest('the body must be a JSON object, e.g. {"question": "how do I ...?", "tier": "public"}')
    unknown = sorted(set(body) - set(ASK_KEYS))
    if unknown:
        raise BadRequest(f"unknown key(s) {', '.join(map(repr, unknown))}; the keys are {', '.join(ASK_KEYS)}")
    question = body.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BadRequest("question must be a non-empty string")
    if len(question) > MAX_QUESTION_CHARS:
        raise BadRequest(f"question is {len(question)} characters; the most is {MAX_QUESTION_CHARS}")
    tier = body.get("tier", "public")
    if not isinstance(tier, str):
        raise BadRequest("tier must be one of public, safe, private")
    session = body.get("session")
    if session is not None:
        if not isinstance(session, str):
            raise BadRequest("session must be a string")
        try:
            check_session_name(session)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("stream must be true or false")
    request = AskRequest(
        question=question.strip(), tier=tier, session=session, collections=_collections(body.get("collections"))
    )
    return request, stream or "text/event-stream" in accept


def _collections(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest('collections must be a list of names or a comma-separated string, e.g. ["docs", "posts"]')
    return tuple(v.strip() for v in value if v.strip())


def sse(events: Iterator[Event]) -> Generator[bytes, None, None]:
    """Events as ``text/event-stream`` frames (one JSON line of data each)."""
    for event in events:
        payload = event.data
        if event.kind == "sources":  # the page shows each source rendered (rag_assets.search.rendered)
            payload = {**payload, "sources": [rendered_source_json(s) for s in payload.get("sources", [])]}
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        yield f"event: {event.kind}\ndata: {data}\n\n".encode()


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)
