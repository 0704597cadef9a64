#!/usr/bin/env python3
"""What the reranking stage gains on a BEIR dataset: hybrid nDCG@10 with and without it.

    .venv/bin/python bench/rerank.py [--dataset DIR] [--split test] [--embedder local]
        [--top-n 20 50] [--limit N] [--json FILE]
        [--reranker cross_encoder --model-path DIR | --reranker http|chat --base-url URL --model NAME]

Without ``--reranker`` the ``reranker:`` section of rag.yaml is used. For every judged
query of the split, the hybrid search runs once with the default parameters (through
``SearchIndex.search``, as ``rag search`` does), ``max(top-n)`` chunks deep; then, for each
``--top-n``, the first N chunks are reranked by the stage ``rag search`` uses
(:func:`rag_assets.search.rerank.stage.rerank_hits`), and nDCG@10, recall@10 and MRR@10 are
scored on documents (a document at its best chunk's place) with the BEIR definitions.
Printed: the hybrid baseline, each reranked figure with its gain, the share of queries
the stage failed on (those keep the fused order), and the reranking time per query.

The eval store is the one ``rag eval`` builds (rag_assets.evaluation.eval_store), reused
when it is up to date.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

from rag_assets.config import RerankerSettings, load_config  # noqa: E402
from rag_assets.evaluation.datasets import load_beir  # noqa: E402
from rag_assets.evaluation.eval_store import ensure_eval_store  # noqa: E402
from rag_assets.evaluation.metrics import mrr_at, ndcg_at, recall_at, without_self_hit  # noqa: E402
from rag_assets.evaluation.runner import Evaluator, documents_of, select_eval_embedder  # noqa: E402
from rag_assets.index.params import SearchParams  # noqa: E402
from rag_assets.search.rerank.selection import select_reranker  # noqa: E402
from rag_assets.search.rerank.stage import RerankStage, rerank_hits  # noqa: E402

DEFAULT_DATASET = ROOT.parent / "shared" / "corpora" / "beir-scifact"


def scores(ranked: dict[str, list[str]], qrels) -> dict[str, float]:
    """Mean nDCG@10, recall@10 and MRR@10 over the queries of ``ranked``."""
    out = {"ndcg@10": 0.0, "recall@10": 0.0, "mrr@10": 0.0}
    for q, docs in ranked.items():
        top = without_self_hit(docs, q)
        out["ndcg@10"] += ndcg_at(top, qrels[q], 10)
        out["recall@10"] += recall_at(top, qrels[q], 10)
        out["mrr@10"] += mrr_at(top, qrels[q], 10)
    return {k: v / max(len(ranked), 1) for k, v in out.items()}


def reranker_settings(args: argparse.Namespace, configured: RerankerSettings) -> RerankerSettings:
    if not args.reranker:
        return configured
    return RerankerSettings(
        name=args.reranker,
        base_url=args.base_url,
        model=args.model,
        model_path=args.model_path,
        api_key_env=args.api_key_env,
        batch_size=args.batch_size,
        timeout=args.timeout,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default=str(DEFAULT_DATASET), help="BEIR dataset folder (default: SciFact)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--embedder", default=None, help="embedder name (default: the configured one)")
    parser.add_argument("--config", default=None, help="rag.yaml (default: ./rag.yaml or $RAG_CONFIG)")
    parser.add_argument(
        "--output-dir", default=None, help="override the config's output_dir (data/ and the cache under it)"
    )
    parser.add_argument("--top-n", type=int, nargs="+", default=[20, 50], help="candidates reranked (default: 20 50)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N judged queries (slow rerankers)")
    parser.add_argument("--reranker", choices=("cross_encoder", "http", "chat"), help="default: rag.yaml's reranker")
    parser.add_argument("--model-path", help="cross-encoder model folder")
    parser.add_argument("--base-url", help="http / chat API base URL")
    parser.add_argument("--model", help="http / chat model name")
    parser.add_argument("--api-key-env", help="variable holding the API key")
    parser.add_argument("--batch-size", type=int, default=16, help="passages per chat request / cross-encoder batch")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    parser.add_argument("--json", default=None, help="write every figure to this file")
    args = parser.parse_args(argv)

    cfg = load_config(args.config, output_dir=args.output_dir)
    settings = reranker_settings(args, cfg.reranker)
    reranker = select_reranker(settings, "public")
    if reranker is None:
        parser.error(
            "no reranker: pass --reranker (with --model-path, or --base-url and --model) or configure one in rag.yaml"
        )
    dataset = load_beir(args.dataset, args.split)
    embedder, provider = select_eval_embedder(cfg, args.embedder)
    built = ensure_eval_store(cfg, dataset, embedder, provider=provider, log=lambda m: print(m, flush=True))
    evaluator = Evaluator(built.path, dataset, embedder)
    query_ids = evaluator.query_ids[: args.limit]
    depth = max(args.top_n)
    # As rag eval scores rankings: one hit per chunk, no relevance floor, no collection weights.
    params = dataclasses.replace(
        SearchParams(),
        k=depth,
        candidates=max(SearchParams().candidates, depth),
        collection_weights=False,
        min_score=0.0,
        view="chunks",
    )

    baseline: dict[str, list[str]] = {}
    reranked: dict[int, dict[str, list[str]]] = {n: {} for n in args.top_n}
    failures = dict.fromkeys(args.top_n, 0)
    seconds = dict.fromkeys(args.top_n, 0.0)
    print(f"{len(query_ids)} queries, reranker {reranker.name}, top-n {args.top_n}", flush=True)
    for number, q in enumerate(query_ids, start=1):
        query = dataset.queries[q]
        hits = evaluator.index.search(query, evaluator.embedder, params).hits
        baseline[q] = documents_of((evaluator.corpus_id_of.get(h.document_id, ""), h.score) for h in hits)
        for n in args.top_n:
            started = time.perf_counter()
            ordered, report = rerank_hits(query, [dataclasses.replace(h) for h in hits], RerankStage(reranker, n))
            seconds[n] += time.perf_counter() - started
            failures[n] += not report.reranked
            reranked[n][q] = documents_of((evaluator.corpus_id_of.get(h.document_id, ""), 0.0) for h in ordered)
        if number % 50 == 0:
            print(f"  {number}/{len(query_ids)} queries", flush=True)
    evaluator.close()
    reranker.close()

    base = scores(baseline, evaluator.qrels)
    figures = {
        "dataset": dataset.name,
        "split": args.split,
        "queries": len(query_ids),
        "embedder": embedder.model,
        "reranker": reranker.name,
        "hybrid": base,
        "reranked": {},
    }
    print(f"\n{dataset.name} ({args.split}), {len(query_ids)} queries, {embedder.model}; reranker {reranker.name}")
    print(f"{'':<18}{'nDCG@10':>9}{'recall@10':>11}{'MRR@10':>9}{'failed':>8}{'ms/query':>10}")
    print(f"{'hybrid':<18}{base['ndcg@10']:>9.4f}{base['recall@10']:>11.4f}{base['mrr@10']:>9.4f}")
    for n in args.top_n:
        got = scores(reranked[n], evaluator.qrels)
        ms = 1000 * seconds[n] / max(len(query_ids), 1)
        figures["reranked"][n] = {**got, "failed_queries": failures[n], "ms_per_query": round(ms, 1)}
        gain = got["ndcg@10"] - base["ndcg@10"]
        print(
            f"{f'+ rerank top {n}':<18}{got['ndcg@10']:>9.4f}{got['recall@10']:>11.4f}{got['mrr@10']:>9.4f}"
            f"{failures[n]:>8}{ms:>10.1f}   (nDCG@10 {gain:+.4f})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
