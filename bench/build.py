#!/usr/bin/env python3
"""Full build of the Hugo docs corpus with the hashing embedder; prints throughput figures.

    .venv/bin/python bench/build.py [--corpus DIR] [--repeat N]

Runs the same in-process Dagster jobs as `rag build` (ephemeral instance, fresh
output folder per repetition) and reports medians over the repetitions: wall
time, documents/s, chunks/s, peak RSS, index bytes per chunk, and the share of
wall time spent outside embedding.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parents[1]
# This folder holds secrets.py (the detector bench), which would shadow the standard
# library module torch and others import; keep the folder off the front of the path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from rag_assets.config import load_config  # noqa: E402
from rag_assets.defs.runner import run_build  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"


def one_build(corpus: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(None, content_dir=corpus, output_dir=out, embedder="hashing", environ={})
        instance = dg.DagsterInstance.ephemeral()
        t0 = time.perf_counter()
        outcome = run_build(cfg, instance)
        wall = time.perf_counter() - t0
        instance.dispose()
        if not outcome.success:
            raise SystemExit(f"build failed: {outcome.error or outcome.failed_checks}")
        docs = sum(c.metadata["parsed_documents"]["documents"] for c in outcome.collections)
        chunks = sum(c.metadata["chunks"]["chunks"] for c in outcome.collections)
        embed_s = sum(c.metadata["embeddings"]["embedding_seconds"] for c in outcome.collections)
        index_bytes = cfg.index_path.stat().st_size
    return {
        "wall_s": wall,
        "documents": docs,
        "chunks": chunks,
        "docs_per_s": docs / wall,
        "chunks_per_s": chunks / wall,
        "embed_s": embed_s,
        "outside_embedding_share": 1 - embed_s / wall,
        "index_bytes_per_chunk": index_bytes / chunks,
        "index_mb": index_bytes / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [one_build(args.corpus) for _ in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"corpus            {args.corpus}")
    print(f"runs              {len(runs)} (medians below)")
    print(f"documents         {med['documents']:.0f}")
    print(f"chunks            {med['chunks']:.0f}")
    walls = ", ".join(f"{r['wall_s']:.2f}" for r in runs)
    print(f"wall time         {med['wall_s']:.2f} s   (all runs: {walls})")
    print(f"documents/s       {med['docs_per_s']:.0f}")
    print(f"chunks/s          {med['chunks_per_s']:.0f}")
    print(f"embedding time    {med['embed_s']:.2f} s")
    print(f"outside embedding {med['outside_embedding_share']:.0%} of wall time")
    print(f"index size        {med['index_mb']:.2f} MB, {med['index_bytes_per_chunk']:.0f} bytes/chunk")
    print(f"peak RSS          {peak_rss_mb:.0f} MiB (process, all runs)")


if __name__ == "__main__":
    main()
