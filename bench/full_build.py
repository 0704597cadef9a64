#!/usr/bin/env python3
"""Full-build throughput: a forced `rag build` of a generated corpus, in CPU seconds and wall time.

    .venv/bin/python bench/full_build.py [--chunks 15000] [--shards 4] [--repeat 1]
                                         [--cache-dir DIR] [--profile FILE.prof] [--top 25] [--steps]
                                         [--baseline CHECKOUT]

The corpus is ``bench/scale.py``'s build corpus (``write_build_corpus``: files of five
~380-word sections drawn from the Hugo docs, one collection ``c0`` split into --shards
shards), cached under --cache-dir. Each repetition is a ``rag build --force`` process with
the hashing embedder into a fresh output folder and a persistent DAGSTER_HOME (as a real
install has), timed by wall clock and by the CPU seconds (user + system) of the process
and its children (``os.wait4``), so the machine's load moves the figure little.
Prints chunks/s on the wall clock and chunks per CPU second, with the load average.

``--profile FILE``: one more build, in-process (``rag_assets.serve.cli.main`` under
cProfile), its stats written to FILE and the top --top functions by cumulative and by
own time printed. ``--baseline DIR``: each repetition also builds with another checkout's
rag_assets (e.g. main's), alternating, so that the machine's load falls on both alike.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import importlib.util
import io
import itertools
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/ leaves the path before any library import (a bench module must never shadow a library's).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))


@functools.cache
def scale_bench():
    """bench/scale.py, imported by path once (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_argv(content: Path, config: Path, output: Path) -> list[str]:
    return [
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


def timed_build(
    content: Path, config: Path, output: Path, dagster_home: Path, checkout: Path = ROOT
) -> tuple[float, float]:
    """(wall s, CPU s of the process tree) of one forced build as a process, with ``checkout``'s
    rag_assets: the process's, and its worker processes' (rag_assets/base/work_pool.py) through
    their forkserver, left to this process when the build ends (see main's become_subreaper)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_")}
    env |= {"DAGSTER_HOME": str(dagster_home), "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "rag_assets.serve.cli", *build_argv(content, config, output)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=output, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    out = proc.stdout.read().decode() if proc.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"build failed:\n{out}")
    return wall, usage.ru_utime + usage.ru_stime + scale_bench().reap_orphans()


def step_seconds(dagster_home: Path) -> list[tuple[str, float]]:
    """(step, seconds) of the latest run in ``dagster_home``, from Dagster's own step stats."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(dagster_home)
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs(limit=1)
        if not runs:
            return []
        run = runs[0]
        stats = instance.get_run_stats(run.run_id)
        steps = [(s.step_key, (s.end_time or 0) - (s.start_time or 0)) for s in instance.get_run_step_stats(run.run_id)]
        return [("(run)", (stats.end_time or 0) - (stats.start_time or 0)), *steps]


def profiled_build(content: Path, config: Path, output: Path, dagster_home: Path, dest: Path, top: int) -> None:
    os.environ["DAGSTER_HOME"] = str(dagster_home)
    for key in [k for k in os.environ if k.startswith("RAG_")]:
        del os.environ[key]
    from rag_assets.serve import cli

    # Wall-clock timer: a CPU-time timer (time.process_time) is a system call per event, whose
    # own cost then inflates the functions making many calls several times over.
    profiler = cProfile.Profile()
    buffer = io.StringIO()
    cwd = os.getcwd()
    os.chdir(output)
    try:
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(buffer):
            profiler.enable()
            code = cli.main(build_argv(content, config, output))
            profiler.disable()
        wall = time.perf_counter() - t0
    finally:
        os.chdir(cwd)
    if code != 0:
        raise SystemExit(f"profiled build failed:\n{buffer.getvalue()}")
    profiler.dump_stats(dest)
    print(f"\nprofiled in-process build: {wall:.1f} s wall with cProfile, stats in {dest}")
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=15_000)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--cache-dir", type=Path, default=Path(tempfile.gettempdir()) / "rag-full-build")
    p.add_argument("--profile", type=Path, help="also profile one in-process build into this file")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--baseline", type=Path, help="another checkout (e.g. main's) built alternately with this one")
    p.add_argument("--steps", action="store_true", help="print each Dagster step's seconds after each build")
    args = p.parse_args()

    scale = scale_bench()
    scale.become_subreaper()
    folder = args.cache_dir / f"build-{args.chunks}"
    folder.mkdir(parents=True, exist_ok=True)
    content = scale.write_build_corpus(folder, args.chunks, collections=1)
    config = scale.build_config(folder, args.shards)
    with tempfile.TemporaryDirectory(prefix="rag-full-build-") as tmp:
        dagster_home = Path(tmp) / "dagster_home"
        dagster_home.mkdir()
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        checkouts = {"this checkout": ROOT} | ({f"baseline {args.baseline}": args.baseline} if args.baseline else {})
        for rep, (name, checkout) in itertools.product(range(args.repeat), checkouts.items()):
            home = dagster_home / name.replace(" ", "-").replace("/", "_")
            home.mkdir(exist_ok=True)
            output = Path(tmp) / f"out-{rep}"
            output.mkdir()
            wall, cpu = timed_build(content, config, output, home, checkout)
            chunks = scale.published_chunks(output)
            print(
                f"{name}, build {rep + 1}: {chunks:,} chunks, wall {wall:.2f} s ({chunks / wall:,.0f} chunks/s), "
                f"CPU {cpu:.2f} s ({chunks / cpu:,.0f} chunks per CPU s), "
                f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
                flush=True,
            )
            shutil.rmtree(output)
            if args.steps:
                print("  " + ", ".join(f"{step} {secs:.2f}" for step, secs in step_seconds(home)))
        if args.profile:
            output = Path(tmp) / "out-profile"
            output.mkdir()
            profiled_build(content, config, output, dagster_home, args.profile, args.top)


if __name__ == "__main__":
    main()
