#!/usr/bin/env python3
"""Fit the calibrated relevance models (rag_assets/search/relevance_models.json) and the default
``min_score``, and report the calibration figures on the same (held-in) data.

    .venv/bin/python bench/fit_relevance.py --embedder hashing --embedder minilm \\
        --site hugo=DIR:eval/questions/hugo-docs.jsonl --site sample=DIR:eval/questions/sample.jsonl \\
        --titles-of hugo [--output-dir DIR] [--write]

Labelled searches, per embedder (each a built index with that embedder):

- **SciFact train** (``../shared/corpora/beir-scifact``, the eval store ``rag eval`` builds):
  a candidate is relevant when its document is in the query's qrels.
- **Question sets** over built sites (``--site NAME=OUTPUT_DIR:QUESTIONS``): a candidate is
  relevant when its page is one the question expects.
- **Page titles** (``--titles-of NAME``): a site's page titles as queries, each relevant to
  its own page (known-item searches: what the ``title`` feature is fitted on).
- **Out of domain**, every candidate irrelevant: SciFact's train claims against each site,
  gibberish (random letter strings, seeded), and questions about things none of the corpora
  hold (OFF_TOPIC in bench/relevance_samples.py, which collects all of these), against every index.

Every search is run once per mode (hybrid, vector, bm25) with no score floor, keeping the top
``--depth`` chunk candidates with the features ``SearchIndex`` computed for them. A logistic
regression (L2, Newton's method, numpy) is fitted per embedder and mode; for each, the threshold
whose worst figure over the sources is best is found, and the model's intercept shifted so that
this threshold is relevance 0.5, the default ``min_score`` (``DEFAULT_MIN_RELEVANCE``). The report gives,
per embedder and source, the share of out-of-domain searches with no hit over the threshold
and the share of answerable in-domain searches whose best hit passes.

``--order`` (issue 30) fits nothing by likelihood: it gives each fitted embedder's shipped
hybrid model the fused score, its weight chosen on SciFact train and the question sets
(bench/fit_order.py), and writes that model alone.

Nothing here reads a test split; SciFact test is reported by ``rag eval`` only.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

from bench import fit_order  # noqa: E402
from bench.relevance_samples import MODES, Sample, collect, order_candidates, replace_sites  # noqa: E402
from rag_assets.index.params import DEFAULT_MIN_RELEVANCE  # noqa: E402
from rag_assets.index.profiles import profile_for  # noqa: E402
from rag_assets.search.relevance import MODE_FEATURES, LogisticModel, parse_models  # noqa: E402

DEFAULT_DATASET = ROOT.parent / "shared" / "corpora" / "beir-scifact"
SHIPPED = ROOT / "rag_assets" / "search" / "relevance_models.json"


def fit_logistic(
    x: np.ndarray, y: np.ndarray, weights: np.ndarray, l2: float = 1.0, iterations: int = 50
) -> tuple[np.ndarray, float]:
    """Weighted L2 logistic regression by Newton's method: (coefficients, intercept).

    ``l2`` 1.0 (against 0.1, 0.01, 0.001) separated the held-in sources best with the local
    model's hybrid (worst source 0.917 against 0.896-0.900); see ``fit_models``."""
    design = np.hstack([np.ones((len(x), 1)), x])
    beta = np.zeros(design.shape[1])
    penalty = np.full(design.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ beta, -40, 40)))
        gradient = design.T @ (weights * (p - y)) + penalty * beta
        hessian = (design * (weights * p * (1 - p))[:, None]).T @ design + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta[1:], float(beta[0])


L2_CHOICES = (1.0, 0.01)


def fit_models(samples: list[Sample], drop: tuple[str, ...] = ()) -> dict[str, LogisticModel]:
    """Per mode, the model (of those fitted with each ``L2_CHOICES`` penalty) whose threshold
    separates the sources best: a strong penalty suits the informative features, a weak one a
    feature as faint as the hashing embedder's cosine (a strong one flattens it to a constant)."""
    out = {}
    for l2 in L2_CHOICES:
        models = _fit_models(samples, drop, l2)
        for mode, model in models.items():
            t = choose_threshold(samples, models, mode)
            report = calibration({"x": samples}, {"x": models}, t)["x"][mode]
            worst = min(v.get("best_hit_passes", v.get("no_hit_passes")) for v in report.values())
            if mode not in out or worst > out[mode][0]:
                out[mode] = (worst, model)
    return {mode: model for mode, (_, model) in out.items()}


def _fit_models(samples: list[Sample], drop: tuple[str, ...], l2: float) -> dict[str, LogisticModel]:
    models = {}
    for mode in MODES:
        names = [f for f in MODE_FEATURES[mode] if f not in drop]
        keep = [MODE_FEATURES[mode].index(f) for f in names]
        x, y, w = weighted_rows(samples, mode)
        coef, intercept = fit_logistic(x[:, keep], y, w, l2=l2)
        models[mode] = LogisticModel(tuple(names), tuple(coef.tolist()), intercept)
    return models


def weighted_rows(samples: list[Sample], mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every candidate of ``mode`` (features in ``MODE_FEATURES[mode]``), its label and weight."""
    xs, ys, ws = [], [], []
    per_source: dict[str, int] = {}
    for s in samples:
        per_source[s.source] = per_source.get(s.source, 0) + 1
    for s in samples:
        x, y = s.features[mode], s.labels[mode]
        if not len(x):
            continue
        xs.append(x)
        ys.append(y)
        # Each source weighs the same (SciFact's 809 claims must not drown 30 questions
        # about a small site), and within it each search, however many candidates it has.
        ws.append(np.full(len(y), 1.0 / (len(y) * per_source[s.source] * len(per_source))))
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws) * len(xs)


def best_relevances(samples: list[Sample], model: LogisticModel, mode: str):
    """Per search: (best relevance of any candidate, relevance of the top-ranked hit, answer in top 10)."""
    out = []
    for s in samples:
        x = s.features[mode]
        if not len(x):
            out.append((0.0, 0.0, False, s))
            continue
        p = model.predict({f: x[:, i] for i, f in enumerate(MODE_FEATURES[mode])})
        # Hits are ranked by relevance, so the first hit is the one with the highest.
        out.append((float(p.max()), float(p.max()), bool(s.labels[mode][:10].any()), s))
    return out


def calibration(samples_by_embedder, models_by_embedder, threshold: float, modes=MODES) -> dict:
    report = {}
    for name, samples in samples_by_embedder.items():
        per_mode = {}
        for mode in modes:
            rows = best_relevances(samples, models_by_embedder[name][mode], mode)
            sources = sorted({r[3].source for r in rows})
            per_source = {}
            for src in sources:
                mine = [r for r in rows if r[3].source == src]
                if mine[0][3].in_domain:
                    answerable = [r for r in mine if r[2]]
                    per_source[src] = {
                        "searches": len(mine),
                        "answerable": len(answerable),
                        "best_hit_passes": round(
                            sum(r[1] >= threshold for r in answerable) / max(len(answerable), 1), 4
                        ),
                    }
                else:
                    per_source[src] = {
                        "searches": len(mine),
                        "no_hit_passes": round(sum(r[0] < threshold for r in mine) / max(len(mine), 1), 4),
                    }
            per_mode[mode] = per_source
        report[name] = per_mode
    return report


def choose_threshold(samples: list[Sample], models: dict[str, LogisticModel], mode: str) -> float:
    """The threshold whose worst figure over the sources is best: the share of answerable
    in-domain searches whose best hit passes, and of out-of-domain searches where nothing does."""

    def worst(t: float) -> float:
        report = calibration({"x": samples}, {"x": models}, t, (mode,))["x"][mode]
        return min(v.get("best_hit_passes", v.get("no_hit_passes")) for v in report.values())

    grid = sorted({round(x, 4) for x in np.geomspace(0.001, 0.9, 120)})
    scores = {t: worst(t) for t in grid}
    best = max(scores.values())
    # Among equally good thresholds, the middle one (furthest from both failure sides).
    tied = [t for t in grid if scores[t] == best]
    return tied[len(tied) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--embedder",
        action="append",
        required=True,
        help="embedder to fit (repeat): hashing, local or minilm (one model: local)",
    )
    parser.add_argument(
        "--site",
        action="append",
        default=[],
        help="NAME=OUTPUT_DIR:QUESTIONS.jsonl (built with each --embedder in turn: OUTPUT_DIR may hold {embedder})",
    )
    parser.add_argument("--dataset", default=str(DEFAULT_DATASET))
    parser.add_argument("--config", default=None)
    parser.add_argument("--output-dir", default=None, help="where the SciFact eval store lives (as for rag eval)")
    parser.add_argument("--depth", type=int, default=30, help="candidates per search kept for fitting")
    parser.add_argument("--scifact-queries", type=int, default=809)
    parser.add_argument("--ood-claims", type=int, default=200)
    parser.add_argument("--gibberish", type=int, default=60)
    parser.add_argument(
        "--titles-of",
        action="append",
        default=[],
        help="a --site NAME whose page titles become known-item searches (repeat)",
    )
    parser.add_argument("--titles", type=int, default=200, help="page titles per --titles-of site")
    parser.add_argument("--samples", default=None, help="pickle the labelled searches here, or reuse them if it exists")
    parser.add_argument(
        "--order",
        action="store_true",
        help="give the shipped hybrid models the fused score, its weight chosen for ranking on train (bench/fit_order.py)",
    )
    parser.add_argument("--write", action="store_true", help="write rag_assets/search/relevance_models.json")
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args(argv)

    # The models are keyed by the search profile's relevance model: minilm's vectors are the
    # local model's (parity >= 0.9999), so its searches fit the one model both share ("local").
    keys = {name: profile_for(name).embedder for name in args.embedder}
    if len(set(keys.values())) < len(keys):
        raise SystemExit(f"two embedders share a relevance model: {keys}; fit one of them")
    if args.samples and Path(args.samples).exists():
        with open(args.samples, "rb") as fh:
            # Keyed by embedder name in older files: each key read as its profile's model.
            saved = {profile_for(k).embedder if k in keys else k: v for k, v in pickle.load(fh).items()}
            samples_by_embedder = {k: v for k, v in saved.items() if k in keys.values()}
    else:
        samples_by_embedder = {keys[name]: collect(replace_sites(args, name), name) for name in args.embedder}
        if args.samples:
            with open(args.samples, "wb") as fh:
                pickle.dump(samples_by_embedder, fh)
    if args.order:
        return write_ordered(args, keys, samples_by_embedder)
    models = {name: fit_models(samples) for name, samples in samples_by_embedder.items()}
    thresholds = {
        name: {mode: choose_threshold(samples_by_embedder[name], models[name], mode) for mode in MODES}
        for name in models
    }
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    # Embedders without data of their own (OpenAI-compatible, Ollama): no absolute cosine, whose
    # scale is each model's own; fitted on every embedder's searches, so refitted only when
    # every embedder the shipped file has is (else the shipped default stays, as do the
    # shipped models of the embedders not fitted in this run).
    refit_default = set(shipped["models"]) - {"default"} <= set(models)
    pooled = [s for samples in samples_by_embedder.values() for s in samples]
    if refit_default:
        default = fit_models(pooled, drop=("cos",))
        thresholds["default"] = {mode: choose_threshold(pooled, default, mode) for mode in MODES}
    # Shift each model so that its chosen threshold is relevance 0.5: one default min_score
    # (DEFAULT_MIN_RELEVANCE) for every embedder and mode, and 0.5 reads as "the line".
    models = {name: centred(per_mode, thresholds[name]) for name, per_mode in models.items()}
    if refit_default:
        default = centred(default, thresholds["default"])
    report = {
        name: {
            mode: calibration({name: samples_by_embedder[name]}, {name: models[name]}, DEFAULT_MIN_RELEVANCE)[name][
                mode
            ]
            for mode in MODES
        }
        for name in models
    }
    print(json.dumps({"thresholds": thresholds, "calibration": report}, indent=1))
    for name, per_mode in models.items():
        for mode, m in per_mode.items():
            print(name, mode, dict(zip(m.features, np.round(m.coef, 3))), round(m.intercept, 3))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"thresholds": thresholds, "calibration": report}, indent=1), encoding="utf-8"
        )
    if args.write:
        fitted = {name: {mode: m.to_json() for mode, m in per_mode.items()} for name, per_mode in models.items()}
        if refit_default:
            fitted["default"] = {mode: m.to_json() for mode, m in default.items()}
        data = {
            "version": time.strftime("%Y-%m-%d")
            + "-"
            + "+".join(args.embedder)
            + ("" if refit_default else f"+{shipped['version']}"),
            "thresholds_before_centring": {**shipped["thresholds_before_centring"], **thresholds},
            "models": {**shipped["models"], **fitted},
        }
        SHIPPED.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {SHIPPED}")
    return 0


def centred(models: dict[str, LogisticModel], thresholds: dict[str, float]) -> dict[str, LogisticModel]:
    """Each mode's model with its intercept moved so that its threshold maps to 0.5."""
    out = {}
    for mode, m in models.items():
        t = thresholds[mode]
        out[mode] = LogisticModel(m.features, m.coef, m.intercept - math.log(t / (1 - t)))
    return out


def write_ordered(args, keys: dict[str, str], samples_by_embedder: dict[str, list[Sample]]) -> int:
    """``--order``: each model's shipped hybrid model given the fused score, with the weight
    chosen for ranking on train (bench/fit_order.py); its calibration terms and the other
    modes stay as shipped."""
    shipped = json.loads(SHIPPED.read_text(encoding="utf-8"))
    current = parse_models(shipped)
    data = dict(shipped)
    for name, model in keys.items():
        samples = samples_by_embedder[model]
        before = current.models.get(model, current.models["default"])
        weight = fit_order.choose_fused_weight(saved_order_candidates(args, name), before["hybrid"])
        hybrid = fit_order.with_fused_order(before["hybrid"], weight)
        models = {**before, "hybrid": hybrid}
        report = calibration({model: samples}, {model: models}, DEFAULT_MIN_RELEVANCE)[model]
        shipped_report = calibration({model: samples}, {model: before}, DEFAULT_MIN_RELEVANCE, ("hybrid",))[model]
        print(json.dumps({"fused_weight": weight, "calibration": report, "shipped_hybrid": shipped_report}, indent=1))
        print(model, "hybrid", dict(zip(hybrid.features, np.round(hybrid.coef, 3))), round(hybrid.intercept, 3))
        data["models"][model] = {mode: m.to_json() for mode, m in models.items()}
    if args.write:
        data["version"] = time.strftime("%Y-%m-%d") + "-" + "+".join(args.embedder) + f"-order+{shipped['version']}"
        SHIPPED.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {SHIPPED}")
    return 0


def saved_order_candidates(args, name: str) -> list[fit_order.Candidates]:
    """:func:`order_candidates` of embedder ``name``, kept beside ``--samples`` (NAME.order-PICKLE)."""
    path = Path(args.samples).with_name(f"{name}.order-{Path(args.samples).name}") if args.samples else None
    if path and path.exists():
        with open(path, "rb") as fh:
            return pickle.load(fh)
    out = order_candidates(replace_sites(args, name), name)
    if path:
        with open(path, "wb") as fh:
            pickle.dump(out, fh)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
