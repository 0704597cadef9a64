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
  hold (OFF_TOPIC below), against every index.

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
import random
import string
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

from bench import fit_order  # noqa: E402
from rag_assets.config import load_config  # noqa: E402
from rag_assets.evaluation.datasets import load_beir  # noqa: E402
from rag_assets.evaluation.eval_store import ensure_eval_store  # noqa: E402
from rag_assets.evaluation.runner import Evaluator, select_eval_embedder  # noqa: E402
from rag_assets.index.params import DEFAULT_MIN_RELEVANCE, SearchParams  # noqa: E402
from rag_assets.index.profiles import profile_for  # noqa: E402
from rag_assets.search.relevance import MODE_FEATURES, LogisticModel, parse_models  # noqa: E402
from rag_assets.search.retrieval import SearchIndex, tier_embedder  # noqa: E402

DEFAULT_DATASET = ROOT.parent / "shared" / "corpora" / "beir-scifact"
SHIPPED = ROOT / "rag_assets" / "search" / "relevance_models.json"
MODES = ("hybrid", "vector", "bm25")
# Questions about things none of the corpora (SciFact, the Hugo docs, the sample homelab site)
# hold. Written for this script; they never name a page.
OFF_TOPIC = [
    "how long should I knead bread dough by hand",
    "what is the offside rule in football",
    "best time of year to prune apple trees",
    "who won the 1966 world cup final",
    "how do I remove a red wine stain from a carpet",
    "what is the capital city of Australia",
    "how many eggs go into a classic carbonara",
    "how do I change a flat tyre on a bicycle",
    "which chess opening is best for beginners",
    "how to train a puppy to stop biting",
    "what are the rules of cricket for a test match",
    "recipe for a vegan chocolate cake without eggs",
    "how to fold a fitted sheet neatly",
    "when did the roman empire fall",
    "how do I learn to play the ukulele",
    "what should I pack for a week of hiking in the alps",
    "how to negotiate a higher salary at a job offer",
    "what is the difference between a crocodile and an alligator",
    "how to keep basil alive on a windowsill",
    "how many calories does a marathon burn",
    "why is the sky blue at noon and red at sunset",
    "how to knit a scarf for beginners",
    "what is the plot of pride and prejudice",
    "how do I get a mortgage with a low credit score",
    "best way to clean a cast iron skillet",
    "how do tides work",
    "what wine goes with grilled salmon",
    "how to write a wedding speech for my brother",
    "what is the tallest mountain in africa",
    "how to sharpen a kitchen knife with a whetstone",
    "what does a sommelier do",
    "how do I teach my child to ride a bike",
    "how long do you boil an egg for a runny yolk",
    "which houseplants are safe for cats",
    "how to stop snoring at night",
    "when is the best time to visit japan for cherry blossoms",
    "how do I repot an orchid",
    "what are the symptoms of a sprained ankle",
    "how to make sourdough starter from scratch",
    "who painted the ceiling of the sistine chapel",
]


@dataclass
class Sample:
    """One search's candidates: features per mode, labels, and what the search was."""

    source: str
    in_domain: bool
    query: str = ""
    features: dict[str, np.ndarray] = field(default_factory=dict)  # mode -> (n, features)
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # mode -> (n,) 0/1 by rank


def gibberish(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 11)))
            for _ in range(rng.randint(1, 3))
        ]
        out.append(" ".join(words))
    return ["zzzzqqq", "qwertyuiop asdfgh", "xkcd zzyzx vvvvv", *out]


def searched(index: SearchIndex, embedder, query: str, depth: int, key_of) -> dict[str, tuple[np.ndarray, list[str]]]:
    """mode -> (features of the top ``depth`` chunk candidates, their page keys), best first."""
    out = {}
    for mode in MODES:
        params = SearchParams(k=depth, candidates=max(200, depth), mode=mode, min_score=0.0, view="chunks")
        result = index.search(query, None if mode == "bm25" else embedder, params)
        names = MODE_FEATURES[mode]
        x = np.array([[h.features.get(f, 0.0) for f in names] for h in result.hits], dtype=np.float64).reshape(
            -1, len(names)
        )
        out[mode] = (x, [key_of(h) for h in result.hits])
    return out


def labelled(source: str, query: str, found, relevant: set[str] | None) -> Sample:
    sample = Sample(source, relevant is not None, query)
    for mode, (x, keys) in found.items():
        sample.features[mode] = x
        sample.labels[mode] = np.array([1.0 if relevant and k in relevant else 0.0 for k in keys])
    return sample


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


def read_questions(path: Path) -> list[tuple[str, set[str]]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            out.append((item["q"], set(item["expect"])))
    return out


def scifact_train(args, embedder_name: str):
    """(SciFact's train split, its evaluator over the eval store embedded with ``embedder_name``)."""
    cfg = load_config(args.config, output_dir=args.output_dir)
    train = load_beir(args.dataset, "train")
    embedder, provider = select_eval_embedder(cfg, embedder_name)
    built = ensure_eval_store(cfg, train, embedder, provider=provider, log=lambda m: None)
    return train, Evaluator(built.path, train, embedder)


def open_sites(args, model: str):
    """Each ``--site NAME=OUT_DIR:QUESTIONS`` as (name, its public index, its query embedder, the
    question file); a site built with another model than ``model`` stops the fit."""
    for site in args.site:
        name, _, rest = site.partition("=")
        out_dir, _, questions = rest.partition(":")
        site_cfg = load_config(args.config, output_dir=out_dir)
        index = SearchIndex(site_cfg.public_store_path, log_searches=False)
        site_embedder = tier_embedder(site_cfg, "public", index)
        if site_embedder.model != model:
            raise SystemExit(f"{out_dir} was built with {site_embedder.model}, not {model}")
        yield name, index, site_embedder, Path(questions)


def collect(args, embedder_name: str) -> list[Sample]:
    train, evaluator = scifact_train(args, embedder_name)
    scifact = evaluator.index
    corpus_key = lambda h: evaluator.corpus_id_of.get(h.document_id, "")  # noqa: E731
    page_key = lambda h: f"{h.collection}/{h.slug}"  # noqa: E731
    samples: list[Sample] = []
    claims = [train.queries[q] for q in evaluator.query_ids]
    t0 = time.perf_counter()
    for q in evaluator.query_ids[: args.scifact_queries]:
        relevant = {d for d, v in evaluator.qrels[q].items() if v > 0}
        samples.append(
            labelled(
                "scifact-train",
                train.queries[q],
                searched(scifact, evaluator.embedder, train.queries[q], args.depth, corpus_key),
                relevant,
            )
        )
    indexes = {"scifact": (scifact, evaluator.embedder, corpus_key)}
    for name, index, site_embedder, questions in open_sites(args, evaluator.embedder.model):
        indexes[name] = (index, site_embedder, page_key)
        for question, expect in read_questions(questions):
            samples.append(
                labelled(
                    f"{name}-questions",
                    question,
                    searched(index, site_embedder, question, args.depth, page_key),
                    expect,
                )
            )
        for claim in claims[: args.ood_claims]:
            samples.append(
                labelled(
                    f"scifact-claims-vs-{name}",
                    claim,
                    searched(index, site_embedder, claim, args.depth, page_key),
                    None,
                )
            )
        if name in args.titles_of:
            samples.extend(title_searches(name, index, site_embedder, args.titles, args.depth))
    for name, (index, emb, key) in indexes.items():
        for text in gibberish(args.gibberish):
            samples.append(labelled(f"gibberish-vs-{name}", text, searched(index, emb, text, args.depth, key), None))
        for text in OFF_TOPIC if name != "scifact" else ():  # SciFact's biomedicine holds health questions
            samples.append(labelled(f"off-topic-vs-{name}", text, searched(index, emb, text, args.depth, key), None))
    print(f"{embedder_name}: {len(samples)} searches in {time.perf_counter() - t0:.1f}s", flush=True)
    return samples


def title_searches(name: str, index: SearchIndex, embedder, count: int, depth: int) -> list[Sample]:
    """Known-item searches: ``count`` of the site's page titles (a seeded draw), each a query
    whose one relevant page is the page of that title. People type a page's name as often as
    a question; the other sources hardly ever name a page, so without these the ``title``
    feature is fitted to nothing."""
    documents = index.loaded().documents.values()
    pages = sorted({(d["title"], f"{d['collection']}/{d['slug']}") for d in documents if d.get("title")})
    random.Random(5).shuffle(pages)
    page_key = lambda h: f"{h.collection}/{h.slug}"  # noqa: E731
    return [
        labelled(f"{name}-titles", title, searched(index, embedder, title, depth, page_key), {page})
        for title, page in pages[:count]
    ]


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


def order_candidates(args, embedder_name: str) -> list[fit_order.Candidates]:
    """SciFact train's hybrid searches and each site's questions', captured for choosing the order."""
    train, evaluator = scifact_train(args, embedder_name)
    corpus_key = lambda h: evaluator.corpus_id_of.get(h.document_id, "")  # noqa: E731
    page_key = lambda h: f"{h.collection}/{h.slug}"  # noqa: E731
    out = []
    for q in evaluator.query_ids[: args.scifact_queries]:
        relevant = [d for d, v in evaluator.qrels[q].items() if v > 0]
        query = train.queries[q]
        out.append(
            fit_order.captured("scifact-train", evaluator.index, evaluator.embedder, query, relevant, corpus_key)
        )
    for name, index, site_embedder, questions in open_sites(args, evaluator.embedder.model):
        for question, expect in read_questions(questions):
            out.append(fit_order.captured(f"{name}-questions", index, site_embedder, question, expect, page_key))
    return out


def replace_sites(args, embedder: str):
    copy = argparse.Namespace(**vars(args))
    copy.site = [s.replace("{embedder}", embedder) for s in args.site]
    return copy


if __name__ == "__main__":
    raise SystemExit(main())
