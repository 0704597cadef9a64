"""What a search asks for and what it returns: parameters (validated), hits and results,
and the errors a caller can act on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

FUSIONS = ("rrf", "convex", "zscore")


MODES = ("hybrid", "vector", "bm25")


LEXICAL = ("fts5", "memory", "auto")


class SearchError(ValueError):
    """A search that cannot run as asked (bad parameter, no index); the message says why."""


def damaged_store_error(path: Path, exc: Exception) -> SearchError:
    return SearchError(f"the store at {path} is damaged ({exc}); run `rag build` to rebuild it")


@dataclass(frozen=True)
class SearchParams:
    """Everything that shapes a search; defaults chosen on SciFact's train split (README)."""

    k: int = 10
    mode: str = "hybrid"
    fusion: str = "zscore"
    rrf_k: int = 60
    vector_weight: float = 0.5
    bm25_weight: float = 0.5
    min_score: float = 0.1
    candidates: int = 200  # depth of each list before fusion
    collections: tuple[str, ...] = ()  # empty: all
    tags: tuple[str, ...] = ()  # every tag must be present
    filters: tuple[tuple[str, str], ...] = ()  # frontmatter key=value, all must hold
    slug_prefix: str | None = None
    mmr_lambda: float | None = None  # None: no MMR; 1.0 = relevance only, 0.0 = diversity only
    max_per_document: int | None = None
    collection_weights: bool = True

    def validate(self) -> None:
        if not 1 <= self.k <= 1000:
            raise SearchError("k must be between 1 and 1000")
        if self.mode not in MODES:
            raise SearchError(f"mode must be one of {', '.join(MODES)}")
        if self.fusion not in FUSIONS:
            raise SearchError(f"fusion must be one of {', '.join(FUSIONS)}")
        if self.rrf_k < 0:
            raise SearchError("rrf_k must be 0 or more")
        if self.vector_weight < 0 or self.bm25_weight < 0 or self.vector_weight + self.bm25_weight <= 0:
            raise SearchError("vector_weight and bm25_weight must be >= 0 and not both 0")
        if self.mmr_lambda is not None and not 0.0 <= self.mmr_lambda <= 1.0:
            raise SearchError("mmr_lambda must be between 0 and 1")
        if self.max_per_document is not None and self.max_per_document < 1:
            raise SearchError("max_per_document must be at least 1")
        if self.candidates < self.k:
            raise SearchError("candidates must be at least k")


@dataclass
class Hit:
    id: str
    collection: str
    slug: str
    title: str
    heading_path: list[str]
    text: str
    score: float
    vector_score: float | None
    bm25_score: float | None
    chunk_index: int = 0
    document_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "collection": self.collection,
            "slug": self.slug,
            "title": self.title,
            "headingPath": self.heading_path,
            "text": self.text,
            "score": round(self.score, 6),
            "vectorScore": None if self.vector_score is None else round(self.vector_score, 6),
            "bm25Score": None if self.bm25_score is None else round(self.bm25_score, 6),
        }


@dataclass
class SearchResult:
    query: str
    hits: list[Hit]
    params: SearchParams
    latency_ms: float  # the whole search, query embedding included
    model: str | None = None
    embed_ms: float = 0.0  # of which embedding the query (a cold local model loads here)

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "hits": [h.to_json() for h in self.hits],
            "latencyMs": round(self.latency_ms, 2),
            "embedMs": round(self.embed_ms, 2),
        }


def parse_filters(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``["status=active", ...]`` -> pairs; SearchError on a malformed item."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SearchError(f"filter {item!r} must look like key=value (for example status=active)")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)
