"""The HTTP API behind ``rag serve``: search, packed context and status as JSON.

Routes (``GET`` unless marked; all but ``/`` answer JSON)::

    /search?q=...&tier=public&k=10&collections=a,b&filter=key=value&tag=x&prefix=...
            &mode=hybrid|vector|bm25|chunks&fusion=zscore|rrf|convex&vector_weight=&bm25_weight=
            &min_score=&mmr=0.7&view=pages|chunks&sections=3&per_doc=2&candidates=&rrf_k=
            &rerank=true|false
        -> {"query", "tier", "mode", "model", "view", "minScore", "bestRelevance",
            "hits": [Hit.to_json()..., each section with "html" and "plain": its text rendered and
            sanitised from a block boundary (rag_assets.search.rendered)], "latencyMs", "reranked",
            and when a reranker ran "reranker", "rerankCandidates", "rerankMs", "rerankError"}
       Hits are pages (view=pages, the default), each with its matching ``sections``; view=chunks
       (or per_doc, or mode=chunks: a hybrid search in the chunk view) gives one hit per chunk.
       ``min_score`` filters on each hit's calibrated ``relevance`` (0-1); nothing passing gives
       ``hits: []`` and a ``message``.
    /context?q=...&budget=1500 (+ every /search parameter; k defaults to 20)
        -> the packed context: text with citation tags, citations, token count (empty, with a
           ``message``, when no hit reaches ``min_score``)
    /status  -> the ``rag status --json`` report (every tier: exists, chunks, model, built, freshness,
                and ``queryEmbedder``: the embedder that embeds its queries, ready or why not, with a
                ``warning`` when it differs from what a next build would use), with
                ``server.privateTierServed``, ``embeddingService`` (the embedder a next build would pick:
                provider, model, reachable) and ``chatService`` (per served tier: available, model, reason)
    /health  -> {"status": "ok"}
    /mcp     -> the MCP server over streamable HTTP (rag_assets.serve.mcp_server): the same tools
                as `rag mcp`, on the same per-tier indexes; the Private tier only to loopback clients
    POST /ask -> an answer with numbered citations, JSON or server-sent events (:mod:`.ask_routes`)
    POST /embed -> the Public tier's query vectors for rag-search.js (:mod:`.embed_routes`)
    /related?note=...&tier=... -> a note's links, backlinks and nearest notes (:mod:`.related_routes`)
    /        -> the page for people: search, chat and status in a browser (:mod:`.web_routes`)
    /admin   -> the admin console (scope admin): tier cards, vaults, ingest, audit (:mod:`.admin_routes`)

Every POST (``/ask``, ``/embed``, ``/mcp``) must be sent as ``application/json`` (else 415) and,
when it carries an ``Origin``, come from the server's own origin or one of ``serve.cors_origins``
(else 403): a page of another site cannot make the server answer, log or spend on its behalf
(:mod:`.origin_check`).

A parameter the API cannot use (a non-integer ``k``, an unknown tier or mode, an empty
query, a malformed filter, a tier whose store is not built yet, ...) gets a 400 with
``{"error": "<what is wrong and what to do>"}``; an embedding provider that cannot be
reached gets a 503; only a bug is a 500, logged with its traceback.

One :class:`~rag_assets.search.retrieval.SearchIndex` per tier is created on first use and kept:
its matrix stays in memory and reloads itself when a build changes the store. One query
embedder per tier is kept too, replaced when the store's model changes. Searches run in
Starlette's thread pool, so concurrent clients are served in parallel (numpy and SQLite
release the GIL); the index gives each thread its own SQLite connection.

A Safe-tier query is sanitised (secrets redacted, the identity map applied) before it is
embedded, reranked, logged or echoed (:mod:`.questions`). The Private tier's queries are embedded only locally (``tier_embedder`` enforces it). The
server binds 127.0.0.1 by default; bound to any other address it refuses the Private tier
unless started with ``allow_private_remote=True``. Who may read which tier is decided once per
request by the authentication middleware (:mod:`.access`: loopback, Bearer token or the page's
session cookie) and checked wherever a tier is opened (401/403); per-client rate limits, the
cap on answers in flight and CORS come from ``serve:`` in rag.yaml (:mod:`.limits`); ``/login``
and ``/logout`` sign the page in (:mod:`.login`).

``rerank`` (default: on when rag.yaml names a reranker) re-scores the top fused candidates
(:mod:`rag_assets.search.rerank`). A reranker that fails leaves the fused order and says
so (``reranked: false``, ``rerankError``); one that would send Private-tier passages off
the machine is a 403.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rag_assets.base.blas import limit_blas_threads
from rag_assets.base.egress import PrivacyError
from rag_assets.config import RagConfig
from rag_assets.config.providers import is_loopback_host
from rag_assets.embed.errors import EmbeddingError
from rag_assets.index.params import MAX_BUDGET, SearchError, SearchParams, SearchResult
from rag_assets.search.context import pack_context
from rag_assets.search.passages import cites_notes
from rag_assets.search.rendered import rendered_hit_json
from rag_assets.search.rerank.stage import rerank_json, search_reranked
from rag_assets.serve.access import AccessBackend, TierDenied, auth_error
from rag_assets.serve.admin_routes import admin_routes
from rag_assets.serve.ask_routes import ask_routes
from rag_assets.serve.embed_routes import embed_routes
from rag_assets.serve.host_check import LoopbackHostOnly
from rag_assets.serve.http_params import (
    MAX_QUERY_CHARS,
    SEARCH_PARAMS,
    bool_param,
    check_known,
    int_param,
    parse_query,
    parse_search_params,
)
from rag_assets.serve.limits import Limits, RateLimits
from rag_assets.serve.login import CsrfGuard, SessionStore, login_routes
from rag_assets.serve.mcp_server import mcp_http
from rag_assets.serve.origin_check import SameOriginJsonPosts, posting_paths
from rag_assets.serve.related_routes import related_routes
from rag_assets.serve.status import (
    add_query_embedders,
    chat_service_summary,
    embedding_service_summary,
    locked_status,
    status_report,
)
from rag_assets.serve.tiers import BadRequest, Refused, Tiers
from rag_assets.serve.tokens import TokenStore, token_file_path
from rag_assets.serve.web_routes import web_routes

log = logging.getLogger("rag_assets.serve.http")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
DEFAULT_BUDGET = 1500
USAGE_FILE = "anonymous-chat-usage.json"  # in the output's data folder: survives a restart
DEFAULT_CONTEXT_K = 20  # more hits than fit, so the budget decides (as `rag context`)
__all__ = ["MAX_QUERY_CHARS", "BadRequest", "Refused", "Tiers", "create_app", "limit_blas_threads", "serve"]
CONTEXT_PARAMS = SEARCH_PARAMS + ("budget",)


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


# The GET routes that call the embedding provider (and the reranker) and write the search log.
MODEL_CALLING_READS = frozenset({"/search", "/context"})
# The POSTs of HTML forms (sign-in): form-encoded, guarded by their CSRF token and Origin.
FORM_POSTS = frozenset({"/login", "/logout"})


def create_app(
    cfg: RagConfig,
    *,
    serve_private: bool = True,
    log_searches: bool = True,
    preload: bool = True,
    host: str = DEFAULT_HOST,
    tokens: TokenStore | None = None,
) -> Starlette:
    """The Starlette app; ``serve_private=False`` answers Private-tier requests with a 403.
    ``host``: the address it will be bound to (the MCP endpoint checks Host headers on loopback;
    off loopback, clients need tokens beyond the Public tier: :mod:`rag_assets.serve.access`).
    ``tokens``: the token store (default: the file of :func:`token_file_path`; TokenError when
    that path is inside the output folder)."""
    tokens = tokens if tokens is not None else TokenStore(token_file_path(cfg))
    bound_loopback = is_loopback_host(host)
    sessions = SessionStore()
    backend = AccessBackend(
        tokens, sessions, bound_loopback=bound_loopback, allow_private_remote=serve_private and not bound_loopback
    )
    tiers = Tiers(cfg, serve_private=serve_private, log_searches=log_searches)
    limits = Limits(cfg.serve, cfg.data_dir / USAGE_FILE)
    mcp = mcp_http(cfg, tiers, host=host, limits=limits)

    def run_search(request: Request, query: str, tier: str, params: SearchParams, rerank: bool | None) -> SearchResult:
        index = tiers.index(tier, request)  # the caller's scopes are checked here
        stage = tiers.rerank_stage(tier, rerank)
        embedder = None if params.mode == "bm25" else tiers.embedder(tier, index)
        return search_reranked(index, query, embedder, params, stage)

    async def guarded(work: Callable[[], Any]) -> JSONResponse:
        """Run blocking work in the thread pool and turn the expected failures into 4xx/503."""
        try:
            return JSONResponse(await run_in_threadpool(work))
        except Refused as exc:
            return error(403, str(exc))
        except TierDenied as exc:
            return error(exc.status, str(exc))
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
            check_known(request, SEARCH_PARAMS)
            tier, params = parse_search_params(request)
            query = tiers.question(tier, parse_query(request))
            result = run_search(request, query, tier, params, bool_param(request, "rerank"))
            out = {
                "query": query,
                "tier": tier,
                "mode": params.mode,
                "model": result.model,
                "view": params.view,
                "minScore": params.min_score,
                "bestRelevance": round(result.best_relevance, 4),
                "hits": [rendered_hit_json(h) for h in result.hits],  # with html/plain for the page
                "latencyMs": round(result.latency_ms, 2),
                **rerank_json(result),
            }
            if not result.hits:
                out["message"] = result.nothing_passed()
            return out

        return await guarded(work)

    async def context(request: Request) -> JSONResponse:
        def work() -> dict[str, Any]:
            check_known(request, CONTEXT_PARAMS)
            budget = int_param(request, "budget", 1, MAX_BUDGET) or DEFAULT_BUDGET
            tier, params = parse_search_params(request, default_k=DEFAULT_CONTEXT_K)
            query = tiers.question(tier, parse_query(request))
            params = replace(params, view="chunks")  # packing merges a page's chunks itself
            started = time.perf_counter()
            result = run_search(request, query, tier, params, bool_param(request, "rerank"))
            packed = pack_context(result.hits, budget, notes=cites_notes(tier))
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
            for _tier, entry in report.get("tiers", {}).items():
                entry.setdefault("served", True)
            report["server"] = {"privateTierServed": serve_private, "loaded": tiers.loaded_summary()}
            report["embeddingService"] = embedding_service_summary(cfg)  # what a next build would use
            add_query_embedders(report, tiers.query_embedder_status)  # what answers queries now
            served = tuple(tier for tier, entry in report.get("tiers", {}).items() if entry.get("served"))
            report["chatService"] = chat_service_summary(cfg, served)
            return locked_status(report, request.auth.scopes, request.user.display_name)

        return await guarded(work)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)  # Starlette calls it for these only (exception_handlers)
        hint = (
            " (routes: /, /search, /context, /related, POST /ask, /status, /health, /mcp)"
            if exc.status_code == 404
            else ""
        )
        return error(exc.status_code, f"{exc.detail}{hint}")

    async def server_error(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return error(500, f"internal server error ({type(exc).__name__}); the server log has the details")

    @asynccontextmanager
    async def lifespan(app: Starlette):
        if preload:
            await run_in_threadpool(tiers.preload)
        try:
            async with mcp.running():  # the MCP session manager's task group
                yield
        finally:
            tiers.close()

    routes = [
        Route("/search", search, methods=["GET"]),
        Route("/context", context, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        *ask_routes(cfg, tiers, limits),  # POST /ask (rag_assets.serve.ask_routes)
        mcp.route,
        *embed_routes(tiers),  # POST /embed: the Public tier's query vectors for rag-search.js
        *related_routes(tiers),  # /related: a note's links, backlinks and nearest notes
        *admin_routes(cfg),  # /admin: the admin console and its API (rag_assets.serve.admin_routes)
        *web_routes(),  # the page for people at / (rag_assets/serve/web/)
        *login_routes(tokens, sessions),  # GET/POST /login, POST /logout (rag_assets.serve.login)
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
        middleware=[
            # No Access-Control-Allow-Origin unless the Origin is one of serve.cors_origins
            Middleware(
                CORSMiddleware,
                allow_origins=list(cfg.serve.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["content-type", "authorization"],
                max_age=86400,
            ),
            # On loopback the callers are trusted with the Private tier: refuse a DNS-rebound page
            *([Middleware(LoopbackHostOnly)] if bound_loopback else []),
            # No POST from another site's page: JSON only (the sign-in forms aside), and a foreign
            # Origin refused; nor a search (it embeds the query and logs it) another site's page started
            Middleware(
                SameOriginJsonPosts,
                allowed_origins=cfg.serve.cors_origins,
                guarded=posting_paths(routes),
                reading=MODEL_CALLING_READS,
                forms=FORM_POSTS,
            ),
            # request.auth.scopes and request.user for every route (rag_assets.serve.access)
            Middleware(AuthenticationMiddleware, backend=backend, on_error=auth_error),
            Middleware(RateLimits, limits=limits),  # per-client buckets; 429 with Retry-After
            Middleware(CsrfGuard),  # a cookie-signed-in page's POSTs must repeat rag_csrf
        ],
    )
    app.state.tiers = tiers
    return app


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
                f"warning: serving on {host}, a non-loopback address, WITH the private tier for clients holding a "
                "token with scope private; the public tier is open to anyone who can reach this port"
            )
        else:
            print(f"warning: serving on {host}, a non-loopback address: the private tier is not served (403)")
        print(
            "off loopback the public tier is open to all, the safe tier needs a token with scope safe "
            "(`rag token create --name NAME --scope safe`); limits: serve: in rag.yaml"
        )
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        log.info(limit_blas_threads(1))
    app = create_app(cfg, serve_private=serve_private, host=host)  # TokenError (exit 2) before anything is bound
    print(
        f"rag serve: http://{host if ':' not in host else f'[{host}]'}:{port}/search?q=... (Ctrl+C to stop)", flush=True
    )
    uvicorn.run(app, host=host, port=port, log_level=log_level)
