#!/usr/bin/env python3
"""Sharded collections: what a shard count costs and saves on one large collection.

    .venv/bin/python bench/shards.py [--content DIR] [--shards N ...] [--repeat N] [--workers N]

The content folder (default: the Hugo docs corpus, ~1,000 files) is copied in as one
collection, `docs`, and built with the hashing embedder, unsharded and with each shard
count, in a fresh output folder per build. Per shard count, medians of:

- ``full``: a forced build (``rag build --force``'s runs: one range run over every shard);
- ``rejoin``: publishing's rejoin of the shards' records (in-process, no Dagster);
- ``edit``: after a one-file edit, one ``update_collection`` run over the partition
  holding the file (what the change sensor requests): the collection unsharded, one shard sharded;
- ``parallel``: with ``--workers N``, the shards indexed by N processes at once (each one
  ``index_collection`` run over its share of the shards, as N workers would), then one publish
  run in this process; process start-up (importing Dagster, ~3-5 s) is included.

Also checks that each sharded build publishes the same index as the unsharded one, and that
the shards built in parallel publish the same index as the sequential build after its edit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from rag_assets.config import RagConfig, load_config  # noqa: E402
from rag_assets.defs.assembly import build_definitions  # noqa: E402
from rag_assets.defs.jobs import INDEX_COLLECTION_JOB, PUBLISH_JOB, UPDATE_COLLECTION_JOB  # noqa: E402
from rag_assets.defs.partitions import sync_partitions  # noqa: E402
from rag_assets.defs.runner import QUIET_RUN_CONFIG, partition_args, run_build  # noqa: E402
from rag_assets.index.index_json import read_index  # noqa: E402
from rag_assets.index.rejoin import rejoin_collections  # noqa: E402
from rag_assets.ingest.shards import Shard, collection_shards, shard_index  # noqa: E402

HUGO_DOCS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"


def config(content: Path, out: Path, shards: int) -> RagConfig:
    cfg = load_config(None, content_dir=content, output_dir=out, embedder="hashing", environ={})
    return dataclasses.replace(cfg, vaults=(), collection_shards={"docs": shards} if shards > 1 else {})


def execute(cfg: RagConfig, instance: dg.DagsterInstance, job: str, keys: list[str]) -> None:
    args = partition_args(keys, {}) if keys else {}
    result = (
        build_definitions(cfg)
        .resolve_job_def(job)
        .execute_in_process(instance=instance, raise_on_error=False, run_config=QUIET_RUN_CONFIG, **args)
    )
    if not result.success:
        raise SystemExit(f"{job} {keys} failed")


def rejoin_seconds(cfg: RagConfig) -> float:
    folder = cfg.intermediate_dir / "embeddings"
    records = {
        p.name: pickle.loads(p.read_bytes()) for p in folder.iterdir() if p.suffix != ".json"
    }  # facts files aside
    t0 = time.perf_counter()
    rejoin_collections(cfg, records)
    return time.perf_counter() - t0


def edit_one_file(content: Path, trial: int) -> tuple[str, str]:
    """(collection, path in it) of the file appended to: the largest Markdown file's neighbour."""
    files = sorted(p for p in content.rglob("*.md"))
    path = files[len(files) // 2 + trial]
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"\n\nAn edit for the benchmark, trial {trial}.\n")
    rel = path.relative_to(content).as_posix()
    collection, inside = rel.split("/", 1)
    return collection, inside


def parallel_seconds(cfg: RagConfig, workers: int, cfg_file: Path) -> float:
    """The shards indexed by ``workers`` processes at once, then one publish run."""
    keys = [s.key for name in sorted(cfg.collection_shards) for s in collection_shards(cfg, name)]
    size = -(-len(keys) // workers)
    shares = [keys[i : i + size] for i in range(0, len(keys), size)]  # contiguous: one range run each
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, __file__, "--worker", str(cfg_file), *share]) for share in shares if share
    ]
    if any(p.wait() for p in procs):
        raise SystemExit("a worker failed")
    with dg.DagsterInstance.ephemeral() as instance:
        sync_partitions(instance, cfg)
        execute(cfg, instance, PUBLISH_JOB, [])
    return time.perf_counter() - t0


def worker(cfg_file: Path, keys: list[str]) -> None:
    """One worker: one index_collection run over its share of the shards (a contiguous range)."""
    from rag_assets.config import CONFIG_ADAPTER

    cfg = CONFIG_ADAPTER.validate_json(cfg_file.read_text())
    with dg.DagsterInstance.ephemeral() as instance:
        sync_partitions(instance, cfg)
        execute(cfg, instance, INDEX_COLLECTION_JOB, keys)


def bench(content_src: Path, shards: int, repeat: int, workers: int) -> dict[str, float]:
    from rag_assets.config import CONFIG_ADAPTER

    figures: dict[str, list[float]] = {"full": [], "rejoin": [], "edit": [], "parallel": []}
    index_bytes = b""
    for trial in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-shards-") as tmp:
            content = Path(tmp) / "content"
            shutil.copytree(content_src, content / "docs")
            cfg = config(content, Path(tmp) / "out", shards)
            with dg.DagsterInstance.ephemeral() as instance:
                t0 = time.perf_counter()
                outcome = run_build(cfg, instance, full=True)
                figures["full"].append(time.perf_counter() - t0)
                if not outcome.success:
                    raise SystemExit(outcome.error)
                index_bytes = json.dumps(read_index(cfg.index_path)["chunks"]).encode()
                figures["rejoin"].append(rejoin_seconds(cfg))
                collection, inside = edit_one_file(content, trial)
                count = cfg.shard_count(collection)
                key = Shard(collection, shard_index(inside, count), count).key
                t0 = time.perf_counter()
                execute(cfg, instance, UPDATE_COLLECTION_JOB, [key])
                figures["edit"].append(time.perf_counter() - t0)
                edited_chunks = read_index(cfg.index_path)["chunks"]
            if workers and shards > 1:
                out = Path(tmp) / "parallel"
                pcfg = dataclasses.replace(cfg, output_dir=out)
                cfg_file = Path(tmp) / "cfg.json"
                cfg_file.write_bytes(CONFIG_ADAPTER.dump_json(pcfg))
                figures["parallel"].append(parallel_seconds(pcfg, workers, cfg_file))
                # Built from the edited content, as the sequential index after its edit run.
                if read_index(pcfg.index_path)["chunks"] != edited_chunks:
                    raise SystemExit("the shards built in parallel published a different index")
    medians = {k: statistics.median(v) for k, v in figures.items() if v}
    medians["index_digest"] = hash(index_bytes)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--content", type=Path, default=HUGO_DOCS)
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), args.worker[1:])
        return
    files = sum(1 for p in args.content.rglob("*") if p.is_file())
    print(f"{args.content}: {files} files; medians of {args.repeat}")
    print(
        f"{'shards':>6} {'full build s':>13} {'rejoin s':>9} {'one-file edit run s':>20} {'parallel s':>11}  same index"
    )
    reference = None
    for shards in args.shards:
        m = bench(args.content, shards, args.repeat, args.workers)
        reference = reference if reference is not None else m["index_digest"]
        parallel = f"{m['parallel']:.2f}" if "parallel" in m else "-"
        print(
            f"{shards:>6} {m['full']:>13.2f} {m['rejoin']:>9.3f} {m['edit']:>20.2f} {parallel:>11}  "
            f"{'yes' if m['index_digest'] == reference else 'NO'}",
            flush=True,
        )


if __name__ == "__main__":
    main()
