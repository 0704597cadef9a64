"""What a search asks for and what it returns: parameters (validated), hits and results,
and the errors a caller can act on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FUSIONS = ("rrf", "convex", "zscore")


MODES = ("hybrid", "vector", "bm25")


# Results one per page (its matching sections beneath it) or one per chunk.
VIEWS = ("pages", "chunks")


# The default ``min_score``. Every relevance model is centred so that the threshold chosen for
# its embedder and mode on held-in data is 0.5 (bench/fit_relevance.py; figures in docs/search.md).
DEFAULT_MIN_RELEVANCE = 0.5


LEXICAL = ("fts5", "memory", "auto")


# Far past any useful value; bounded so a huge number cannot overflow float arithmetic.
MAX_RRF_K = 1_000_000
# The link-graph signal's default factor and its cap. Off (1.0): on bench/link_signal.py's 32
# questions hit@5 is 1.000 with it and without it, and factors of 1.5 and more cost hit@1.
LINK_BOOST = 1.0
MAX_LINK_BOOST = 10.0
MAX_PER_DOCUMENT = 1000
MAX_BUDGET = 200_000  # tokens of a packed context (rag context, /context)


class SearchError(ValueError):
    """A search that cannot run as asked (bad parameter, no index); the message says why."""


def damaged_store_error(path: Path, exc: Exception) -> SearchError:
    return SearchError(f"the store at {path} is damaged ({exc}); run `rag build` to rebuild it")


@dataclass(frozen=True)
class SearchParams:
    """Everything that shapes a search. The fusion fields left None come from the store's search
    profile (rag_assets.index.profiles: chosen per embedder on SciFact's train split)."""

    k: int = 10  # results: pages (view="pages") or chunks (view="chunks")
    mode: str = "hybrid"
    fusion: str | None = None
    rrf_k: int | None = None
    vector_weight: float | None = None
    bm25_weight: float | None = None
    min_score: float = DEFAULT_MIN_RELEVANCE  # on each hit's calibrated relevance, in [0, 1]
    candidates: int = 200  # depth of each list before fusion
    view: str = "pages"
    sections: int = 3  # view="pages": matching sections listed per page, best first
    collections: tuple[str, ...] = ()  # empty: all
    tags: tuple[str, ...] = ()  # every tag must be present
    filters: tuple[tuple[str, str], ...] = ()  # frontmatter key=value, all must hold
    slug_prefix: str | None = None
    mmr_lambda: float | None = None  # None: no MMR; 1.0 = relevance only, 0.0 = diversity only
    max_per_document: int | None = None
    collection_weights: bool = True
    # The link-graph signal (rag_assets/search/link_signal.py): the odds of the notes linked with
    # the best hit's note are multiplied by this; 1.0 switches it off.
    link_boost: float = LINK_BOOST

    def validate(self) -> None:
        if not 1 <= self.k <= 1000:
            raise SearchError("k must be between 1 and 1000")
        if self.mode not in MODES:
            raise SearchError(f"mode must be one of {', '.join(MODES)}")
        if self.fusion is not None and self.fusion not in FUSIONS:
            raise SearchError(f"fusion must be one of {', '.join(FUSIONS)}")
        if self.rrf_k is not None and not 0 <= self.rrf_k <= MAX_RRF_K:
            raise SearchError(f"rrf_k must be between 0 and {MAX_RRF_K}")
        if not (isinstance(self.link_boost, (int, float)) and 1.0 <= self.link_boost <= MAX_LINK_BOOST):
            raise SearchError(f"link_boost must be between 1 and {MAX_LINK_BOOST:g}, got {self.link_boost}")
        for name in ("vector_weight", "bm25_weight", "min_score", "mmr_lambda"):
            value = getattr(self, name)
            # NaN passes every comparison below, and infinities make the fusion's sums NaN
            if value is not None and not math.isfinite(value):
                raise SearchError(f"{name} must be a finite number, got {value}")
        wv, wb = self.vector_weight, self.bm25_weight
        if (
            (wv is not None and wv < 0)
            or (wb is not None and wb < 0)
            or (wv is not None and wb is not None and wv + wb <= 0)
        ):
            raise SearchError(
                "vector_weight and bm25_weight must be >= 0 and not both 0 (a weight of 0 switches that list off; "
                "mode=vector or mode=bm25 searches with one list alone)"
            )
        if self.view not in VIEWS:
            raise SearchError(f"view must be one of {', '.join(VIEWS)}")
        if not 1 <= self.sections <= 20:
            raise SearchError("sections must be between 1 and 20")
        if self.mmr_lambda is not None and not 0.0 <= self.mmr_lambda <= 1.0:
            raise SearchError("mmr_lambda must be between 0 and 1")
        if self.max_per_document is not None and not 1 <= self.max_per_document <= MAX_PER_DOCUMENT:
            raise SearchError(f"max_per_document must be between 1 and {MAX_PER_DOCUMENT}")
        if self.candidates < self.k:
            raise SearchError("candidates must be at least k")


@dataclass
class Hit:
    """One result: a chunk, or (view="pages") a page shown by its best chunk, with the page's
    matching chunks in ``sections`` (best first; the first is the hit's own chunk)."""

    id: str
    collection: str
    slug: str
    title: str
    heading_path: list[str]
    text: str
    score: (
        float  # the fused vector/BM25 score, relative to this query's candidates (1.0 = best); a signal, not the order
    )
    vector_score: float | None
    bm25_score: float | None
    chunk_index: int = 0
    document_id: str = ""
    relevance: float = 0.0  # calibrated, collection weight included, in [0, 1]: what hits are ranked by
    sections: list[Hit] = field(default_factory=list)
    # What ``relevance`` was computed from (rag_assets.search.relevance.FEATURES); for fitting.
    features: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    rerank_score: float | None = None  # set by the reranking stage (rag_assets.search.rerank)

    def section_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "headingPath": self.heading_path,
            "text": self.text,
            "score": round(self.score, 6),
            "relevance": round(self.relevance, 4),
            "vectorScore": None if self.vector_score is None else round(self.vector_score, 6),
            "bm25Score": None if self.bm25_score is None else round(self.bm25_score, 6),
        }

    def to_json(self) -> dict[str, Any]:
        reranked = {} if self.rerank_score is None else {"rerankScore": round(self.rerank_score, 6)}
        return {
            **self.section_json(),
            "collection": self.collection,
            "slug": self.slug,
            "title": self.title,
            "sections": [s.section_json() for s in (self.sections or [self])],
            **reranked,
        }


@dataclass
class SearchResult:
    query: str
    hits: list[Hit]
    params: SearchParams
    latency_ms: float  # the whole search, query embedding included
    model: str | None = None
    embed_ms: float = 0.0  # of which embedding the query (a cold local model loads here)
    # The best relevance among all candidates, passed or not: how close the nearest miss came.
    best_relevance: float = 0.0
    dropped: int = 0  # candidates under min_score
    rerank: Any = None  # the reranking stage's RerankReport (rag_assets.search.rerank.stage), if one ran

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "hits": [h.to_json() for h in self.hits],
            "view": self.params.view,
            "minScore": self.params.min_score,
            "bestRelevance": round(self.best_relevance, 4),
            "latencyMs": round(self.latency_ms, 2),
            "embedMs": round(self.embed_ms, 2),
            **(self.rerank.to_json() if self.rerank is not None else {"reranked": False}),
        }

    def nothing_passed(self) -> str:
        """What to tell a person when no hit reached ``min_score``."""
        return (
            f"No result reaches the relevance threshold ({self.params.min_score:g}); the closest candidate "
            f"scored {self.best_relevance:.2f}. Nothing in this index seems to answer that "
            "(lower it with --min-score / min_score to see the nearest anyway)."
        )


def parse_filters(items: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``["status=active", ...]`` -> pairs; SearchError on a malformed item."""
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SearchError(f"filter {item!r} must look like key=value (for example status=active)")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)
