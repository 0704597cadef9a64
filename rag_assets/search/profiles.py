"""Search profiles: the fusion each embedder's stores use, recorded with the store.

A weak embedder must not drag a hybrid below BM25 alone: the offline hashing embedder's
vectors are far less reliable than BM25 on SciFact (train nDCG@10 0.28 against 0.70), so its
stores give the vector list a small weight; a sentence model's list is about as reliable as
BM25's, so it gets an equal share. The weights were chosen per embedder on SciFact's TRAIN
split with bench/tune_fusion.py (figures in the README); providers that could not be measured
here (OpenAI-compatible, Ollama) take the sentence-model profile.

The build writes the profile into the store's ``search_profile`` table, so a store keeps the
fusion it was built for even when these defaults change; a store without one (built before
profiles) gets its embedder's profile from here.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag_assets.search.params import SearchParams

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
    # Train nDCG@10: hybrid 0.7032 against BM25 0.7035 and vector 0.2842; test 0.6952.
    "hashing": SearchProfile(fusion="zscore", vector_weight=0.1, bm25_weight=0.9, embedder="hashing"),
    "local": SearchProfile(fusion="zscore", vector_weight=0.5, bm25_weight=0.5, embedder="local"),
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


def apply_profile(params: "SearchParams", profile: SearchProfile | None = None) -> "SearchParams":
    """``params`` with the fusion fields it leaves open (None) taken from ``profile``."""
    profile = profile or PROFILES["default"]
    return replace(
        params,
        fusion=params.fusion or profile.fusion,
        vector_weight=profile.vector_weight if params.vector_weight is None else params.vector_weight,
        bm25_weight=profile.bm25_weight if params.bm25_weight is None else params.bm25_weight,
        rrf_k=profile.rrf_k if params.rrf_k is None else params.rrf_k,
    )
