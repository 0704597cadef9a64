#!/usr/bin/env python3
"""Tune the hybrid fusion defaults on a BEIR dataset's TRAIN split; report the TEST split.

    .venv/bin/python bench/tune_fusion.py [--dataset DIR] [--embedder local] [--depth 300]
                                          [--output-dir DIR] [--top N] [--json FILE]

1. Indexes the corpus with the build's own steps (rag_assets.evaluation.eval_store: chunking, the
   embedder, the shared embedding cache, a store under data/eval/), or reuses that store.
2. Scores a grid of fusion settings on the **train** queries (hybrid only: bm25 and vector do
   not depend on fusion): RRF with rrf_k 10/30/60 and vector/bm25 weights 0.3/0.7, 0.5/0.5,
   0.6/0.4, 0.7/0.3; convex with vector weight 0.3..0.8 (bm25 weight 1 - it); candidates
   100 and 200 (and, once search.py offers ``fusion="zscore"``, that with vector weight
   0.4/0.5/0.6). Printed best first by train nDCG@10.
3. Prints the **test** figures (bm25, vector, hybrid) of the best train setting and of the
   reference settings (rrf 0.7/0.3 k=60, rrf 0.5/0.5 k=60, convex 0.5/0.5; 100 candidates). Nothing is
   chosen by looking at test.

Speed: each train query's vector and BM25 lists are read once, ``depth`` chunks deep, through
the SearchIndex's own ranking functions; every grid setting then cuts them at its
``candidates`` and fuses them with ``rag_assets.search.fusion.fuse``, which is what
``SearchIndex.search`` does with them. The best setting is re-scored on train through the
full ``SearchIndex.search`` path as a cross-check, and every test figure comes from that path
(rag_assets.evaluation.runner.Evaluator).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Keep bench/ off the path (bench/secrets.py once shadowed the `secrets` that
# huggingface_hub imports when the local model loads): drop the script's own folder.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

from rag_assets.config import load_config  # noqa: E402
from rag_assets.evaluation.datasets import load_beir  # noqa: E402
from rag_assets.evaluation.eval_store import ensure_eval_store  # noqa: E402
from rag_assets.evaluation.metrics import METRICS, score_rankings  # noqa: E402
from rag_assets.evaluation.report import format_table  # noqa: E402
from rag_assets.evaluation.runner import (  # noqa: E402
    DEFAULT_DEPTH,
    Evaluator,
    documents_of,
    select_eval_embedder,
)
from rag_assets.index.params import FUSIONS, SearchParams  # noqa: E402
from rag_assets.search.fusion import fuse  # noqa: E402

DEFAULT_DATASET = ROOT.parent / "shared" / "corpora" / "beir-scifact"
RRF_KS = (10, 30, 60)
RRF_WEIGHTS = ((0.3, 0.7), (0.5, 0.5), (0.6, 0.4), (0.7, 0.3))
CONVEX_VECTOR_WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
CANDIDATES = (100, 200)
# Scored too once search.py offers it (a proposed fusion): both lists' scores standardised over
# the union of candidates, BM25 candidates given their true cosine.
ZSCORE = "zscore" in FUSIONS and "cosines" in inspect.signature(fuse).parameters
ZSCORE_VECTOR_WEIGHTS = (0.4, 0.5, 0.6)
# Pinned (candidates 100, min_score 0.1) so that changing the defaults does not move them.
REFERENCES = {
    "rrf 0.7/0.3 k=60": SearchParams(
        fusion="rrf", rrf_k=60, vector_weight=0.7, bm25_weight=0.3, candidates=100, min_score=0.1
    ),
    "rrf 0.5/0.5 k=60": SearchParams(
        fusion="rrf", rrf_k=60, vector_weight=0.5, bm25_weight=0.5, candidates=100, min_score=0.1
    ),
    "convex 0.5/0.5": SearchParams(fusion="convex", vector_weight=0.5, bm25_weight=0.5, candidates=100, min_score=0.1),
}


def grid() -> list[SearchParams]:
    settings = []
    for candidates in CANDIDATES:
        for k in RRF_KS:
            for wv, wb in RRF_WEIGHTS:
                settings.append(
                    SearchParams(fusion="rrf", rrf_k=k, vector_weight=wv, bm25_weight=wb, candidates=candidates)
                )
        for wv in CONVEX_VECTOR_WEIGHTS:
            settings.append(
                SearchParams(fusion="convex", vector_weight=wv, bm25_weight=round(1 - wv, 2), candidates=candidates)
            )
        for wv in ZSCORE_VECTOR_WEIGHTS if ZSCORE else ():
            settings.append(
                SearchParams(fusion="zscore", vector_weight=wv, bm25_weight=round(1 - wv, 2), candidates=candidates)
            )
    return settings


def label(p: SearchParams) -> str:
    if p.fusion == "rrf":
        return f"rrf k={p.rrf_k} {p.vector_weight:.1f}/{p.bm25_weight:.1f} c={p.candidates}"
    return f"{p.fusion} {p.vector_weight:.1f}/{p.bm25_weight:.1f} c={p.candidates}"


class ListCache:
    """Each query's vector and BM25 lists, ``depth`` chunks deep, read once from the SearchIndex."""

    def __init__(self, evaluator: Evaluator, depth: int) -> None:
        index = evaluator.index
        data = index.loaded()
        self.depth = depth
        self.matrix = data.matrix
        self.doc_of_row = [evaluator.corpus_id_of.get(d, "") for d in data.document_ids]
        self.lists: dict[str, tuple[dict, dict]] = {}
        self.qvecs = {}
        for q in evaluator.query_ids:
            text = evaluator.dataset.queries[q]
            qvec = self.qvecs[q] = evaluator.embedder.embed_query(text)
            # The same two calls SearchIndex.search makes (no filters: mask None).
            self.lists[q] = (index._vector_ranks(data, qvec, None, depth), index._bm25_ranks(data, text, None, depth))

    def ranking(self, q: str, params: SearchParams) -> list[str]:
        """SearchIndex.search(mode=hybrid) without filters, weights or diversity, as documents."""
        vector, lexical = self.lists[q]
        c = params.candidates
        assert c <= self.depth
        vector = {row: v for row, v in vector.items() if v[0] <= c}
        lexical = {row: v for row, v in lexical.items() if v[0] <= c}
        if params.fusion == "zscore":
            missing = [row for row in lexical if row not in vector]
            cosines = dict(zip(missing, (self.matrix[missing] @ self.qvecs[q]).tolist())) if missing else {}
            scored = fuse(vector, lexical, params, "hybrid", cosines)
        else:
            scored = fuse(vector, lexical, params, "hybrid")
        ranked = [row for row, s in sorted(scored.items(), key=lambda kv: (-kv[1], kv[0])) if s >= params.min_score]
        return documents_of((self.doc_of_row[row], scored[row]) for row in ranked[: params.k])

    def score(self, params: SearchParams, qrels) -> dict[str, float]:
        shallow_p = replace(params, k=params.candidates)
        deep_p = replace(params, k=self.depth, candidates=self.depth, min_score=-math.inf)
        shallow = {q: self.ranking(q, shallow_p) for q in self.lists}
        deep = {q: self.ranking(q, deep_p) for q in self.lists}
        return score_rankings(shallow, deep, qrels)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default=str(DEFAULT_DATASET), help="BEIR dataset folder (default: SciFact)")
    parser.add_argument("--embedder", default="local", help="embedder name (default: local, all-MiniLM-L6-v2)")
    parser.add_argument("--config", default=None, help="rag.yaml (default: ./rag.yaml or $RAG_CONFIG)")
    parser.add_argument(
        "--output-dir", default=None, help="override the config's output_dir (data/ and the cache under it)"
    )
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--test-split", default="test")
    parser.add_argument("--depth", type=int, default=DEFAULT_DEPTH, help="chunks per list for recall@100")
    parser.add_argument("--top", type=int, default=40, help="grid rows to print")
    parser.add_argument("--json", default=None, help="write every figure to this file")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    cfg = load_config(args.config, output_dir=args.output_dir)
    train = load_beir(args.dataset, args.train_split)
    test_qrels = load_beir(args.dataset, args.test_split).qrels
    embedder, provider = select_eval_embedder(cfg, args.embedder)
    print(f"dataset {train.name}: {len(train.corpus)} documents; model {embedder.model} ({provider})", flush=True)
    built = ensure_eval_store(cfg, train, embedder, provider=provider, log=lambda m: print(m, flush=True))
    print(
        f"store {built.path}: {built.chunks} chunks, {'built' if built.rebuilt else 'reused'} in {built.seconds:.1f}s",
        flush=True,
    )

    evaluator = Evaluator(built.path, train, embedder, depth=args.depth)
    t0 = time.perf_counter()
    lists = ListCache(evaluator, args.depth)
    print(f"train: {len(evaluator.query_ids)} queries, lists read in {time.perf_counter() - t0:.1f}s", flush=True)

    t0 = time.perf_counter()
    rows = [(p, lists.score(p, evaluator.qrels)) for p in grid()]
    rows.sort(key=lambda r: (-r[1]["ndcg@10"], -r[1]["recall@100"], label(r[0])))
    print(f"grid of {len(rows)} settings scored in {time.perf_counter() - t0:.1f}s\n")
    single = evaluator.evaluate(SearchParams(), modes=("bm25", "vector"))
    print(f"TRAIN ({len(evaluator.query_ids)} queries), hybrid, best first by nDCG@10")
    print(f"{'setting':32} " + " ".join(f"{m:>10}" for m in METRICS))
    for p, m in rows[: args.top]:
        print(f"{label(p):32} " + " ".join(f"{m[k]:10.4f}" for k in METRICS))
    for mode, m in single.items():
        print(f"{'(' + mode + ' alone)':32} " + " ".join(f"{m[k]:10.4f}" for k in METRICS))

    best = rows[0][0]
    # Cross-check: the replica above must agree with the full SearchIndex.search path.
    check = evaluator.evaluate(best, modes=("hybrid",))["hybrid"]
    drift = max(abs(check[k] - rows[0][1][k]) for k in METRICS)
    print(f"\nbest on train: {label(best)}; full-path re-score differs by {drift:.2e}")
    if drift > 1e-9:
        print("WARNING: the grid replica and SearchIndex.search disagree; trust the full-path figures", file=sys.stderr)

    evaluator.use_qrels(test_qrels)
    results = {"train_grid": [{"setting": label(p), "params": asdict(p), **m} for p, m in rows], "test": {}}
    settings = {f"best on train ({label(best)})": best, **REFERENCES}
    for name, params in settings.items():
        t0 = time.perf_counter()
        metrics = evaluator.evaluate(params)
        results["test"][name] = {"params": asdict(params), "metrics": metrics}
        print(f"\nTEST ({len(evaluator.query_ids)} queries), {name}  [{time.perf_counter() - t0:.1f}s]")
        print(format_table(metrics))
    evaluator.close()
    print(f"\ntotal {time.perf_counter() - started:.1f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
