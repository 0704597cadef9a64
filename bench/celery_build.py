"""Build throughput on Celery workers: `rag build --executor celery` with 1 and with 2 workers.

Each build gets a fresh PostgreSQL database for its Dagster instance, a queue of its own on
RabbitMQ (127.0.0.1:5672) and freshly started workers (dagster-celery's CLI, `--pool solo`),
exactly as rag_assets_tests/test_distributed.py runs them; the time is the `rag build`
subprocess's wall time, workers already up. Needs the postgres and distributed extras.

    .venv/bin/python bench/celery_build.py --content ../shared/corpora/hugo-docs/content --workers 1 2 --repeat 3

Call :func:`celery_build` from another benchmark for one timed build.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from rag_assets_tests.celery_workers import celery_cluster  # noqa: E402

# The processes of a distributed build, told apart by their command lines.
# First match wins: the build's own command line names --celery-config.
ROLES = (
    ("build", "rag_assets.serve.cli"),
    ("run", "multiprocessing"),
    ("worker", "celery"),
    ("postgres", "postgres: "),
)


class MemorySampler(threading.Thread):
    """Samples every process's RSS (Linux /proc) once a second: the peak of the largest process
    of each role (ROLES), and the peak of the machine's used memory (MemTotal - MemAvailable)."""

    def __init__(self, interval: float = 1.0):
        super().__init__(daemon=True)
        self.interval = interval
        self.peaks: dict[str, float] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                rss = next(
                    int(line.split()[1])
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("VmRSS")
                )
            except (OSError, StopIteration):
                continue  # gone, or a kernel thread
            role = next((name for name, marker in ROLES if marker in cmdline), None)
            if role:
                self.peaks[f"{role}_mb"] = max(self.peaks.get(f"{role}_mb", 0.0), rss / 1024)
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        used = (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) / 1024
        self.peaks["machine_used_mb"] = max(self.peaks.get("machine_used_mb", 0.0), used)

    def __enter__(self) -> MemorySampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        self.join()


def celery_build(
    content: Path,
    workers: int,
    partitions_per_run: int = 1,
    parallel_runs: int | None = None,
    config: Path | None = None,
    count_chunks=None,
    report: dict | None = None,
):
    """Seconds of one forced `rag build --executor celery` of ``content`` on ``workers`` fresh workers
    (``config``: a rag.yaml, e.g. one that shards the collection); with ``count_chunks`` (a
    function of the output folder), (seconds, what it returns for the build's output). Into
    ``report`` (a dict): the peak RSS of each kind of process (MemorySampler) and the time
    `rag build` prints for the build itself (``built_in_s``), without its closing summary."""
    with tempfile.TemporaryDirectory(prefix="rag-celery-bench-") as folder:
        with celery_cluster(Path(folder)) as cluster:
            cluster.start_workers(*[f"bench{i}" for i in range(workers)])
            extra = ["--partitions-per-run", str(partitions_per_run), *(["--config", str(config)] if config else [])]
            if parallel_runs:
                extra += ["--parallel-runs", str(parallel_runs)]
            with MemorySampler() as sampler:
                started = time.perf_counter()
                done = cluster.rag(*cluster.build_args(content, Path(folder) / "out", *extra), timeout=4 * 3600)
                seconds = time.perf_counter() - started
            if report is not None:
                report.update(sampler.peaks)
                # `rag build` prints "Built in N s" before its closing summary; the wall time has both.
                built = re.search(r"^Built in ([0-9.]+)s$", done.stdout, re.MULTILINE)
                report["built_in_s"] = float(built.group(1)) if built else None
            if done.returncode != 0:
                raise RuntimeError(f"the build failed:\n{done.stderr[-3000:]}")
            return (seconds, count_chunks(Path(folder) / "out")) if count_chunks else seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--content", type=Path, default=ROOT / "content")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions-per-run", type=int, default=1)
    parser.add_argument("--parallel-runs", type=int, default=None)
    args = parser.parse_args()
    medians = {}
    for count in args.workers:
        times = [
            celery_build(args.content, count, args.partitions_per_run, args.parallel_runs) for _ in range(args.repeat)
        ]
        medians[count] = statistics.median(times)
        print(f"{count} worker(s): median {medians[count]:.1f} s of {', '.join(f'{t:.1f}' for t in times)}", flush=True)
    if 1 in medians:
        for count, median in medians.items():
            if count != 1:
                print(f"speed-up with {count} workers: {medians[1] / median:.2f}x")


if __name__ == "__main__":
    main()
