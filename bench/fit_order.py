"""The hybrid relevance model's ORDER, chosen for ranking (issue 30; bench/fit_relevance.py ``--order``).

Within one search, ``cos_gap`` and ``bm25_gap`` are ``cos`` and ``bm25_frac`` less a constant of
that search, and ``unknown`` is a constant of it too. So a hybrid model ranks one search's
candidates by ``(w_cos + w_cos_gap)*cos + (w_frac + w_bm25_gap)*bm25_frac + w_title*title
(+ w_fused*fused)`` alone; the rest only moves whole searches (calibration across searches).
A likelihood fit chooses all of them for calibration, and ranked SciFact test worse than the
profile's z-score fusion (0.7366 against 0.7443 nDCG@10).

No fixed mix of ``cos`` and ``bm25_frac`` follows z-scores, whose weights change with each
search's spread: on SciFact train the best fixed direction (0.7473) lost Hugo hit@5 (0.752
against the fusion's 0.779), and those keeping it did not beat the fusion by more than
noise. A model fitted by likelihood with its direction fixed on the fusion separated
off-topic questions worse (0.85-0.925 against the shipped 0.975). So the fused score itself
(1.0: the search's best candidate) joins the shipped hybrid model as ``weight * (fused - 1)``:
the best fused candidate keeps the shipped relevance and calibration, the others fall
behind it in nearly the fusion's order, and ``weight`` is chosen on SciFact train (nDCG@10)
and the question sets (hit@5) from ``FUSED_WEIGHTS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rag_assets.evaluation.metrics import hit_at, ndcg_at
from rag_assets.evaluation.runner import configured_search, documents_of
from rag_assets.index.params import SearchParams
from rag_assets.search.relevance import LogisticModel

# What orders one search's candidates; "fused" is the profile's fused score (1.0: the best).
ORDER_FEATURES = ("cos", "bm25_frac", "title", "fused")


@dataclass
class Candidates:
    """One labelled hybrid search's candidates, as ``SearchIndex`` ranked them."""

    source: str
    x: np.ndarray  # (n, len(ORDER_FEATURES))
    keys: list[str]  # each candidate's document (SciFact) or page (question sets)
    relevant: dict[str, int]


def captured(source: str, index, embedder, query: str, relevant: Iterable[str], key_of: Callable) -> Candidates:
    """The hybrid search of ``query`` as ``rag eval`` runs it (chunks, no floor, k = the
    candidates), with each hit's order features and key."""
    params = configured_search(SearchParams(), "hybrid")
    hits = index.search(query, embedder, params).hits
    x = np.array(
        [[h.score if f == "fused" else h.features.get(f, 0.0) for f in ORDER_FEATURES] for h in hits],
        dtype=np.float64,
    ).reshape(-1, len(ORDER_FEATURES))
    return Candidates(source, x, [key_of(h) for h in hits], dict.fromkeys(relevant, 1))


def ranked_keys(c: Candidates, direction: np.ndarray) -> list[str]:
    """The candidates' keys ranked by ``x @ direction`` (ties: the fused score), each once."""
    fused = c.x[:, ORDER_FEATURES.index("fused")]
    order = np.lexsort((-fused, -(c.x @ direction)))
    return documents_of((c.keys[i], 0.0) for i in order)


def order_figures(samples: Sequence[Candidates], direction: np.ndarray) -> dict[str, float]:
    """Per source: mean nDCG@10 (``scifact-train``) or hit@5 (question sets) of ``direction``."""
    totals: dict[str, list[float]] = {}
    for c in samples:
        keys = ranked_keys(c, direction)
        value = ndcg_at(keys, c.relevant, 10) if c.source.startswith("scifact") else hit_at(keys, c.relevant, 5)
        totals.setdefault(c.source, []).append(value)
    return {source: float(np.mean(v)) for source, v in totals.items()}


FUSED_ORDER = np.array([0.0, 0.0, 0.0, 1.0])  # the profile's fusion, as before ranking by relevance
FUSED_WEIGHTS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0)


def with_fused_order(model: LogisticModel, weight: float) -> LogisticModel:
    """``model`` plus ``weight * (fused - 1)``: each search's candidates ranked nearly as the
    fusion ranks them (the more so the larger ``weight``), while the search's best fused
    candidate keeps ``model``'s relevance, and so its calibration (abstention included: no
    candidate gains, so none passes the line that did not before)."""
    return LogisticModel((*model.features, "fused"), (*model.coef, weight), model.intercept - weight)


def order_of(model: LogisticModel, weight: float) -> np.ndarray:
    """The ORDER direction of ``with_fused_order(model, weight)`` (a hybrid model with gaps)."""
    coef = dict(zip(model.features, model.coef))
    return np.array(
        [
            coef.get("cos", 0.0) + coef.get("cos_gap", 0.0),
            coef.get("bm25_frac", 0.0) + coef.get("bm25_gap", 0.0),
            coef.get("title", 0.0),
            weight,
        ]
    )


def choose_fused_weight(samples: Sequence[Candidates], model: LogisticModel, log=print) -> float:
    """The ``FUSED_WEIGHTS`` entry whose order has the best SciFact train nDCG@10 among those
    whose question-set hit@5 is at least the fused order's."""
    baseline = order_figures(samples, FUSED_ORDER)
    log(f"fused-score order: {baseline}")
    best: tuple[float, float] | None = None
    for weight in FUSED_WEIGHTS:
        figures = order_figures(samples, order_of(model, weight))
        log(f"fused weight {weight}: {figures}")
        questions_ok = all(v >= baseline[s] - 1e-9 for s, v in figures.items() if not s.startswith("scifact"))
        if questions_ok and (best is None or figures.get("scifact-train", 0.0) > best[0]):
            best = (figures.get("scifact-train", 0.0), weight)
    if best is None:
        raise SystemExit("no fused weight keeps the question sets' hit@5")
    return best[1]
