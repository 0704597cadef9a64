"""The HTTP API behind ``rag serve``: search, packed context and status as JSON.

Routes (all ``GET``, all answer JSON)::

    /search?q=...&tier=public&k=10&collections=a,b&filter=key=value&tag=x&prefix=...
            &mode=hybrid|vector|bm25|chunks&fusion=zscore|rrf|convex&vector_weight=&bm25_weight=
            &min_score=&mmr=0.7&view=pages|chunks&sections=3&per_doc=2&candidates=&rrf_k=
            &rerank=true|false
        -> {"query", "tier", "mode", "model", "view", "minScore", "bestRelevance",
            "hits": [Hit.to_json()...], "latencyMs", "reranked",
            and when a reranker ran "reranker", "rerankCandidates", "rerankMs", "rerankError"}
       Hits are pages (view=pages, the default), each with its matching ``sections``; view=chunks
       (or per_doc, or mode=chunks: a hybrid search in the chunk view) gives one hit per chunk.
       ``min_score`` filters on each hit's calibrated ``relevance`` (0-1); nothing passing gives
       ``hits: []`` and a ``message``.
    /context?q=...&budget=1500 (+ every /search parameter; k defaults to 20)
        -> the packed context: text with citation tags, citations, token count (empty, with a
           ``message``, when no hit reaches ``min_score``)
    /status  -> the ``rag status --json`` report (every tier: exists, chunks, model, built, freshness)
    /health  -> {"status": "ok"}

A parameter the API cannot use (a non-integer ``k``, an unknown tier or mode, an empty
query, a malformed filter, a tier whose store is not built yet, ...) gets a 400 with
``{"error": "<what is wrong and what to do>"}``; an embedding provider that cannot be
reached gets a 503; only a bug is a 500, logged with its traceback.

One :class:`~rag_assets.search.retrieval.SearchIndex` per tier is created on first use and kept:
its matrix stays in memory and reloads itself when a build changes the store. One query
embedder per tier is kept too, replaced when the store's model changes. Searches run in
Starlette's thread pool, so concurrent clients are served in parallel (numpy and SQLite
release the GIL); the index gives each thread its own SQLite connection.

The Private tier's queries are embedded only locally (``tier_embedder`` enforces it). The
server binds 127.0.0.1 by default; bound to any other address it refuses the Private tier
unless started with ``allow_private_remote=True``.

``rerank`` (default: on when rag.yaml names a reranker) re-scores the top fused candidates
(:mod:`rag_assets.search.rerank`). A reranker that fails leaves the fused order and says
so (``reranked: false``, ``rerankError``); one that would send Private-tier passages off
the machine is a 403.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rag_assets.config import TIERS, RagConfig
from rag_assets.config.providers import is_loopback_host
from rag_assets.embed.base import Embedder
from rag_assets.embed.errors import EmbeddingError
from rag_assets.privacy.egress import PrivacyError
from rag_assets.search.context import pack_context
from rag_assets.search.params import (
    MODES,
    VIEWS,
    SearchError,
    SearchParams,
    SearchResult,
    parse_filters,
)
from rag_assets.search.rerank.selection import rerank_stage
from rag_assets.search.rerank.stage import RerankStage, rerank_json, search_reranked
from rag_assets.search.retrieval import SearchIndex, tier_embedder
from rag_assets.serve.status import status_report

log = logging.getLogger("rag_assets.serve.http")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MAX_QUERY_CHARS = 4000  # far beyond any question; keeps one request from tying up a worker
DEFAULT_BUDGET = 1500
MAX_BUDGET = 200_000
DEFAULT_CONTEXT_K = 20  # more hits than fit, so the budget decides (as `rag context`)

SEARCH_PARAMS = (
    "q", "tier", "k", "collections", "filter", "tag", "prefix", "mode", "fusion", "vector_weight",
    "bm25_weight", "min_score", "mmr", "per_doc", "candidates", "rrf_k", "view", "sections", "rerank",
)
REPEATABLE = ("collections", "filter", "tag")
CONTEXT_PARAMS = SEARCH_PARAMS + ("budget",)


class BadRequest(ValueError):
    """A request the API cannot serve as asked; the message says what to do (HTTP 400)."""


class Refused(Exception):
    """A request the server will not serve (HTTP 403), e.g. the Private tier off loopback."""


# ---------------------------------------------------------------------------------- indexes


class _ServedIndex(SearchIndex):
    """A SearchIndex made for a long-running process.

    - Its search log is written by one background thread, so a search never waits for the
      store's write lock (held for seconds by a build) and concurrent searches do not queue
      on it.
    """

    def __init__(self, *args: Any, log_queue: "queue.Queue[Callable[[], None]] | None" = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log_queue = log_queue

    def _log(self, result: SearchResult) -> None:
        if self._log_queue is None:
            super()._log(result)
        else:
            self._log_queue.put(lambda: SearchIndex._log(self, result))


class _SearchLogWriter:
    """One daemon thread that writes search-log rows, in the order searches finished."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=10_000)
        self._thread = threading.Thread(target=self._run, name="rag-search-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            try:
                job()
            except Exception:  # a log row must never take the server down
                log.warning("could not write a search-log row", exc_info=True)

    def put(self, job: Callable[[], None]) -> None:
        try:
            self.queue.put_nowait(job)
        except queue.Full:  # the store is locked for long: drop rows rather than memory
            log.warning("search log backlog full; a search was not logged")

    def close(self, timeout: float = 5.0) -> None:
        self.queue.put(None)
        self._thread.join(timeout)


class Tiers:
    """The searchable tiers: one index and one query embedder each, made on first use."""

    def __init__(self, cfg: RagConfig, *, serve_private: bool = True, log_searches: bool = True) -> None:
        self.cfg = cfg
        self.serve_private = serve_private
        self._log_writer = _SearchLogWriter() if log_searches else None
        self._log_searches = log_searches
        self._indexes: dict[str, SearchIndex] = {}
        self._embedders: dict[str, tuple[tuple, Embedder]] = {}
        self._stages: dict[str, RerankStage] = {}
        self._lock = threading.Lock()

    def check_tier(self, tier: str) -> None:
        if tier not in TIERS:
            raise BadRequest(f"unknown tier {tier!r}; use one of {', '.join(TIERS)}")
        if tier == "private" and not self.serve_private:
            raise Refused(
                "the private tier is not served on a non-loopback address; query it on a server bound to "
                "127.0.0.1 (the default), or start the server with allow_private_remote"
            )

    def index(self, tier: str) -> SearchIndex:
        self.check_tier(tier)
        index = self._indexes.get(tier)
        if index is None:
            with self._lock:
                index = self._indexes.get(tier)
                if index is None:
                    index = _ServedIndex(
                        self.cfg.store_path(tier),
                        self.cfg.collection_weights,
                        log_searches=self._log_searches,
                        log_queue=self._log_writer,
                        lexical="auto",
                    )
                    self._indexes[tier] = index
        if not index.path.is_file():
            raise BadRequest(f"the {tier} tier has no store yet (expected at {index.path}); build it with `rag build`")
        return index

    def embedder(self, tier: str, index: SearchIndex) -> Embedder:
        """The tier's query embedder, rebuilt when a rebuild changed the store's model."""
        data = index.loaded()
        key = (data.provider, data.model, data.dimension)
        cached = self._embedders.get(tier)
        if cached is not None and cached[0] == key:
            return cached[1]
        with self._lock:
            cached = self._embedders.get(tier)
            if cached is None or cached[0] != key:
                cached = (key, tier_embedder(self.cfg, tier, index))
                self._embedders[tier] = cached
            return cached[1]

    def rerank_stage(self, tier: str, requested: bool | None) -> RerankStage | None:
        """The tier's reranking stage, made once (a cross-encoder once for every tier);
        Refused when it would send Private-tier passages off the machine."""
        if requested is False or not self.cfg.reranker.enabled:
            return rerank_stage(self.cfg, tier, requested)  # None, or the error for rerank=true
        key = "local" if self.cfg.reranker.name == "cross_encoder" else tier
        stage = self._stages.get(key)
        if stage is None:
            with self._lock:
                stage = self._stages.get(key)
                if stage is None:
                    try:
                        stage = rerank_stage(self.cfg, tier, requested)
                    except PrivacyError as exc:
                        raise Refused(str(exc)) from None
                    if stage is not None:
                        self._stages[key] = stage
        return stage

    def preload(self) -> None:
        """Load the matrices of the stores that exist, so the first search is not the slow one."""
        for tier in TIERS:
            if tier == "private" and not self.serve_private:
                continue
            if not self.cfg.store_path(tier).is_file():
                continue
            try:
                self.index(tier).loaded()
            except Exception:
                log.warning("could not preload the %s tier", tier, exc_info=True)

    def loaded_summary(self) -> dict[str, Any]:
        out = {}
        for tier, index in list(self._indexes.items()):
            current = index._loaded
            if current is not None:
                out[tier] = {"chunksInMemory": int(len(current.rowids)), "model": current.model}
        return out

    def close(self) -> None:
        if self._log_writer is not None:
            self._log_writer.close()
        for stage in self._stages.values():
            stage.reranker.close()


# ---------------------------------------------------------------------------------- parameters


def _single(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) > 1 and name not in REPEATABLE:
        raise BadRequest(f"give {name} only once (got {len(values)} values)")
    return values[-1]


def _int(request: Request, name: str, low: int | None = None, high: int | None = None) -> int | None:
    raw = _single(request, name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {raw[:40]!r}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise BadRequest(f"{name} must be {bounds}, got {value}")
    return value


def _float(request: Request, name: str) -> float | None:
    raw = _single(request, name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        raise BadRequest(f"{name} must be a number, got {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise BadRequest(f"{name} must be a finite number, got {raw[:40]!r}")
    return value


def _bool(request: Request, name: str) -> bool | None:
    raw = _single(request, name)
    if raw is None or raw.strip() == "":
        return None
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise BadRequest(f"{name} must be true or false, got {raw[:40]!r}")


def _list(request: Request, name: str) -> tuple[str, ...]:
    """A repeatable, comma-separable parameter: ``?collections=a,b&collections=c``."""
    items = []
    for value in request.query_params.getlist(name):
        items.extend(part.strip() for part in value.split(","))
    return tuple(dict.fromkeys(i for i in items if i))


def _check_known(request: Request, known: tuple[str, ...]) -> None:
    unknown = sorted(set(request.query_params.keys()) - set(known))
    if unknown:
        raise BadRequest(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(known)}")


def parse_query(request: Request) -> str:
    q = _single(request, "q")
    if q is None or not q.strip():
        raise BadRequest("q is required: the text to search for, e.g. ?q=proxmox+vlan")
    if len(q) > MAX_QUERY_CHARS:
        raise BadRequest(f"q is too long ({len(q)} characters); keep it under {MAX_QUERY_CHARS}")
    return q


def parse_search_params(request: Request, *, default_k: int = 10) -> tuple[str, SearchParams]:
    """(tier, SearchParams) from the query string; BadRequest on anything unusable."""
    tier = (_single(request, "tier") or "public").strip().lower()
    mode = (_single(request, "mode") or "hybrid").strip().lower()
    view = (_single(request, "view") or "").strip().lower() or None
    if mode == "chunks":  # shorthand: a hybrid search, one hit per chunk
        mode, view = "hybrid", "chunks"
    if mode not in MODES:
        raise BadRequest(f"unknown mode {mode!r}; use one of {', '.join(MODES)} (or chunks)")
    if view is not None and view not in VIEWS:
        raise BadRequest(f"unknown view {view!r}; use one of {', '.join(VIEWS)}")
    k = _int(request, "k", 1, 1000)
    overrides: dict[str, Any] = {
        "fusion": (_single(request, "fusion") or "").strip().lower() or None,
        "vector_weight": _float(request, "vector_weight"),
        "bm25_weight": _float(request, "bm25_weight"),
        "min_score": _float(request, "min_score"),
        "mmr_lambda": _float(request, "mmr"),
        "max_per_document": _int(request, "per_doc", 1),
        "candidates": _int(request, "candidates", 1, 10_000),
        "rrf_k": _int(request, "rrf_k", 0),
        "sections": _int(request, "sections", 1, 20),
    }
    if overrides["max_per_document"] is not None and view is None:
        view = "chunks"  # a cap on chunks per page only means something in the chunk view
    if view is not None:
        overrides["view"] = view
    try:
        filters = parse_filters(request.query_params.getlist("filter"))
    except SearchError as exc:
        raise BadRequest(str(exc)) from None
    prefix = _single(request, "prefix")
    params = SearchParams(
        k=default_k if k is None else k,
        mode=mode,
        collections=_list(request, "collections"),
        tags=_list(request, "tag"),
        filters=filters,
        slug_prefix=prefix.strip() if prefix and prefix.strip() else None,
        **{name: value for name, value in overrides.items() if value is not None},
    )
    if overrides["candidates"] is None and params.candidates < params.k:
        params = replace(params, candidates=params.k)
    try:
        params.validate()
    except SearchError as exc:
        raise BadRequest(str(exc)) from None
    return tier, params


# ---------------------------------------------------------------------------------- app


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def create_app(cfg: RagConfig, *, serve_private: bool = True, log_searches: bool = True, preload: bool = True) -> Starlette:
    """The Starlette app; ``serve_private=False`` answers Private-tier requests with a 403."""
    tiers = Tiers(cfg, serve_private=serve_private, log_searches=log_searches)

    def run_search(query: str, tier: str, params: SearchParams, rerank: bool | None) -> SearchResult:
        index = tiers.index(tier)
        stage = tiers.rerank_stage(tier, rerank)
        embedder = None if params.mode == "bm25" else tiers.embedder(tier, index)
        return search_reranked(index, query, embedder, params, stage)

    async def guarded(work: Callable[[], Any]) -> JSONResponse:
        """Run blocking work in the thread pool and turn the expected failures into 4xx/503."""
        try:
            return JSONResponse(await run_in_threadpool(work))
        except Refused as exc:
            return error(403, str(exc))
        except (BadRequest, SearchError) as exc:
            return error(400, str(exc))
        except PrivacyError as exc:
            return error(403, f"{exc}; mode=bm25 searches without embedding the query")
        except EmbeddingError as exc:
            return error(503, f"cannot embed the query: {exc}; mode=bm25 searches without embedding")
        except ValueError as exc:  # anything else a parameter could still trip inside the search
            log.warning("400 for a request that failed inside the search: %s", exc, exc_info=True)
            return error(400, str(exc))

    async def search(request: Request) -> JSONResponse:
        def work() -> dict[str, Any]:
            _check_known(request, SEARCH_PARAMS)
            query = parse_query(request)
            tier, params = parse_search_params(request)
            result = run_search(query, tier, params, _bool(request, "rerank"))
            out = {
                "query": query,
                "tier": tier,
                "mode": params.mode,
                "model": result.model,
                "view": params.view,
                "minScore": params.min_score,
                "bestRelevance": round(result.best_relevance, 4),
                "hits": [h.to_json() for h in result.hits],
                "latencyMs": round(result.latency_ms, 2),
                **rerank_json(result),
            }
            if not result.hits:
                out["message"] = result.nothing_passed()
            return out

        return await guarded(work)

    async def context(request: Request) -> JSONResponse:
        def work() -> dict[str, Any]:
            _check_known(request, CONTEXT_PARAMS)
            query = parse_query(request)
            budget = _int(request, "budget", 1, MAX_BUDGET) or DEFAULT_BUDGET
            tier, params = parse_search_params(request, default_k=DEFAULT_CONTEXT_K)
            params = replace(params, view="chunks")  # packing merges a page's chunks itself
            started = time.perf_counter()
            result = run_search(query, tier, params, _bool(request, "rerank"))
            packed = pack_context(result.hits, budget)
            out = dict(packed.to_json())
            if not result.hits:
                out["message"] = result.nothing_passed()
            out["bestRelevance"] = round(result.best_relevance, 4)
            out.setdefault("query", query)
            out.setdefault("tier", tier)
            out.setdefault("budget", budget)
            out.setdefault("tokens", packed.tokens)
            out["latencyMs"] = round((time.perf_counter() - started) * 1000, 2)
            out.update(rerank_json(result))
            return out

        return await guarded(work)

    async def status(request: Request) -> JSONResponse:
        def work() -> dict[str, Any]:
            report = status_report(cfg)
            if not serve_private and "private" in report.get("tiers", {}):
                private = report["tiers"]["private"]
                report["tiers"]["private"] = {"exists": private.get("exists"), "served": False}
            for tier, entry in report.get("tiers", {}).items():
                entry.setdefault("served", True)
            report["server"] = {"privateTierServed": serve_private, "loaded": tiers.loaded_summary()}
            return report

        return await guarded(work)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        hint = " (routes: /search, /context, /status, /health)" if exc.status_code == 404 else ""
        return error(exc.status_code, f"{exc.detail}{hint}")

    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return error(500, f"internal server error ({type(exc).__name__}); the server log has the details")

    @asynccontextmanager
    async def lifespan(app: Starlette):
        if preload:
            await run_in_threadpool(tiers.preload)
        try:
            yield
        finally:
            tiers.close()

    app = Starlette(
        routes=[
            Route("/search", search, methods=["GET"]),
            Route("/context", context, methods=["GET"]),
            Route("/status", status, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    app.state.tiers = tiers
    return app


def limit_blas_threads(threads: int = 1) -> str:
    """Give numpy's BLAS ``threads`` threads per call (when threadpoolctl is installed).

    The server's parallelism is one search per worker thread. A multi-threaded BLAS on top
    of that oversubscribes the cores, and OpenBLAS's workers spin after each matrix product,
    taking the core the same search's SQLite (BM25) work needs next: in bench/search.py on
    2 cores, hybrid p50 at 100,000 chunks was 132 ms with 2 BLAS threads, 79 ms with 1.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return "BLAS threads unchanged (threadpoolctl not installed; set OPENBLAS_NUM_THREADS=1 to limit them)"
    threadpool_limits(threads, user_api="blas")
    return f"BLAS limited to {threads} thread(s) per search"


def serve(
    cfg: RagConfig,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    *,
    allow_private_remote: bool = False,
    log_level: str = "info",
) -> None:
    """Serve the API with uvicorn until interrupted."""
    import uvicorn

    serve_private = is_loopback_host(host) or allow_private_remote
    if not is_loopback_host(host):
        if allow_private_remote:
            print(
                f"warning: serving on {host}, a non-loopback address, WITH the private tier: anyone who can reach "
                "this port can read your private notes"
            )
        else:
            print(f"warning: serving on {host}, a non-loopback address: the private tier is not served (403)")
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        log.info(limit_blas_threads(1))
    print(f"rag serve: http://{host if ':' not in host else f'[{host}]'}:{port}/search?q=... (Ctrl+C to stop)", flush=True)
    uvicorn.run(create_app(cfg, serve_private=serve_private), host=host, port=port, log_level=log_level)
