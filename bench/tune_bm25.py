#!/usr/bin/env python3
"""Tune BM25's field weights and query-term repeats on TRAIN splits; report the TEST splits.

    .venv/bin/python bench/tune_bm25.py [--dataset DIR] [--output-dir DIR] [--embedder hashing]
        [--questions FILE=STORE ...] [--json FILE]

1. Indexes SciFact and the long-query set (``bench/long_queries.py``: paragraph queries
   made from SciFact abstracts) with the build's own steps (eval stores under
   ``--output-dir``), or reuses those stores. The embedder only fills the stores' vectors:
   every figure here is BM25 alone.
2. Scores a grid on the **train** queries of both (nDCG@10, bm25 mode, the in-memory BM25,
   which gives FTS5's scores): the title weight (``rag_assets.index.fields``; SciFact
   documents have a title but no headings or tags) times ``MAX_REPEATS`` (how many times a
   word repeated in a long query counts) times ``LONG_QUERY_WORDS`` (from how many words,
   stop words dropped, a query is long; both in ``rag_assets.index.query``). The pick: the
   best mean of the two train nDCG@10 among the settings that do not lose on SciFact train
   against the baseline: unweighted fields, every word counted once.
3. Prints the **test** figures of that pick and of that baseline. Nothing is chosen by
   looking at test. (The store before the fields, a text column alone, is not rebuilt
   here: ``rag eval`` on the previous commit gives its figures.)
4. ``--questions FILE=STORE`` (a question set, ``{"q", "expect": ["collection/slug"]}``
   per line, and the store built from its content): hit@1/5/10 and MRR@10 per page of
   the baseline, the pick, and the pick with its heading and tag weights back at 1, as a
   check that the weights do not hurt there (the sets are small; they choose nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Keep bench/ off the path (bench/secrets.py once shadowed `secrets`): drop the
# script's own folder, then import the long-query set as a module of this folder.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

from rag_assets.config import load_config  # noqa: E402
from rag_assets.evaluation.datasets import load_beir  # noqa: E402
from rag_assets.evaluation.eval_store import ensure_eval_store  # noqa: E402
from rag_assets.evaluation.runner import Evaluator, select_eval_embedder  # noqa: E402
from rag_assets.index import query as query_module  # noqa: E402
from rag_assets.index.fields import FieldWeights  # noqa: E402
from rag_assets.index.params import SearchParams  # noqa: E402
from rag_assets.search.retrieval import SearchIndex  # noqa: E402

sys.path.insert(0, str(HERE))
from long_queries import ensure_long_query_set  # noqa: E402

DEFAULT_DATASET = ROOT.parent / "shared" / "corpora" / "beir-scifact"
TITLE_WEIGHTS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0)
REPEATS = (1, 2, 3, 1000)  # 1000: every repeat counts
LONG_QUERY_WORDS = (0, 15, 20, 25)
BM25 = SearchParams(mode="bm25")


@dataclass(frozen=True)
class Setting:
    fields: FieldWeights
    repeats: int = 1
    long_words: int = 0  # irrelevant when repeats is 1

    def __str__(self) -> str:
        repeats = "all" if self.repeats >= 1000 else str(self.repeats)
        return f"fields {self.fields} repeats {repeats}" + (
            f" from {self.long_words} words" if self.repeats > 1 else ""
        )

    def apply(self) -> None:
        query_module.MAX_REPEATS, query_module.LONG_QUERY_WORDS = self.repeats, self.long_words


BASELINE = Setting(FieldWeights.unweighted())


def grid() -> list[Setting]:
    out = []
    for title in TITLE_WEIGHTS:
        fields = FieldWeights(text=1.0, title=title, headings=title, tags=title)
        out.append(Setting(fields))
        out += [Setting(fields, r, n) for r in REPEATS if r > 1 for n in LONG_QUERY_WORDS]
    return out


class Scorer:
    """nDCG@10 (bm25 mode) of one eval store and dataset at any setting; one Evaluator
    (in-memory postings) per field weights."""

    def __init__(self, store: Path, dataset, split_qrels: dict, embedder) -> None:
        self.store, self.dataset, self.split_qrels, self.embedder = store, dataset, split_qrels, embedder
        self.evaluators: dict[FieldWeights, Evaluator] = {}

    def ndcg(self, setting: Setting, split: str) -> float:
        evaluator = self.evaluators.get(setting.fields)
        if evaluator is None:
            evaluator = self.evaluators[setting.fields] = Evaluator(
                self.store, self.dataset, self.embedder, fields=setting.fields, lexical="memory"
            )
        setting.apply()
        evaluator.use_qrels(self.split_qrels[split])
        evaluator._runs.clear()  # its cache does not know the query settings
        return evaluator.evaluate(BM25, modes=("bm25",))["bm25"]["ndcg@10"]

    def close(self) -> None:
        for evaluator in self.evaluators.values():
            evaluator.close()


def scorer(cfg, folder: Path, embedder, provider: str) -> Scorer:
    train = load_beir(folder, "train")
    built = ensure_eval_store(cfg, train, embedder, provider=provider, log=lambda m: print(m, flush=True))
    return Scorer(built.path, train, {"train": train.qrels, "test": load_beir(folder, "test").qrels}, embedder)


def question_figures(path: Path, store: Path, setting: Setting) -> dict[str, float]:
    """hit@1/5/10 and MRR@10 per page (``collection/slug``) of BM25 alone."""
    setting.apply()
    questions = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    index = SearchIndex(store, log_searches=False, fields=setting.fields)
    totals = {"hit@1": 0.0, "hit@5": 0.0, "hit@10": 0.0, "mrr@10": 0.0}
    try:
        for item in questions:
            hits = index.search(item["q"], None, replace(BM25, k=50, min_score=0.0)).hits
            pages = list(dict.fromkeys(f"{h.collection}/{h.slug}" for h in hits))[:10]
            rank = next((i for i, page in enumerate(pages, start=1) if page in set(item["expect"])), None)
            for k in (1, 5, 10):
                totals[f"hit@{k}"] += rank is not None and rank <= k
            totals["mrr@10"] += 1.0 / rank if rank else 0.0
    finally:
        index.close()
    return {k: v / len(questions) for k, v in totals.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="the SciFact BEIR folder")
    parser.add_argument(
        "--long-queries", type=Path, default=None, help="the long-query set (default: made from --dataset)"
    )
    parser.add_argument("--output-dir", default="/tmp/bm25-eval", help="where the eval stores go (data/eval/)")
    parser.add_argument("--embedder", default="hashing", help="fills the stores' vectors only (default: hashing)")
    parser.add_argument("--questions", action="append", default=[], metavar="FILE=STORE")
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this file")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    cfg = load_config(None, output_dir=args.output_dir)
    embedder, provider = select_eval_embedder(cfg, args.embedder)
    long_folder = args.long_queries or ensure_long_query_set(args.dataset)
    sets = {
        "scifact": scorer(cfg, args.dataset, embedder, provider),
        "long": scorer(cfg, long_folder, embedder, provider),
    }

    rows = []
    for each in grid():
        figures = {name: s.ndcg(each, "train") for name, s in sets.items()}
        rows.append((each, figures))
        print(f"{str(each):52} scifact {figures['scifact']:.4f}  long {figures['long']:.4f}", flush=True)
    base = next(figures for each, figures in rows if each == Setting(FieldWeights(1.0, 1.0, 1.0, 1.0)))
    allowed = [row for row in rows if row[1]["scifact"] >= base["scifact"]]
    pick, best = max(allowed, key=lambda row: (row[1]["scifact"] + row[1]["long"]) / 2)
    print(f"\nTRAIN baseline {BASELINE}: scifact {base['scifact']:.4f} long {base['long']:.4f}")
    print(f"TRAIN pick     {pick}: scifact {best['scifact']:.4f} long {best['long']:.4f}")

    results = {"train_grid": [{"setting": str(e), **m} for e, m in rows], "test": {}, "questions": {}}
    for name, each in {"baseline": BASELINE, "pick": pick}.items():
        figures = {s: sets[s].ndcg(each, "test") for s in sets}
        results["test"][name] = {"setting": str(each), **figures}
        print(f"TEST  {name:8} {each}: scifact {figures['scifact']:.4f} long {figures['long']:.4f}")
    for scorer_ in sets.values():
        scorer_.close()
    checks = {
        "baseline": BASELINE,
        "pick": pick,
        "pick, headings and tags 1": replace(pick, fields=replace(pick.fields, headings=1.0, tags=1.0)),
    }
    for pair in args.questions:
        path, store = (Path(p) for p in pair.split("=", 1))
        for name, each in checks.items():
            figures = question_figures(path, store, each)
            results["questions"].setdefault(path.name, {})[name] = figures
            print(f"QUESTIONS {path.name} {name:26} " + " ".join(f"{k} {v:.3f}" for k, v in figures.items()))
    print(f"\ntotal {time.perf_counter() - started:.1f}s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
