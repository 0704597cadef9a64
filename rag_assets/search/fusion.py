"""Fusing the vector and BM25 lists into one score, and MMR re-ranking for diversity.

The formulas are in :mod:`rag_assets.search.retrieval`'s docstring and docs/search.md.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rag_assets.index.params import SearchParams
from rag_assets.index.profiles import apply_profile


def fuse(
    vector: Mapping[int, tuple[int, float]],
    lexical: Mapping[int, tuple[int, float]],
    params: SearchParams,
    mode: str,
    cosines: Mapping[int, float] | None = None,
) -> dict[int, float]:
    """Row -> fused score in [0, 1] (before collection weights); see the module docstring.

    ``cosines`` (zscore): the vector scores of BM25 candidates missing from the vector list.
    Fusion fields ``params`` leaves open (None) take the default profile's values."""
    params = apply_profile(params)
    if mode == "vector":
        return {row: score for row, (_, score) in vector.items()}
    if mode == "bm25":
        top = max((s for _, s in lexical.values()), default=1.0) or 1.0
        return {row: score / top for row, (_, score) in lexical.items()}
    assert params.vector_weight is not None and params.bm25_weight is not None  # apply_profile filled them
    wv, wb = unit_weights(params.vector_weight, params.bm25_weight)
    rows = set(vector) | set(lexical)
    if params.fusion == "rrf":
        k = params.rrf_k
        assert k is not None  # apply_profile filled it
        best = (wv + wb) / (k + 1)
        return {
            row: (
                (wv / (k + vector[row][0]) if row in vector else 0.0)
                + (wb / (k + lexical[row][0]) if row in lexical else 0.0)
            )
            / best
            for row in rows
        }
    if params.fusion == "zscore":
        v = _standardise({**(cosines or {}), **{row: s for row, (_, s) in vector.items()}})
        b = _standardise({row: lexical[row][1] if row in lexical else 0.0 for row in rows})
        return _min_max({row: (wv * v.get(row, 0.0) + wb * b[row]) / (wv + wb) for row in rows})
    v = _min_max({row: s for row, (_, s) in vector.items()})
    b = _min_max({row: s for row, (_, s) in lexical.items()})
    return {row: (wv * v.get(row, 0.0) + wb * b.get(row, 0.0)) / (wv + wb) for row in rows}


def unit_weights(wv: float, wb: float) -> tuple[float, float]:
    """The two weights scaled so the larger is 1. Every fusion depends only on their ratio,
    and a huge weight (1e308, as valid as 2) would otherwise overflow its products and sums
    to inf, then NaN: scores no JSON can carry, and an order that means nothing."""
    scale = max(wv, wb)
    return (wv / scale, wb / scale) if scale > 0 else (wv, wb)


def _standardise(scores: Mapping[int, float]) -> dict[int, float]:
    """(score - mean) / standard deviation over these candidates (all 0 when they are equal)."""
    if not scores:
        return {}
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    mean, std = float(values.mean()), float(values.std())
    return {row: (s - mean) / std if std > 0 else 0.0 for row, s in scores.items()}


def _min_max(scores: Mapping[int, float]) -> dict[int, float]:
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    span = high - low
    return {row: (s - low) / span if span > 0 else 1.0 for row, s in scores.items()}


def mmr(matrix: np.ndarray, ranked: list[int], scored: Mapping[int, float], lam: float, limit: int) -> list[int]:
    """Maximal Marginal Relevance: trade relevance against similarity to what is already picked."""
    pool = ranked[: max(limit, 1)]
    vectors = matrix[pool]
    relevance = np.array([scored[r] for r in pool], dtype=np.float32)
    chosen: list[int] = []
    max_sim = np.full(len(pool), -np.inf, dtype=np.float32)
    available = np.ones(len(pool), dtype=bool)
    for _ in range(len(pool)):
        penalty = np.where(np.isfinite(max_sim), max_sim, 0.0)
        value = lam * relevance - (1 - lam) * penalty
        value[~available] = -np.inf
        pick = int(np.argmax(value))
        chosen.append(pool[pick])
        available[pick] = False
        max_sim = np.maximum(max_sim, vectors @ vectors[pick])
    return chosen + ranked[len(pool) :]
