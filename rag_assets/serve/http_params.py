"""Request parameters of the HTTP API: typed, bounded, and a 400 with a hint when unusable."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from starlette.requests import Request

from rag_assets.index.params import MAX_RRF_K, MODES, VIEWS, SearchError, SearchParams, parse_filters
from rag_assets.serve.tiers import BadRequest

MAX_QUERY_CHARS = 4000  # far beyond any question; keeps one request from tying up a worker

SEARCH_PARAMS = (
    "q",
    "tier",
    "k",
    "collections",
    "filter",
    "tag",
    "prefix",
    "mode",
    "fusion",
    "vector_weight",
    "bm25_weight",
    "min_score",
    "mmr",
    "per_doc",
    "candidates",
    "rrf_k",
    "view",
    "sections",
    "rerank",
)
REPEATABLE = ("collections", "filter", "tag")


def single(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if not values:
        return None
    if len(values) > 1 and name not in REPEATABLE:
        raise BadRequest(f"give {name} only once (got {len(values)} values)")
    return values[-1]


def int_param(request: Request, name: str, low: int | None = None, high: int | None = None) -> int | None:
    raw = single(request, name)
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


def float_param(request: Request, name: str) -> float | None:
    raw = single(request, name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        raise BadRequest(f"{name} must be a number, got {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise BadRequest(f"{name} must be a finite number, got {raw[:40]!r}")
    return value


def bool_param(request: Request, name: str) -> bool | None:
    raw = single(request, name)
    if raw is None or raw.strip() == "":
        return None
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise BadRequest(f"{name} must be true or false, got {raw[:40]!r}")


def list_param(request: Request, name: str) -> tuple[str, ...]:
    """A repeatable, comma-separable parameter: ``?collections=a,b&collections=c``."""
    items: list[str] = []
    for value in request.query_params.getlist(name):
        items.extend(part.strip() for part in value.split(","))
    return tuple(dict.fromkeys(i for i in items if i))


def check_known(request: Request, known: tuple[str, ...]) -> None:
    unknown = sorted(set(request.query_params.keys()) - set(known))
    if unknown:
        raise BadRequest(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(known)}")


def parse_query(request: Request) -> str:
    q = single(request, "q")
    if q is None or not q.strip():
        raise BadRequest("q is required: the text to search for, e.g. ?q=proxmox+vlan")
    if len(q) > MAX_QUERY_CHARS:
        raise BadRequest(f"q is too long ({len(q)} characters); keep it under {MAX_QUERY_CHARS}")
    return q


def parse_search_params(request: Request, *, default_k: int = 10) -> tuple[str, SearchParams]:
    """(tier, SearchParams) from the query string; BadRequest on anything unusable."""
    tier = (single(request, "tier") or "public").strip().lower()
    mode = (single(request, "mode") or "hybrid").strip().lower()
    view = (single(request, "view") or "").strip().lower() or None
    if mode == "chunks":  # shorthand: a hybrid search, one hit per chunk
        mode, view = "hybrid", "chunks"
    if mode not in MODES:
        raise BadRequest(f"unknown mode {mode!r}; use one of {', '.join(MODES)} (or chunks)")
    if view is not None and view not in VIEWS:
        raise BadRequest(f"unknown view {view!r}; use one of {', '.join(VIEWS)}")
    k = int_param(request, "k", 1, 1000)
    overrides: dict[str, Any] = {
        "fusion": (single(request, "fusion") or "").strip().lower() or None,
        "vector_weight": float_param(request, "vector_weight"),
        "bm25_weight": float_param(request, "bm25_weight"),
        "min_score": float_param(request, "min_score"),
        "mmr_lambda": float_param(request, "mmr"),
        "max_per_document": int_param(request, "per_doc", 1),  # at most MAX_PER_DOCUMENT: validate()
        "candidates": int_param(request, "candidates", 1, 10_000),
        "rrf_k": int_param(request, "rrf_k", 0, MAX_RRF_K),
        "sections": int_param(request, "sections", 1, 20),
    }
    if overrides["max_per_document"] is not None and view is None:
        view = "chunks"  # a cap on chunks per page only means something in the chunk view
    if view is not None:
        overrides["view"] = view
    try:
        filters = parse_filters(request.query_params.getlist("filter"))
    except SearchError as exc:
        raise BadRequest(str(exc)) from None
    prefix = single(request, "prefix")
    params = SearchParams(
        k=default_k if k is None else k,
        mode=mode,
        collections=list_param(request, "collections"),
        tags=list_param(request, "tag"),
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
