"""The Celery build two ways: `rag build --executor celery` against Dagster's own run queue and backfill.

Same corpus, same fresh cluster each time (a PostgreSQL instance, a RabbitMQ queue of its own, two
workers started with dagster-celery's CLI, see rag_assets_tests/celery_workers.py):

- ``rag``: `rag build --executor celery` (defs/distributed.py: the build forks one process per
  partition run, ``--parallel-runs`` at a time, then starts the publish run itself);
- ``queue``: a code location holding the two Celery jobs, `dagster-daemon run` on it, a job
  backfill of ``index_collection_celery`` over every collection partition (`dagster job
  backfill`: one queued run per partition, which the daemon dequeues ``max_concurrent_runs`` at a
  time and launches as a process of its own through the code server), then ``publish_index_celery``
  launched into the same queue (`dagster job launch`) once every partition run succeeded.

The time of each is wall time from the first command to the published outputs, workers already up.
Both runs publish; the script checks that both published the same files (build-specific values aside).

    .venv/bin/python bench/celery_queue.py --content ../shared/corpora/hugo-docs/content --repeat 1
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from rag_assets_tests.celery_workers import BIN, CeleryCluster, celery_cluster  # noqa: E402
from rag_assets_tests.test_distributed import published_files  # noqa: E402

# The code location of the `queue` way: the project's definitions plus the two Celery jobs, whose
# executor carries celery.yaml's settings (a backfill takes no run config of its own).
LOCATION = """
import os
from pathlib import Path

import dagster as dg
import yaml
from dagster_celery import celery_executor
from rag_assets.config import load_config
from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.jobs import jobs_with_executor

@dg.definitions
def defs():
    execution = yaml.safe_load(Path(os.environ["RAG_CELERY_CONFIG"]).read_text())["execution"]["config"]
    execution["broker"] = os.environ["RAG_CELERY_BROKER"]
    jobs = jobs_with_executor("celery", celery_executor.configured(execution), "on a Celery worker")
    return dg.Definitions.merge(build_definitions(load_config()), dg.Definitions(jobs=jobs))
"""
TERMINAL = ("SUCCESS", "FAILURE", "CANCELED")
# Run lifecycle events, in order: where a run's time goes (queued, starting its process, running).
PHASES = (
    "PIPELINE_ENQUEUED",
    "PIPELINE_DEQUEUED",
    "PIPELINE_STARTING",
    "PIPELINE_START",
    "STEP_START",
    "PIPELINE_SUCCESS",
)
WORKERS = ("q1", "q2")


def write_site(folder: Path, content: Path, cluster: CeleryCluster, max_runs: int) -> Path:
    """rag.yaml, the code location and its workspace in ``folder``; the instance's run limit set to ``max_runs``."""
    (folder / "rag.yaml").write_text(
        f"content_dir: {content}\noutput_dir: {folder / 'out'}\nidentity_map: null\n"
        "embedder:\n  name: hashing\nprivate_tier:\n  embedder: hashing\n"
    )
    (folder / "celery_location.py").write_text(LOCATION)
    (folder / "workspace.yaml").write_text(
        yaml.safe_dump(
            {
                "load_from": [
                    {
                        "python_file": {
                            "relative_path": "celery_location.py",
                            "attribute": "defs",
                            "location_name": "celery",
                            "working_directory": str(folder),
                        }
                    }
                ]
            }
        )
    )
    home_yaml = Path(cluster.env["DAGSTER_HOME"]) / "dagster.yaml"
    instance_yaml = yaml.safe_load(home_yaml.read_text())
    instance_yaml["concurrency"]["runs"]["max_concurrent_runs"] = max_runs
    home_yaml.write_text(yaml.safe_dump(instance_yaml))
    cluster.env.update(RAG_CONFIG=str(folder / "rag.yaml"), RAG_CELERY_CONFIG=str(cluster.celery_yaml))
    return folder / "workspace.yaml"


def dagster(cluster: CeleryCluster, folder: Path, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "dagster"), *args], env=cluster.env, cwd=folder, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"dagster {' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def wait_for_runs(cluster: CeleryCluster, count: int, job: str, timeout: float = 3600) -> list:
    """The ``count`` runs of ``job`` once all are finished (polling the shared instance)."""
    import dagster as dg

    deadline = time.monotonic() + timeout
    with cluster.instance() as instance:
        while time.monotonic() < deadline:
            runs = instance.get_runs(filters=dg.RunsFilter(job_name=job))
            if len(runs) >= count and all(run.status.value in TERMINAL for run in runs):
                return runs
            time.sleep(0.5)
    raise TimeoutError(f"{job}: runs not finished after {timeout} s")


def short(event: str) -> str:
    """An event's name as the UI says it (runs were once pipelines)."""
    return event.removeprefix("PIPELINE_")


def run_phases(cluster: CeleryCluster) -> dict[str, str]:
    """Per job, the median seconds between consecutive lifecycle events of its runs (PHASES; the
    first STEP_START counts), and how many of its runs were in progress at once at most."""
    import dagster as dg

    summary: dict[str, str] = {}
    with cluster.instance() as instance:
        for job in ("index_collection_celery", "publish_index_celery"):
            gaps: dict[str, list[float]] = {}
            spans = []
            for run in instance.get_runs(filters=dg.RunsFilter(job_name=job)):
                seen: dict[str, float] = {}
                for entry in instance.all_logs(run.run_id):
                    kind = entry.dagster_event_type.value if entry.dagster_event_type else None
                    if kind in PHASES and kind not in seen:
                        seen[kind] = entry.timestamp
                present = [k for k in PHASES if k in seen]
                for a, b in zip(present, present[1:]):
                    gaps.setdefault(f"{short(a)}->{short(b)}", []).append(seen[b] - seen[a])
                if "PIPELINE_START" in seen and "PIPELINE_SUCCESS" in seen:
                    spans.append((seen["PIPELINE_START"], seen["PIPELINE_SUCCESS"]))
            most = max((sum(s <= t < e for s, e in spans) for t, _ in spans), default=0)
            phases = ", ".join(f"{k} {statistics.median(v):.1f}s" for k, v in gaps.items())
            summary[job] = f"{phases}; at most {most} at once"
    return summary


def wait_for_daemon(cluster: CeleryCluster, daemon: subprocess.Popen, timeout: float = 300) -> None:
    """Until the daemon's run queue beats in the shared instance: a deployment's daemon is already up."""
    deadline = time.monotonic() + timeout
    with cluster.instance() as instance:
        while "QUEUED_RUN_COORDINATOR" not in instance.get_daemon_heartbeats():
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dagster-daemon did not start: see daemon.log")
            time.sleep(0.5)


def first_enqueued(cluster: CeleryCluster, job: str) -> float:
    """When the first run of ``job`` entered the queue (epoch seconds, from the event log)."""
    import dagster as dg

    with cluster.instance() as instance:
        return min(
            entry.timestamp
            for run in instance.get_runs(filters=dg.RunsFilter(job_name=job))
            for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_ENQUEUED)
        )


def prepare(cluster: CeleryCluster, folder: Path) -> list[str]:
    """What `rag build` does before its runs: the partitions synced, the pools recorded. Returns the keys."""
    from rag_assets.config import load_config
    from rag_assets.defs.distributed import prepare_pools
    from rag_assets.defs.partitions import COLLECTIONS_PARTITION, sync_partitions

    cfg = load_config(folder / "rag.yaml", environ={})
    with cluster.instance() as instance:
        sync_partitions(instance, cfg)
        prepare_pools(instance)
        return list(instance.get_dynamic_partitions(COLLECTIONS_PARTITION))


def queue_build(content: Path, max_runs: int) -> tuple[float, dict[str, bytes], dict]:
    """Seconds of a build through the daemon's queue and a job backfill, its published files, run counts."""
    with tempfile.TemporaryDirectory(prefix="rag-celery-queue-") as name, celery_cluster(Path(name)) as cluster:
        folder = Path(name)
        workspace = write_site(folder, content, cluster, max_runs)
        cluster.start_workers(*WORKERS)
        daemon_log = (folder / "daemon.log").open("wb")
        daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)],
            env=cluster.env,
            cwd=folder,
            stdout=daemon_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            wait_for_daemon(cluster, daemon)
            started = time.perf_counter()
            keys = prepare(cluster, folder)
            dagster(
                cluster,
                folder,
                "job",
                "backfill",
                "-w",
                str(workspace),
                "-j",
                "index_collection_celery",
                "--all",
                "all",
                "--noprompt",
            )
            runs = wait_for_runs(cluster, len(keys), "index_collection_celery")
            indexed = time.perf_counter() - started
            if any(run.status.value != "SUCCESS" for run in runs):
                failed = [run.run_id for run in runs if run.status.value != "SUCCESS"]
                raise RuntimeError(f"partition runs failed: {', '.join(failed)}")
            dagster(
                cluster,
                folder,
                "job",
                "launch",
                "-w",
                str(workspace),
                "-j",
                "publish_index_celery",
                "--tags",
                '{"rag/build": "full"}',
            )  # as `rag build --force` tags it (the manifest says so)
            [publish] = wait_for_runs(cluster, 1, "publish_index_celery")
            seconds = time.perf_counter() - started
            queued = time.time() - first_enqueued(cluster, "index_collection_celery")
            if publish.status.value != "SUCCESS":
                raise RuntimeError(f"the publish run failed: {publish.run_id}")
            print(run_phases(cluster), flush=True)
            return (
                seconds,
                published_files(folder / "out"),
                {"runs": len(runs) + 1, "indexed_s": indexed, "queued_s": queued},
            )
        finally:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=30)


def rag_build(content: Path, parallel_runs: int) -> tuple[float, dict[str, bytes]]:
    """Seconds of `rag build --executor celery` on the same kind of cluster, and its published files."""
    with tempfile.TemporaryDirectory(prefix="rag-celery-rag-") as name, celery_cluster(Path(name)) as cluster:
        folder = Path(name)
        cluster.start_workers(*WORKERS)
        started = time.perf_counter()
        done = cluster.rag(
            *cluster.build_args(content, folder / "out", "--parallel-runs", str(parallel_runs)), timeout=3600
        )
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"rag build failed:\n{done.stderr[-3000:]}")
        print(run_phases(cluster), flush=True)
        return seconds, published_files(folder / "out")


def describe_difference(name: str, a: bytes, b: bytes) -> str:
    """What differs between two versions of a published file: the JSON keys, or the SQLite rows' columns."""
    if name.endswith(".json"):
        return f"keys {sorted(json_differences(json.loads(a), json.loads(b)))}"
    if name.endswith(".db"):
        return f"columns {sorted(sqlite_differences(a, b))}"
    return "bytes"


def json_differences(a, b, key: str = "") -> set[str]:
    """The last key of every path where two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {d for k in a.keys() | b.keys() for d in json_differences(a.get(k), b.get(k), k)}
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return {d for x, y in zip(a, b) for d in json_differences(x, y, key)}
    return set() if a == b else {key}


def sqlite_differences(a: bytes, b: bytes) -> set[str]:
    """table.column of every value that differs between two SQLite files (rows in rowid order), and
    the tables whose row counts differ; none when only the file's layout differs (pages, free list)."""
    import sqlite3

    with tempfile.TemporaryDirectory() as folder:
        paths = [Path(folder) / "a.db", Path(folder) / "b.db"]
        for path, data in zip(paths, (a, b)):
            path.write_bytes(data)
        left, right = (sqlite3.connect(path) for path in paths)
        tables = [r[0] for r in left.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        found = set()
        for table in tables:
            query = f'SELECT * FROM "{table}" ORDER BY rowid' if "fts" not in table else f'SELECT * FROM "{table}"'
            try:
                rows_a, cursor = left.execute(query).fetchall(), right.execute(query)
            except sqlite3.Error:
                continue  # virtual tables without rowid order: their content follows the real tables'
            columns = [c[0] for c in cursor.description]
            rows_b = cursor.fetchall()
            if len(rows_a) != len(rows_b):
                found.add(f"{table} (rows: {len(rows_a)} against {len(rows_b)})")
            for x, y in zip(rows_a, rows_b):
                found |= {f"{table}.{c}" for c, u, v in zip(columns, x, y) if u != v}
        left.close()
        right.close()
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--content", type=Path, default=ROOT / "content")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--runs", type=int, default=4, help="partition runs at once: --parallel-runs, max_concurrent_runs"
    )
    args = parser.parse_args()
    times: dict[str, list[float]] = {"rag": [], "queue": []}
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    for _ in range(args.repeat):
        seconds, rag_files = rag_build(args.content.resolve(), args.runs)
        times["rag"].append(seconds)
        print(f"rag build --executor celery: {seconds:.1f} s", flush=True)
        seconds, queue_files, counts = queue_build(args.content.resolve(), args.runs)
        times["queue"].append(seconds)
        print(
            f"daemon queue + backfill: {seconds:.1f} s ({counts['runs']} runs; partitions indexed at "
            f"{counts['indexed_s']:.1f} s; {counts['queued_s']:.1f} s from the first run queued)",
            flush=True,
        )
        different = sorted(n for n in set(rag_files) | set(queue_files) if rag_files.get(n) != queue_files.get(n))
        print("same published files" if not different else f"published files differ: {different}", flush=True)
        for name in different:
            print(f"  {name}: {describe_difference(name, rag_files[name], queue_files[name])}", flush=True)
    for way, values in times.items():
        print(f"{way}: median {statistics.median(values):.1f} s of {', '.join(f'{v:.1f}' for v in values)}")
    print(f"ratio queue/rag: {statistics.median(times['queue']) / statistics.median(times['rag']):.2f}")
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
