"""The reranking stage: re-score the top fused candidates and re-order them, or say why not.

:func:`search_reranked` is the one place a search meets a reranker (the CLI, the HTTP API
and bench/rerank.py call it instead of ``SearchIndex.search``). It asks the index for
``max(k, top_n)`` hits, so the reranker sees the ``top_n`` best fused candidates even when
fewer are shown; the reranked ones come first, best first (ties keep their fused order),
then any hits past ``top_n`` in fused order; ``k`` are returned. Each reranked hit keeps its
fused ``score`` and gains ``rerank_score``.

A reranker that fails (down, timed out after its retries, an unreadable answer, a missing
model) never fails the search: the hits stay in fused order and the result says
``reranked: false`` with ``rerankError``. A :class:`~rag_assets.base.egress.PrivacyError`
is not such a failure and propagates: it is a refusal.

The search log records the candidate list the reranker was given (fused order, ``top_n``
deep): what the index itself returned.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rag_assets.embed.base import Embedder
from rag_assets.embed.errors import EmbeddingError
from rag_assets.index.params import Hit, SearchParams, SearchResult
from rag_assets.search.rerank.base import Reranker, RerankError

if TYPE_CHECKING:  # pragma: no cover - retrieval is imported by the callers, not needed here
    from rag_assets.search.retrieval import SearchIndex

log = logging.getLogger(__name__)


@dataclass
class RerankStage:
    """A reranker and how many fused candidates it re-scores per search."""

    reranker: Reranker
    top_n: int = 20


@dataclass
class RerankReport:
    """What the stage did for one search, for the result's JSON."""

    reranker: str
    reranked: bool
    candidates: int
    ms: float
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reranked": self.reranked,
            "reranker": self.reranker,
            "rerankCandidates": self.candidates,
            "rerankMs": round(self.ms, 2),
        }
        if self.error:
            out["rerankError"] = self.error
        return out


def rerank_json(result: SearchResult) -> dict[str, Any]:
    """The result's reranking fields: ``{"reranked": false}`` when no stage ran."""
    report = getattr(result, "rerank", None)
    return report.to_json() if report is not None else {"reranked": False}


def search_reranked(
    index: SearchIndex, query: str, embedder: Embedder | None, params: SearchParams, stage: RerankStage | None
) -> SearchResult:
    """``index.search`` with the reranking stage applied (just ``index.search`` without one)."""
    if stage is None:
        return index.search(query, embedder, params)
    depth = max(params.k, stage.top_n)
    widened = replace(params, k=depth, candidates=max(params.candidates, depth))
    result = index.search(query, embedder, widened)
    hits, report = rerank_hits(query, result.hits, stage)
    result.hits = hits[: params.k]
    # The search's own params (its store profile applied), with the depth that was asked for.
    result.params = replace(result.params, k=params.k, candidates=params.candidates)
    result.rerank = report
    result.latency_ms += report.ms
    return result


def rerank_hits(query: str, hits: list[Hit], stage: RerankStage) -> tuple[list[Hit], RerankReport]:
    """The hits re-ordered by the reranker's scores over the first ``top_n``, with a report;
    on a reranker failure the hits unchanged and the report's error."""
    head, tail = hits[: stage.top_n], hits[stage.top_n :]
    started = time.perf_counter()
    name = stage.reranker.name
    try:
        scores = stage.reranker.rerank(query, [h.text for h in head]) if head else []
        if len(scores) != len(head):
            raise RerankError(f"{name} returned {len(scores)} scores for {len(head)} passages")
    except (RerankError, EmbeddingError) as exc:
        elapsed = (time.perf_counter() - started) * 1000
        log.warning("reranking with %s failed; the results keep their fused order: %s", name, exc)
        return hits, RerankReport(name, False, len(head), elapsed, str(exc))
    elapsed = (time.perf_counter() - started) * 1000
    for hit, score in zip(head, scores):
        hit.rerank_score = float(score) if math.isfinite(score) else None
    order = sorted(range(len(head)), key=lambda i: (-_sortable(scores[i]), i))
    return [head[i] for i in order] + tail, RerankReport(name, True, len(head), elapsed)


def _sortable(score: float) -> float:
    return score if not math.isnan(score) else -math.inf
