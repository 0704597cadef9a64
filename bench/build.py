#!/usr/bin/env python3
"""Forced builds with and without a persistent Dagster instance; prints medians.

    .venv/bin/python bench/build.py [--corpus NAME=DIR ...] [--repeat N] [--instance NAME=YAML ...]
                                    [--pooled-instance NAME=YAML ...]

For each corpus (default: the sample content with the project's rag.yaml, vaults
included, and the Hugo docs corpus), runs the same in-process Dagster jobs as
`rag build --force` with the hashing embedder and a fresh output folder per build,
once with an ephemeral instance (no DAGSTER_HOME) and once with a persistent one
(a temporary DAGSTER_HOME holding the project's dagster.yaml, kept across the builds
as a real one is). The modes alternate, after one untimed warm-up build each.
``--instance NAME=YAML`` adds a persistent mode with another dagster.yaml (e.g. the one of
another branch, or dagster.postgres.yaml), timed in the same alternation.
``--pooled-instance NAME=YAML`` does the same and then gives the instance's Postgres storage
a connection pool, as dagster-webserver does for its own process
(``DagsterInstance.optimize_for_webserver``, not a public API): without it dagster-postgres
opens a new server connection for every query. Reports per corpus and mode: median wall
time, runs and stored events per build, documents/s, chunks/s, embedding time, and each
persistent mode's ratio to the ephemeral one; the stored events of one persistent build by
type; then peak RSS.
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from rag_assets.config import load_config  # noqa: E402
from rag_assets.defs.runner import run_build  # noqa: E402

HUGO_DOCS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"


def stored_events(instance: dg.DagsterInstance, run_ids: list[str]) -> Counter:
    """Event types of the runs' stored events (``LOG`` for context.log lines)."""
    kinds: Counter = Counter()
    for run_id in run_ids:
        for record in instance.get_records_for_run(run_id, limit=1_000_000).records:
            event = record.event_log_entry.dagster_event
            kinds[event.event_type_value if event else "LOG"] += 1
    return kinds


def one_build(content: Path | None, instance: dg.DagsterInstance) -> dict[str, float]:
    """A forced build into a fresh output folder; ``content=None`` is the sample with rag.yaml."""
    with tempfile.TemporaryDirectory() as out:
        if content is None:
            cfg = load_config(ROOT / "rag.yaml", output_dir=out, embedder="hashing", environ={})
        else:
            cfg = load_config(None, content_dir=content, output_dir=out, embedder="hashing", environ={})
            cfg = dataclasses.replace(cfg, vaults=())  # not the vaults of a rag.yaml in the working folder
        runs_before = set(instance.get_run_ids())
        t0 = time.perf_counter()
        outcome = run_build(cfg, instance, full=True)
        wall = time.perf_counter() - t0
        if not outcome.success:
            raise SystemExit(f"build failed: {outcome.error or outcome.failed_checks}")
        docs = sum(c.metadata["parsed_documents"]["documents"] for c in outcome.collections)
        chunks = sum(c.metadata["chunks"]["chunks"] for c in outcome.collections)
        embed_s = sum(c.metadata["embeddings"]["embedding_seconds"] for c in outcome.collections)
        runs = [run_id for run_id in instance.get_run_ids() if run_id not in runs_before]
        kinds = stored_events(instance, runs)
        return {
            "wall_s": wall,
            "runs": len(runs),
            "events": sum(kinds.values()),
            "kinds": kinds,
            "documents": docs,
            "chunks": chunks,
            "docs_per_s": docs / wall,
            "chunks_per_s": chunks / wall,
            "embed_s": embed_s,
            "index_mb": cfg.index_path.stat().st_size / 1e6,
        }


def bench_corpus(
    content: Path | None, repeat: int, configs: dict[str, Path], pooled: frozenset[str] = frozenset()
) -> dict[str, list[dict]]:
    """Builds per mode: ``ephemeral``, then one persistent instance per dagster.yaml in ``configs``
    (those named in ``pooled`` with a pool of storage connections)."""
    results: dict[str, list[dict]] = {mode: [] for mode in ("ephemeral", *configs)}
    with ExitStack() as stack:
        instances = {"ephemeral": stack.enter_context(dg.DagsterInstance.ephemeral())}
        for mode, config in configs.items():
            home = stack.enter_context(tempfile.TemporaryDirectory(prefix="dagster_home_"))
            (Path(home) / "dagster.yaml").write_text(config.read_text())
            instances[mode] = stack.enter_context(dg.DagsterInstance.from_config(home))
            if mode in pooled:  # dagster-webserver's defaults: 15 s statement timeout, 1 h recycle, 20 overflow
                instances[mode].optimize_for_webserver(statement_timeout=15_000, pool_recycle=3600, max_overflow=20)
        for mode in results:  # warm-up: imports, the instance's database schemas
            one_build(content, instances[mode])
        for _ in range(repeat):
            for mode in results:
                results[mode].append(one_build(content, instances[mode]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", metavar="NAME=DIR", help="a content folder (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--instance", action="append", default=[], metavar="NAME=YAML", help="another persistent mode (repeatable)"
    )
    parser.add_argument(
        "--pooled-instance",
        action="append",
        default=[],
        metavar="NAME=YAML",
        help="another persistent mode, its Postgres storage with a connection pool (repeatable)",
    )
    args = parser.parse_args()
    configs = {"persistent": ROOT / "dagster.yaml"}
    configs.update({name: Path(path) for name, path in (i.split("=", 1) for i in args.instance)})
    pooled = {name: Path(path) for name, path in (i.split("=", 1) for i in args.pooled_instance)}
    configs.update(pooled)
    corpora: dict[str, Path | None] = {"sample": None}
    if HUGO_DOCS.is_dir():
        corpora["hugo-docs"] = HUGO_DOCS
    if args.corpus:
        corpora = {name: Path(folder) for name, folder in (c.split("=", 1) for c in args.corpus)}
    width = max(11, *(len(mode) for mode in configs))
    print(
        f"{'corpus':<10} {'instance':<{width}} {'wall s':>7} {'runs':>5} {'events':>6} {'docs':>6} {'chunks':>7} "
        f"{'docs/s':>7} {'chunks/s':>8} {'embed s':>7}  all wall times"
    )
    for name, content in corpora.items():
        results = bench_corpus(content, args.repeat, configs, frozenset(pooled))
        medians = {}
        for mode, builds in results.items():
            med = {k: statistics.median(b[k] for b in builds) for k in builds[0] if k != "kinds"}
            medians[mode] = med
            walls = ", ".join(f"{b['wall_s']:.2f}" for b in builds)
            print(
                f"{name:<10} {mode:<{width}} {med['wall_s']:7.2f} {med['runs']:5.0f} {med['events']:6.0f} "
                f"{med['documents']:6.0f} {med['chunks']:7.0f} {med['docs_per_s']:7.0f} {med['chunks_per_s']:8.0f} "
                f"{med['embed_s']:7.2f}  {walls}"
            )
        for mode in configs:
            ratio = medians[mode]["wall_s"] / medians["ephemeral"]["wall_s"]
            print(f"{name:<10} {mode} / ephemeral: {ratio:.2f}x")
        kinds = results["persistent"][-1]["kinds"]
        print(
            f"{name:<10} stored events of one persistent build: "
            + ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())
        )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (process, all builds)")


if __name__ == "__main__":
    main()
