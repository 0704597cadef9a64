#!/usr/bin/env python3
"""How many decimals must the JSON index keep per vector component?

    .venv/bin/python bench/precision.py [--corpus DIR] [--queries N]

Builds the corpus (hashing embedder), then for each rounding precision compares
the top-10 vector-search results of N queries (document titles and
descriptions: short natural-language queries) against full float32 vectors,
and prints the share of queries whose top-10 is unchanged (same IDs in the same
order) and the index size per chunk.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from pathlib import Path

import dagster as dg
import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
# This folder holds secrets.py (the detector bench), which would shadow the standard
# library module torch and others import; keep the folder off the front of the path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from rag_assets.config import load_config  # noqa: E402
from rag_assets.defs.runner import run_build  # noqa: E402
from rag_assets.embed import create_embedder  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"


def top10(matrix: np.ndarray, queries: np.ndarray) -> np.ndarray:
    scores = queries @ matrix.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--queries", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(None, content_dir=args.corpus, output_dir=out, embedder="hashing", environ={})
        instance = dg.DagsterInstance.ephemeral()
        outcome = run_build(cfg, instance)
        assert outcome.success, outcome.error
        with sqlite3.connect(cfg.public_store_path) as conn:
            rows = conn.execute("SELECT embedding FROM chunks ORDER BY rowid").fetchall()
            titles = [r[0] for r in conn.execute("SELECT title FROM documents WHERE title != '' ORDER BY id")]
        index = orjson.loads(cfg.index_path.read_bytes())
    full = np.vstack([np.frombuffer(r[0], dtype=np.float32) for r in rows])
    queries_text = titles[: args.queries]
    embedder = create_embedder("hashing")
    queries = np.vstack([embedder.embed_query(q) for q in queries_text])
    reference = top10(full, queries)
    full_scores = queries @ full.T
    chunks = index["chunks"]
    print(f"corpus {args.corpus.name}: {len(chunks)} chunks, {len(queries_text)} queries (document titles)")
    print("unchanged = same IDs in the same order, counting chunks whose float32 scores tie exactly as equal")
    print(f"{'decimals':>8} {'top-10 unchanged':>17} {'same IDs':>9} {'largest swap gap':>17} {'vector bytes/chunk':>19} {'index MB':>9}")
    text_meta = sum(len(orjson.dumps({k: c[k] for k in ("id", "text", "metadata")})) for c in chunks) / len(chunks)
    for decimals in (2, 3, 4, 5, 6, None):
        vectors = full.astype(np.float64) if decimals is None else np.round(full.astype(np.float64), decimals)
        if decimals is None:
            vectors = full  # orjson prints float32 values with their shortest float32 repr
        got = top10(vectors.astype(np.float32), queries)
        unchanged = float(np.mean([
            np.allclose(full_scores[i, g], full_scores[i, r], atol=1e-7, rtol=0)
            for i, (g, r) in enumerate(zip(got, reference))
        ]))
        gaps = [
            float(np.max(np.abs(full_scores[i, g] - full_scores[i, r])))
            for i, (g, r) in enumerate(zip(got, reference))
            if not np.array_equal(g, r)
        ]
        same_ids = float(np.mean([np.array_equal(a, b) for a, b in zip(got, reference)]))
        vec_bytes = sum(len(orjson.dumps(v.tolist() if decimals is not None else [float(x) for x in v])) for v in vectors) / len(vectors)
        label = "float32" if decimals is None else str(decimals)
        print(f"{label:>8} {unchanged:>17.3f} {same_ids:>9.3f} {max(gaps, default=0.0):>17.1e} {vec_bytes:>19.0f} {(vec_bytes + text_meta) * len(chunks) / 1e6:>9.2f}")


if __name__ == "__main__":
    main()
