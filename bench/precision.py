#!/usr/bin/env python3
"""How compact can the public index's vectors be? Bytes per chunk and top-10 stability per encoding.

    .venv/bin/python bench/precision.py [--corpus DIR] [--queries 500] [--dimension 1536] [--decimals]
                                        [--embedder hashing|local]

Builds the corpus with the hashing embedder at ``--dimension`` (1536 by default: the size of
OpenAI's text-embedding-3-small, where the index's size matters most), then for each
``public_index.vector_encoding`` (float: rounded to 5 decimals; float16; int16 and int8
with a per-vector scale; rag_assets/index/vector_codec.py; int16-bin: int16 in the binary
file beside the index, rag_assets/index/vector_file.py) decodes the vectors as a reader would
and compares the vector-search top-10 of N queries (document titles: short natural-language
queries) against the store's float32 vectors. Prints, per encoding:

- top-10 unchanged: same chunks in the same order, counting chunks whose float32 scores tie
  (within 1e-7) as equal; same IDs: the strict comparison;
- the bytes of a chunk in ``embeddings-index.json`` (its text, metadata and vector, as
  published; for int16-bin plus its row of ``embeddings-vectors.bin``) and of its vector
  alone, uncompressed and gzip-compressed (the whole index and vector file);
- a full chunk: the median and the largest bytes of the chunks of at least 95% of
  ``chunking.target_words`` words (400: what a long page's chunks are), uncompressed;
- a full chunk of prose: 400 and 450 words (400 new words and the 50 the chunker repeats from
  the chunk before) of the SciFact abstracts with a page's usual metadata, and a dense unit
  vector (a sentence model's), in each encoding.

``--embedder local`` builds with the local all-MiniLM-L6-v2 model instead (384 dense
dimensions; ``--dimension`` does not apply): a real sentence model, where neighbours are
spread as in practice, against the hashing vectors' many near-ties. ``--decimals`` also lists the float encoding at 2-6 decimals and full float32 (how the
default of 5 was chosen).
"""

from __future__ import annotations

import argparse
import gzip
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402

from rag_assets.config import load_config  # noqa: E402
from rag_assets.defs.runner import run_build  # noqa: E402
from rag_assets.embed.selection import query_embedder  # noqa: E402
from rag_assets.index.index_json import read_index  # noqa: E402
from rag_assets.index.vector_codec import FILE_ENCODINGS, decode_chunk, encode_rows  # noqa: E402
from rag_assets.index.vector_file import parse_vector_file, render_vector_file  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"
PROSE = ROOT.parent / "shared" / "corpora" / "beir-scifact" / "corpus.jsonl"


def top10(matrix: np.ndarray, queries: np.ndarray) -> np.ndarray:
    scores = queries @ matrix.T
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def build(corpus: Path, out: Path, dimension: int, embedder: str):
    """Build ``corpus`` (hashing at ``dimension``, or the local model); (config, store vectors by
    ID, titles, the query embedder)."""
    config = out / "rag.yaml"
    config.write_text(
        f"content_dir: {corpus}\noutput_dir: {out}\n"
        f"embedder: {{name: {embedder}, hashing: {{dimension: {dimension}}}}}\n"
    )
    cfg = load_config(config, environ={})
    outcome = run_build(cfg, dg.DagsterInstance.ephemeral())
    assert outcome.success, outcome.error
    with sqlite3.connect(cfg.public_store_path) as conn:
        vectors = {
            i: np.frombuffer(blob, dtype=np.float32) for i, blob in conn.execute("SELECT id, embedding FROM chunks")
        }
        titles = [r[0] for r in conn.execute("SELECT title FROM documents WHERE title != '' ORDER BY id")]
        provider, model, dim = conn.execute("SELECT provider, model, dimension FROM embeddings_meta").fetchone()
    return cfg, vectors, titles, query_embedder(provider, model, dim, cfg.embedding)


def measure(
    chunks: list[dict], full: np.ndarray, queries: np.ndarray, encoding: str, decimals: int | None, full_words: int
):
    """(unchanged, same IDs, largest swap gap, bytes per chunk, vector bytes per chunk, gzip bytes per
    chunk, median and largest bytes of a full chunk)."""
    if decimals is None:  # full float32: orjson prints each with its shortest float32 repr
        fields = [{"embedding": [float(x) for x in row]} for row in full]
    else:
        fields = encode_rows(full, encoding, decimals)
    published = [{"id": c["id"], "text": c["text"], **f, "metadata": c["metadata"]} for c, f in zip(chunks, fields)]
    vector_file = render_vector_file(full, "bench") if encoding in FILE_ENCODINGS else b""
    if vector_file:
        decoded = parse_vector_file(vector_file).matrix()
        row_bytes = 4 + 2 * full.shape[1]  # a scale and the steps: the file's bytes for one chunk
    else:
        decoded = np.vstack([decode_chunk(p, encoding) for p in published]).astype(np.float32)
        row_bytes = 0
    reference = top10(full, queries)
    got = top10(decoded, queries)
    full_scores = queries @ full.T
    unchanged = float(
        np.mean(
            [
                np.allclose(full_scores[i, g], full_scores[i, r], atol=1e-7, rtol=0)
                for i, (g, r) in enumerate(zip(got, reference))
            ]
        )
    )
    same_ids = float(np.mean([np.array_equal(a, b) for a, b in zip(got, reference)]))
    gaps = [
        float(np.max(np.abs(full_scores[i, g] - full_scores[i, r])))
        for i, (g, r) in enumerate(zip(got, reference))
        if not np.array_equal(g, r)
    ]
    body = orjson.dumps({"chunks": published})
    per_chunk = (len(body) + len(vector_file)) / len(published)
    vector = row_bytes or sum(len(orjson.dumps(f)) for f in fields) / len(fields)
    zipped = (len(gzip.compress(body, 6)) + (len(gzip.compress(vector_file, 6)) if vector_file else 0)) / len(published)
    # A chunk's own bytes: its JSON object and comma, and its row of the vector file.
    sizes = [
        len(orjson.dumps(p)) + 1 + row_bytes
        for p, c in zip(published, chunks)
        if c["metadata"]["wordCount"] >= full_words
    ]
    return unchanged, same_ids, max(gaps, default=0.0), per_chunk, vector, zipped, float(np.median(sizes)), max(sizes)


def prose_chunk_bytes(dimension: int, words: int) -> dict[str, int]:
    """Encoding -> the bytes of one chunk of ``words`` words of prose (SciFact abstracts), as
    published: its JSON object and comma, and for int16-bin its row of the vector file."""
    texts = (orjson.loads(line)["text"] for line in PROSE.read_text().splitlines() if line.strip())
    pool: list[str] = []
    for text in texts:
        pool.extend(text.split())
        if len(pool) >= words:
            break
    chunk = {
        "id": "posts/diffusion-imaging-of-newborn-white-matter/chunk-1",
        "text": " ".join(pool[:words]),
        "metadata": {
            "collection": "posts",
            "slug": "diffusion-imaging-of-newborn-white-matter",
            "title": "Diffusion imaging of newborn white matter",
            "chunkIndex": 1,
            "totalChunks": 3,
            "headingPath": ["Results"],
            "wordCount": words,
            "tags": ["imaging", "neurology"],
        },
    }
    vector = np.random.default_rng(3).normal(size=(1, dimension)).astype(np.float32)
    vector /= np.linalg.norm(vector)
    out = {}
    for encoding in ("float", "float16", "int16", "int8", "int16-bin"):
        fields = encode_rows(vector, encoding, 5)[0]
        row = 4 + 2 * dimension if encoding in FILE_ENCODINGS else 0
        out[encoding] = len(orjson.dumps({**chunk, **fields})) + 1 + row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--dimension", type=int, default=1536)
    parser.add_argument("--embedder", choices=("hashing", "local"), default="hashing")
    parser.add_argument(
        "--decimals", action="store_true", help="also the float encoding at 2-6 decimals and full float32"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        cfg, vectors, titles, embedder = build(args.corpus, Path(out), args.dimension, args.embedder)
        chunks = read_index(cfg.index_path)["chunks"]
    full = np.vstack([vectors[c["id"]] for c in chunks])
    queries_text = titles[: args.queries]
    queries = np.vstack([np.asarray(embedder.embed_query(q), dtype=np.float32) for q in queries_text])
    print(
        f"corpus {args.corpus.name}: {len(chunks)} chunks, {embedder.model} at {full.shape[1]} dimensions, "
        f"{len(queries_text)} queries (document titles)"
    )
    print("unchanged = same chunks in the same order against float32, chunks whose float32 scores tie counted as equal")
    full_words = int(0.95 * cfg.chunking.target_words)
    count = sum(c["metadata"]["wordCount"] >= full_words for c in chunks)
    print(f"full chunk = at least {full_words} words ({count} chunks)")
    header = (
        f"{'encoding':>14} {'top-10 unchanged':>17} {'same IDs':>9} {'largest swap gap':>17} {'bytes/chunk':>12} "
        f"{'vector bytes':>13} {'gzip bytes/chunk':>17} {'full chunk median':>18} {'full chunk max':>15}"
    )
    print(header)
    rows = [
        ("float (5 dp)", "float", 5),
        ("float16", "float16", 5),
        ("int16", "int16", 5),
        ("int8", "int8", 5),
        ("int16-bin", "int16-bin", 5),
    ]
    if args.decimals:
        rows = [(f"float ({d} dp)", "float", d) for d in (2, 3, 4, 5, 6)] + [("float32", "float", None)] + rows[1:]
    for label, encoding, decimals in rows:
        unchanged, same, gap, per_chunk, vector, zipped, median, largest = measure(
            chunks, full, queries, encoding, decimals, full_words
        )
        print(
            f"{label:>14} {unchanged:>17.3f} {same:>9.3f} {gap:>17.1e} {per_chunk:>12.0f} {vector:>13.0f} {zipped:>17.0f} "
            f"{median:>18.0f} {largest:>15}"
        )
    if PROSE.is_file():
        for words in (400, 450):
            sizes = prose_chunk_bytes(full.shape[1], words)
            print(
                f"a {words}-word chunk of prose, dense vector: " + ", ".join(f"{e} {b:,} B" for e, b in sizes.items())
            )


if __name__ == "__main__":
    main()
