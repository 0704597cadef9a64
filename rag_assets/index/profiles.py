"""Search profiles: the fusion each embedder's stores use, recorded with the store.

A weak embedder must not drag a hybrid below BM25 alone. Each list is weighted by how much it
proves to add on SciFact's TRAIN split (bench/tune_fusion.py; figures in docs/search.md): a
weight earns its place only when the hybrid beats the better single list on train by more
than noise (0.005 nDCG@10 over 809 queries). The offline hashing embedder's vectors do not
(train nDCG@10: vector 0.284, BM25 0.710; the best hybrid, vector weight 0.05, 0.711), so its
stores rank by BM25 alone and use the cosine only for relevance; all-MiniLM-L6-v2's list is
about as reliable as BM25's and gets an equal share (hybrid 0.743 against 0.710 and 0.663).
Providers that could not be measured here (OpenAI-compatible, Ollama) take the sentence-model
profile.

The build writes the profile into the store's ``search_profile`` table, so a store keeps the
fusion it was built for even when these defaults change; a store without one (built before
profiles) gets its embedder's profile from here.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag_assets.index.params import SearchParams

PROFILE_VERSION = 1


@dataclass(frozen=True)
class SearchProfile:
    """The fusion settings a store is searched with unless a search overrides them."""

    fusion: str = "zscore"
    vector_weight: float = 0.5
    bm25_weight: float = 0.5
    rrf_k: int = 60
    embedder: str = "default"  # which profile (and relevance model) this is
    version: int = PROFILE_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


PROFILES: dict[str, SearchProfile] = {
    # Vector weight 0: the hashing vectors add nothing BM25 lacks on train (see above).
    "hashing": SearchProfile(fusion="zscore", vector_weight=0.0, bm25_weight=1.0, embedder="hashing"),
    "local": SearchProfile(fusion="zscore", vector_weight=0.5, bm25_weight=0.5, embedder="local"),
    # The same vectors as "local" (all-MiniLM-L6-v2 in numpy): the same fusion and relevance model.
    "minilm": SearchProfile(fusion="zscore", vector_weight=0.5, bm25_weight=0.5, embedder="local"),
    "default": SearchProfile(fusion="zscore", vector_weight=0.5, bm25_weight=0.5, embedder="default"),
}


def profile_for(provider: str | None) -> SearchProfile:
    """The profile of stores built by ``provider`` (hashing, local, ollama, openai, ...)."""
    return PROFILES.get(provider or "", PROFILES["default"])


def write_profile(conn: sqlite3.Connection, profile: SearchProfile) -> None:
    """Record ``profile`` in the store (inside the caller's transaction)."""
    conn.execute("DELETE FROM search_profile")
    conn.execute("INSERT INTO search_profile(profile) VALUES (?)", (profile.to_json(),))


def read_profile(conn: sqlite3.Connection, provider: str | None) -> SearchProfile:
    """The store's recorded profile; its embedder's default when it has none (older stores)."""
    row = conn.execute("SELECT profile FROM search_profile LIMIT 1").fetchone()
    if not row:
        return profile_for(provider)
    try:
        saved = json.loads(row[0])
        known = {f.name for f in fields(SearchProfile)}
        return SearchProfile(**{k: v for k, v in saved.items() if k in known})
    except (TypeError, ValueError):
        return profile_for(provider)


def apply_profile(params: SearchParams, profile: SearchProfile | None = None) -> SearchParams:
    """``params`` with the fusion fields it leaves open (None) taken from ``profile``."""
    profile = profile or PROFILES["default"]
    wv = profile.vector_weight if params.vector_weight is None else params.vector_weight
    wb = profile.bm25_weight if params.bm25_weight is None else params.bm25_weight
    wv, wb = usable_weights(wv, wb, vector_given=params.vector_weight, bm25_given=params.bm25_weight)
    return replace(
        params,
        fusion=params.fusion or profile.fusion,
        vector_weight=wv,
        bm25_weight=wb,
        rrf_k=profile.rrf_k if params.rrf_k is None else params.rrf_k,
    )


def usable_weights(
    wv: float, wb: float, *, vector_given: float | None, bm25_given: float | None
) -> tuple[float, float]:
    """Fusion weights whose sum is positive and finite, so the fusion can divide by it.

    A weight of 0 switches its list off. When the other weight is 0 too because the profile
    left it there (the hashing profile weighs vectors 0), ``bm25_weight=0`` means the vector
    list alone and ``vector_weight=0`` BM25 alone: the list not switched off counts with
    weight 1. Two weights too large to add (1e308 each) are scaled down to their ratio, which
    is all the fusion uses. Both given as 0 is refused earlier (SearchParams.validate)."""
    if wv + wb <= 0:
        if bm25_given == 0 and vector_given is None:
            wv = 1.0
        elif vector_given == 0 and bm25_given is None:
            wb = 1.0
    if not math.isfinite(wv + wb):
        top = max(wv, wb)
        wv, wb = wv / top, wb / top
    return wv, wb
