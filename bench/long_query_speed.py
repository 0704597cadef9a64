#!/usr/bin/env python3
"""Long queries: the query-term cap chosen on train, its quality on test, and BM25 speed beside bm25s.

    .venv/bin/python bench/long_query_speed.py [--reference-site DIR] [--queries 300]
        [--caps 8,16,24,32,48,64,0] [--output-dir DIR] [--skip-grid]

The set: ``bench/long_queries.py --shape arguana``, made from SciFact in ArguAna's shape
(1,406 paragraph queries per split, 8,674 documents, each query's own paragraph in the
corpus). Its eval store is built with the build's own steps (hashing embedder: the
figures here are BM25's, bar the hybrid line).

1. **The cap** (``MAX_QUERY_TERMS`` in ``rag_assets.index.query``): nDCG@10 of bm25 mode on
   the **train** split for each of ``--caps`` (0: no cap). The pick is the smallest cap
   whose nDCG@10 is not below the uncapped one.
2. **Test**: nDCG@10 (bm25 and hybrid) uncapped and with the shipped cap.
3. **Speed**, ``--queries`` test queries, each timed in turn by every system (side by
   side, so load hits them alike): bm25s (``bm25s.tokenize`` with PyStemmer and its
   English stop words, then ``retrieve(k=10)``, one query at a time, as the reference
   bench does; and per query in one batch), our in-memory BM25 ranking (``MemoryBm25.ranks``
   of the capped words), our whole search in bm25 mode (the default page view: terms,
   BM25, relevance, hits) on the in-memory BM25, and the same through FTS5 capped and
   uncapped. p50 and p90 in ms, and the p50 ratio to bm25s' single query.

bm25s is a reference only (see ``bench/bm25_reference.py`` for installing it beside the
project's environment and ``--reference-site``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # bench/secrets.py shadows `secrets`
sys.path.insert(0, str(ROOT))

from rag_assets.config import load_config  # noqa: E402
from rag_assets.evaluation.datasets import BeirDataset, load_beir  # noqa: E402
from rag_assets.evaluation.eval_store import ensure_eval_store  # noqa: E402
from rag_assets.evaluation.runner import Evaluator, select_eval_embedder  # noqa: E402
from rag_assets.index import query as query_module  # noqa: E402
from rag_assets.index.params import SearchParams  # noqa: E402
from rag_assets.search.retrieval import SearchIndex  # noqa: E402

sys.path.insert(0, str(HERE))
from long_queries import ARGUANA_OUT, DEFAULT_DATASET, ensure_long_query_set  # noqa: E402

UNCAPPED = 10**9
BM25 = SearchParams(mode="bm25")


class Cap:
    """``with Cap(n):`` searches with ``MAX_QUERY_TERMS = n`` (0: no cap)."""

    def __init__(self, n: int) -> None:
        self.n = n or UNCAPPED

    def __enter__(self) -> None:
        self.saved = query_module.MAX_QUERY_TERMS
        query_module.MAX_QUERY_TERMS = self.n

    def __exit__(self, *exc: object) -> None:
        query_module.MAX_QUERY_TERMS = self.saved


def ndcg(
    index: SearchIndex, dataset: BeirDataset, embedder, cap: int, modes: tuple[str, ...] = ("bm25",)
) -> dict[str, float]:
    with Cap(cap):
        evaluator = Evaluator(index.path, dataset, embedder, index=index)
        figures = evaluator.evaluate(SearchParams(), modes=modes)
    return {mode: figures[mode]["ndcg@10"] for mode in modes}


def choose_cap(index: SearchIndex, train: BeirDataset, embedder, caps: list[int]) -> int:
    scores = {cap: ndcg(index, train, embedder, cap)["bm25"] for cap in caps}
    for cap, score in scores.items():
        print(f"  train nDCG@10 bm25, cap {cap or 'none':>4}: {score:.4f}", flush=True)
    baseline = scores.get(0, ndcg(index, train, embedder, 0)["bm25"])
    good = [cap for cap, score in scores.items() if cap and score >= baseline - 1e-12]
    return min(good) if good else 0


def reference_searcher(dataset: BeirDataset) -> tuple[Callable[[str], object], Callable[[list[str]], object]]:
    """bm25s over the corpus: (one query, a batch of queries)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(
            [f"{d.title} {d.text}" for d in dataset.corpus], stopwords="en", stemmer=stemmer, show_progress=False
        ),
        show_progress=False,
    )

    def many(texts: list[str]) -> object:
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
        return retriever.retrieve(tokens, k=10, show_progress=False, n_threads=1)

    return (lambda text: many([text])), many


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def speed(memory: SearchIndex, fts: SearchIndex, dataset: BeirDataset, n: int) -> dict[str, list[float]]:
    """Per query, milliseconds of each system, each query run by all of them in turn."""
    texts = [dataset.queries[q] for q in dataset.judged_queries()][:n]
    one, many = reference_searcher(dataset)
    data = memory.loaded()
    for text in texts[:20]:  # warm-up: caches, the tokenizer's word cache, the stemmer
        one(text), memory.search(text, None, BM25), fts.search(text, None, BM25)
    batch = timed(lambda: many(texts)) / len(texts)

    def ranking(text: str) -> object:
        return data.bm25.ranks(text, 10, None, memory._query_words(data, text)[0])

    systems: dict[str, Callable[[str], object]] = {
        "bm25s, one query": one,
        "ours: in-memory BM25 ranking": ranking,
        "ours: search, in-memory BM25": lambda t: memory.search(t, None, BM25),
        "ours: search, FTS5 capped": lambda t: fts.search(t, None, BM25),
    }
    times: dict[str, list[float]] = {name: [] for name in systems}
    times["ours: search, FTS5 uncapped"] = []
    for text in texts:
        for name, fn in systems.items():
            times[name].append(timed(lambda: fn(text)))
        with Cap(0):
            times["ours: search, FTS5 uncapped"].append(timed(lambda: fts.search(text, None, BM25)))
    times["bm25s, per query in one batch"] = [batch]
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="the SciFact BEIR folder")
    parser.add_argument("--output-dir", default="/tmp/long-query-eval", help="where the eval store goes (data/eval/)")
    parser.add_argument("--reference-site", type=Path, default=None, help="site-packages holding bm25s and PyStemmer")
    parser.add_argument("--queries", type=int, default=300, help="test queries timed")
    parser.add_argument("--caps", default="8,16,24,32,48,64,0", help="caps tried on train (0: none)")
    parser.add_argument("--skip-grid", action="store_true", help="speed only")
    args = parser.parse_args(argv)
    if args.reference_site:
        sys.path.append(str(args.reference_site))
    print(f"load average at start: {os.getloadavg()}", flush=True)
    cfg = load_config(None, output_dir=args.output_dir)
    embedder, provider = select_eval_embedder(cfg, "hashing")
    folder = ensure_long_query_set(args.dataset, ARGUANA_OUT, shape="arguana")
    train, test = load_beir(folder, "train"), load_beir(folder, "test")
    built = ensure_eval_store(cfg, test, embedder, provider=provider)
    memory = SearchIndex(built.path, log_searches=False, lexical="memory")
    fts = SearchIndex(built.path, log_searches=False, lexical="fts5")
    print(f"{folder}: {len(test.corpus)} documents, {built.chunks} chunks; shipped cap {query_module.MAX_QUERY_TERMS}")
    if not args.skip_grid:
        pick = choose_cap(memory, train, embedder, [int(c) for c in args.caps.split(",")])
        print(f"  pick (smallest cap not below no cap on train): {pick or 'none'}", flush=True)
        for cap in (0, query_module.MAX_QUERY_TERMS):
            figures = ndcg(memory, test, embedder, cap, ("bm25", "hybrid"))
            print(
                f"  test nDCG@10, cap {cap or 'none':>4}: " + ", ".join(f"{m} {v:.4f}" for m, v in figures.items()),
                flush=True,
            )
    times = speed(memory, fts, test, args.queries)
    reference = statistics.median(times["bm25s, one query"])
    print(f"per query, {args.queries} test queries, ms:")
    for name, values in times.items():
        values.sort()
        p50, p90 = statistics.median(values), values[int(len(values) * 0.9)]
        print(f"  {name:34} p50 {p50:8.2f}  p90 {p90:8.2f}  p50/bm25s {p50 / reference:5.2f}")
    print(f"load average at end: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
