#!/usr/bin/env python3
"""Our BM25 against bm25s + PyStemmer on SciFact and on paragraph-long queries, in one run.

    .venv/bin/python bench/bm25_reference.py [--reference-site DIR] [--split test] [--output-dir DIR]

bm25s is a reference only, never a dependency of the project: install it with PyStemmer
into a separate environment and point ``--reference-site`` at that environment's
site-packages (appended to ``sys.path``, so the project's own numpy and scipy are used)::

    python3 -m venv /tmp/bm25ref && /tmp/bm25ref/bin/pip install --no-deps bm25s PyStemmer
    .venv/bin/python bench/bm25_reference.py --reference-site /tmp/bm25ref/lib/python3.11/site-packages

Datasets: SciFact (``--dataset``) and the long-query set made from it
(``bench/long_queries.py``: the first half of an abstract as the query, its document,
holding the second half, as the answer). Both systems score the same split (``--split``,
default test) with nDCG@10 (``rag_assets.evaluation.metrics``, BEIR's own-ID rule).

- **ours**: the project's search, bm25 mode, over an eval store built by the build's own
  steps (``rag_assets.evaluation.eval_store``; the embedder only fills the vectors), with
  the defaults (field weights, query-term repeats for long queries) and, as a baseline,
  unweighted fields with every query word counted once. The in-memory BM25 serves the
  queries: its scores are FTS5's ``bm25()`` (``test_bm25.py``), and it is faster on long
  queries.
- **bm25s**: ``title + " " + text`` per document, ``bm25s.tokenize(stopwords="en",
  stemmer=Stemmer.Stemmer("english"))`` for documents and queries, ``bm25s.BM25()``
  defaults (Lucene's BM25: k1 1.5, b 0.75, idf ``log(1 + (N - n + 0.5) / (n + 0.5))``),
  query term frequency counted. This is the setting of the SciFact folder's SOURCE.md
  (0.6863 on test).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [
    p for p in sys.path if Path(p or ".").resolve() != HERE
]  # bench/ off the path: no bench module shadows a library's
sys.path.insert(0, str(ROOT))

from rag_assets.config import load_config  # noqa: E402
from rag_assets.evaluation.datasets import BeirDataset, load_beir  # noqa: E402
from rag_assets.evaluation.eval_store import ensure_eval_store  # noqa: E402
from rag_assets.evaluation.metrics import ndcg_at, without_self_hit  # noqa: E402
from rag_assets.evaluation.runner import Evaluator, select_eval_embedder  # noqa: E402
from rag_assets.index import query as query_module  # noqa: E402
from rag_assets.index.fields import FieldWeights  # noqa: E402
from rag_assets.index.params import SearchParams  # noqa: E402

sys.path.insert(0, str(HERE))
from long_queries import ensure_long_query_set  # noqa: E402

DEFAULT_DATASET = ROOT.parent / "shared" / "corpora" / "beir-scifact"


def ours(cfg, dataset: BeirDataset, embedder, provider: str, fields: FieldWeights, max_repeats: int) -> float:
    built = ensure_eval_store(cfg, dataset, embedder, provider=provider)
    saved = query_module.MAX_REPEATS
    query_module.MAX_REPEATS = max_repeats
    evaluator = Evaluator(built.path, dataset, embedder, fields=fields, lexical="memory")
    try:
        return evaluator.evaluate(SearchParams(mode="bm25"), modes=("bm25",))["bm25"]["ndcg@10"]
    finally:
        evaluator.close()
        query_module.MAX_REPEATS = saved


def reference(dataset: BeirDataset) -> float:
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    ids = [doc.id for doc in dataset.corpus]
    retriever = bm25s.BM25()
    corpus = bm25s.tokenize(
        [f"{d.title} {d.text}" for d in dataset.corpus], stopwords="en", stemmer=stemmer, show_progress=False
    )
    retriever.index(corpus, show_progress=False)
    queries = dataset.judged_queries()
    tokens = bm25s.tokenize([dataset.queries[q] for q in queries], stopwords="en", stemmer=stemmer, show_progress=False)
    found, _ = retriever.retrieve(tokens, k=11, show_progress=False, n_threads=1)  # 11: one may be the query's own ID
    total = sum(
        ndcg_at(without_self_hit([ids[i] for i in found[n]], q), dataset.qrels[q]) for n, q in enumerate(queries)
    )
    return total / len(queries)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="the SciFact BEIR folder")
    parser.add_argument("--split", default="test")
    parser.add_argument("--output-dir", default="/tmp/bm25-eval", help="where the eval stores go (data/eval/)")
    parser.add_argument("--embedder", default="hashing", help="fills the stores' vectors only (default: hashing)")
    parser.add_argument("--reference-site", type=Path, default=None, help="site-packages holding bm25s and PyStemmer")
    args = parser.parse_args(argv)
    if args.reference_site:
        sys.path.append(str(args.reference_site))
    try:
        import bm25s  # noqa: F401
        import Stemmer  # noqa: F401
    except ImportError:
        print("bm25s and PyStemmer are needed for the reference: see this script's docstring", file=sys.stderr)
        return 2

    cfg = load_config(None, output_dir=args.output_dir)
    embedder, provider = select_eval_embedder(cfg, args.embedder)
    datasets = {
        "SciFact": load_beir(args.dataset, args.split),
        "long queries": load_beir(ensure_long_query_set(args.dataset), args.split),
    }
    systems = {
        "ours (defaults)": lambda d: ours(cfg, d, embedder, provider, FieldWeights(), query_module.MAX_REPEATS),
        "ours (fields 1/1/1/1, words once)": lambda d: ours(cfg, d, embedder, provider, FieldWeights.unweighted(), 1),
        "bm25s + PyStemmer": reference,
    }
    print(f"nDCG@10, {args.split} split")
    print(f"{'system':36} " + " ".join(f"{name:>14}" for name in datasets) + "   seconds")
    for name, score in systems.items():
        started = time.perf_counter()
        figures = [score(dataset) for dataset in datasets.values()]
        print(
            f"{name:36} " + " ".join(f"{f:14.4f}" for f in figures) + f"   {time.perf_counter() - started:7.1f}",
            flush=True,
        )
    for name, dataset in datasets.items():
        words = sorted(len(dataset.queries[q].split()) for q in dataset.judged_queries())
        print(
            f"{name}: {len(words)} queries, {len(dataset.corpus)} documents, median {words[len(words) // 2]} words per query"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
