"""bench/fit_order.py (issue 30): the fused score joins a hybrid model so that each search is
ranked by the model's ORDER direction while the fusion's best candidate keeps its relevance;
and the ``fused`` feature reaches the model from the search."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

from rag_assets.search.relevance import candidate_features, shipped_models

from .conftest import REPO_ROOT


def fit_order():
    """bench/fit_order.py as a module (bench/ is scripts, not a package the tests import)."""
    spec = importlib.util.spec_from_file_location("bench_fit_order", REPO_ROOT / "bench" / "fit_order.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_fit_order", module)
    spec.loader.exec_module(module)
    return module


def one_search(rng: np.random.Generator, n: int = 40) -> dict[str, np.ndarray]:
    """The hybrid features of one search's ``n`` candidates, gaps against the search's best."""
    cos, frac = rng.uniform(0.1, 0.8, n), rng.uniform(0.0, 0.6, n)
    fused = rng.uniform(0.0, 1.0, n)
    return {
        "cos": cos,
        "bm25_frac": frac,
        "cos_gap": cos - cos.max(),
        "bm25_gap": frac - frac.max(),
        "unknown": np.full(n, rng.uniform(0, 0.5)),
        "title": rng.choice([0.0, 0.5, 1.0], n),
        "fused": fused / fused.max(),
    }


def test_the_fused_weight_orders_by_the_fusion_and_keeps_the_best_candidates_relevance():
    module = fit_order()
    shipped = shipped_models().model("hashing", "hybrid")  # any hybrid model without "fused"
    rng = np.random.default_rng(30)
    for weight in (50.0, 200.0):
        model = module.with_fused_order(shipped, weight)
        assert "fused" not in shipped.features and model.features[-1] == "fused"
        for _ in range(20):
            x = one_search(rng)
            best = int(np.argmax(x["fused"]))
            # The fusion's best candidate shows the relevance the shipped model gave it ...
            assert model.predict(x)[best] == pytest.approx(shipped.predict(x)[best], abs=1e-12)
            # ... no candidate gains (so an abstention stays one) ...
            assert (model.predict(x) <= shipped.predict(x) + 1e-12).all()
            # ... and the model ranks the search by its ORDER direction.
            order_key = sum(w * x[f] for f, w in zip(module.ORDER_FEATURES, module.order_of(shipped, weight)))
            by_model = np.argsort(-model.predict(x), kind="stable")
            unclipped = by_model[model.predict(x)[by_model] > 1e-15]  # z clipped at -40 ties
            assert list(unclipped) == list(np.argsort(-order_key, kind="stable"))[: len(unclipped)]


def test_the_fused_score_is_a_feature_of_each_candidate():
    rows = [4, 2, 9]
    vector = {4: (1, 0.7), 2: (2, 0.5)}
    lexical = {9: (1, 6.0), 4: (2, 3.0)}
    features = candidate_features(rows, vector, lexical, {9: 0.3}, 12.0, fused={4: 1.0, 2: 0.4, 9: 0.55})
    assert features["fused"].tolist() == [1.0, 0.4, 0.55]
    assert candidate_features(rows, vector, lexical, {9: 0.3}, 12.0)["fused"].tolist() == [0.0, 0.0, 0.0]
