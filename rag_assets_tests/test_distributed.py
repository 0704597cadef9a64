"""Distributed builds on real Celery workers (`rag build --executor celery`, defs/distributed.py).

Real pieces throughout: RabbitMQ on 127.0.0.1:5672, workers started with dagster-celery's
documented command as separate processes, a Dagster instance on PostgreSQL shared by the
workers and the build, the `rag` command as a subprocess. The workers are shared by the
module's tests (starting one costs ~10 s of imports); the queue is the module's own.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.config import load_config
from rag_assets.defs.distributed import DistributedBuildError, load_celery_config, run_slices
from rag_assets.defs.runner import run_build

from .celery_workers import CeleryCluster, celery_cluster, clean_environ, require_celery
from .conftest import CORPORA, REPO_ROOT, SAMPLE_CONTENT
from .embedding_server import EmbeddingServer
from .postgres import postgres_home, scratch_database

HUGO = CORPORA / "hugo-docs" / "content"
HANG_SECONDS = 300  # only against a hang: Python and Dagster import in 34 s at load 10+
HUGO_FILES_PER_COLLECTION = 3
RETRY_HELD_SECONDS = 2  # the killed step's second try waits this long while the test checks the outputs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> CeleryCluster:
    """Two workers; the `embedding_api` pool limited to one step at a time across them."""
    with celery_cluster(tmp_path_factory.mktemp("celery"), pool_limit=1) as cluster:
        cluster.start_workers("w1", "w2")
        yield cluster


def published(output: Path) -> dict[str, bytes]:
    """Every published file: the current generation, public/ through its links, and the index's
    segments (public/segments is a link to a folder, which rglob does not follow)."""
    current = output / "data" / "current"
    return {
        f"{root.name}/{path.relative_to(root)}": path.read_bytes()
        for root in (current, output / "public", output / "data" / "segments")
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def published_files(output: Path) -> dict[str, bytes]:
    """:func:`published`, with the values that name the build itself (its instant and generation
    id, and the digests of the files that hold them: the index's commit file, the manifest and
    its ledger segments, which are named by their bytes) replaced by placeholders of the same
    length, in the files and in their names."""
    current = output / "data" / "current"
    meta = json.loads((current / "embeddings-meta.json").read_text())
    own = [meta["builtAt"], meta["generation"], meta["indexSha256"], meta["files"]["rag-manifest.json"]]
    labels = {}  # a ledger segment's name (its digest) -> its collection and bucket, in file names
    for entry in json.loads((current / "rag-manifest.json").read_text()).get("ledger", []):
        ledger = entry["ledger"]
        key = Path(ledger["file"]).name.split(".")[0]
        own += [ledger["sha256"], key]
        labels[key] = f"ledger-of-{entry['collection']}-{entry['bucket']}-of-{entry['buckets']}"
    files = {}
    for name, data in published(output).items():
        for value in own:
            data = data.replace(value.encode(), b"#" * len(value))
        for key, label in labels.items():
            name = name.replace(key, label)
        files[name] = data
    return files


def digests(output: Path) -> dict[str, str]:
    """SHA-256 of every published file, as it is."""
    return {name: hashlib.sha256(data).hexdigest() for name, data in published(output).items()}


def step_intervals(instance: dg.DagsterInstance, job: str) -> list[tuple[str, str, float, float]]:
    """(run id, step key, start, end) of every successful step of ``job``'s runs, from the event log."""
    intervals = []
    for run in instance.get_runs(filters=dg.RunsFilter(job_name=job)):
        starts: dict[str, float] = {}
        for entry in instance.all_logs(run.run_id):
            kind = entry.dagster_event_type
            if kind == dg.DagsterEventType.STEP_START:
                starts[entry.step_key] = entry.timestamp
            elif kind == dg.DagsterEventType.STEP_SUCCESS:
                intervals.append((run.run_id, entry.step_key, starts[entry.step_key], entry.timestamp))
    return intervals


def hugo_sample(folder: Path, per_collection: int = HUGO_FILES_PER_COLLECTION) -> Path:
    """Every collection of the Hugo docs (its 20 top-level folders, all kept), each with its
    first ``per_collection`` files in path order (from nested folders too where the collection
    has them), and the files at the root."""
    for collection in sorted(HUGO.iterdir()):
        files = sorted(collection.rglob("*")) if collection.is_dir() else [collection]
        for path in [f for f in files if f.is_file()][:per_collection]:
            target = folder / path.relative_to(HUGO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return folder


@pytest.mark.skipif(not HUGO.is_dir(), reason="hugo-docs corpus not available")
def test_hugo_docs_on_two_workers_publish_what_the_in_process_build_publishes(cluster, tmp_path):
    """The distributed build publishes byte for byte what the in-process build does.

    What could differ between the two is the distribution: 20 partitions cut into two runs,
    their steps spread over two worker processes that write the records to the shared disk,
    the pool claimed across them, and one publish run reading every record back. All of it
    depends on the number of collections, not on their size: the input keeps every one of
    the Hugo docs' 20 collections (so 20 partitions, two runs of 10, both workers), with 3
    of its files each (58 pages rather than 992: embedding them all twice was most of
    the test's time and proved nothing more)."""
    content = hugo_sample(tmp_path / "hugo")
    build = cluster.rag_background(*cluster.build_args(content, tmp_path / "celery", "--partitions-per-run", "10"))
    try:
        # The in-process build meanwhile, in this process: the workers do the other.
        cfg = load_config(None, content_dir=content, output_dir=tmp_path / "in_process", embedder="hashing", environ={})
        assert run_build(cfg, dg.DagsterInstance.ephemeral(), full=True).success
        _, stderr = build.communicate(timeout=600)
    finally:
        if build.poll() is None:
            build.kill()
    assert build.returncode == 0, stderr[-3000:]

    expected, got = published_files(tmp_path / "in_process"), published_files(tmp_path / "celery")
    assert sorted(got) == sorted(expected)
    assert len(expected) >= 8  # index, meta, manifest, store, BM25, script, page, and their public links
    meta = json.loads((tmp_path / "in_process" / "public" / "embeddings-meta.json").read_text())
    assert len(meta["collections"]) == 20 and all(c["documents"] for c in meta["collections"].values())
    different = [name for name in expected if got[name] != expected[name]]
    assert not different, different
    # Both workers took steps: the build was spread, not run by whichever answered first.
    assert all("succeeded in" in cluster.log(name) for name in ("w1", "w2"))

    with cluster.instance() as instance:
        steps = step_intervals(instance, "index_collection_celery")
    assert len({run for run, *_ in steps}) == 2  # 20 collections, 10 a run
    embedding = sorted((start, end) for _, key, start, end in steps if key == "embeddings")
    assert len(embedding) == 2
    # The pool (limit 1 in this instance) held across workers: no two embedding steps overlapped...
    assert all(later[0] >= earlier[1] for earlier, later in zip(embedding, embedding[1:])), embedding
    # ...while other steps of different runs did run at the same time, on the two workers.
    assert any(a[0] != b[0] and a[2] < b[3] and b[2] < a[3] for a in steps for b in steps), (
        "no two runs' steps overlapped: the build was not distributed"
    )


def _write_config(folder: Path, content: Path, output: Path, server: EmbeddingServer) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rag.yaml").write_text(
        f"content_dir: {content}\noutput_dir: {output}\nidentity_map: null\n"
        f"embedder:\n  name: ollama\n  batch_size: 16\n  ollama:\n    host: {server.url}\n"
        "private_tier:\n  embedder: hashing\n"
    )
    return folder


TASK_LINE = re.compile(r"\[([0-9a-f-]{36})\] (received|succeeded in|raised)")


def unfinished_tasks(log: str) -> set[str]:
    """The ids of the Celery tasks (steps) a worker's log shows received and not finished."""
    received, finished = set(), set()
    for task, what in TASK_LINE.findall(log):
        (received if what == "received" else finished).add(task)
    return received - finished


def test_a_worker_killed_mid_step_leaves_the_outputs_and_the_next_worker_finishes_the_build(cluster, tmp_path):
    """SIGKILL the worker whose embedding step is waiting on the embedding server: the step
    goes back to the queue, the other worker (alive all along) runs it again while the
    published outputs stay as they were, and the build then publishes."""
    content = tmp_path / "content"
    shutil.copytree(SAMPLE_CONTENT, content, ignore=shutil.ignore_patterns("*vault*"))
    output = tmp_path / "out"
    with EmbeddingServer(ollama_dimension=64) as server:
        cwd = _write_config(tmp_path / "site", content, output, server)
        # The previous outputs: any build's will do, so an in-process one in this process.
        cfg = load_config(cwd / "rag.yaml", environ={})
        assert run_build(cfg, dg.DagsterInstance.ephemeral(), full=True).success
        before = digests(output)

        # The next embedding request hangs: the step is mid-way when its worker dies. Its
        # second try, on the other worker, is held a few seconds while the outputs are checked.
        (content / "docs" / "killed-mid-run.md").write_text("# Killed mid-run\n\nA page about unicorns.\n")
        server.script("slow:60", f"slow:{RETRY_HELD_SECONDS}")
        requests = len(server.embedding_requests)
        # One run over the five collections: its embedding step is the one that hangs.
        build = cluster.rag_background(
            "build",
            "--executor",
            "celery",
            "--celery-config",
            str(cluster.celery_yaml),
            "--partitions-per-run",
            "5",
            cwd=cwd,
        )
        try:
            deadline = time.monotonic() + HANG_SECONDS
            while len(server.embedding_requests) == requests:
                assert build.poll() is None, build.communicate()
                assert time.monotonic() < deadline, "the embedding step never started"
                time.sleep(0.05)
            # The worker in the middle of the step (a solo worker with a prefetch of one holds one task).
            busy = {name: tasks for name in cluster.workers if (tasks := unfinished_tasks(cluster.log(name)))}
            assert len(busy) == 1, {name: cluster.log(name)[-3000:] for name in cluster.workers}
            ((victim, (step,)),) = busy.items()
            (survivor,) = [name for name in cluster.workers if name != victim]
            cluster.kill(victim)
            assert len(server.embedding_requests) == requests + 1  # the step still waiting when it died

            # The step back in the queue and taken by the other worker: its embedding request.
            while len(server.embedding_requests) == requests + 1:
                assert build.poll() is None, build.communicate()
                assert time.monotonic() < deadline, "no worker ran the killed step again"
                time.sleep(0.05)
            assert build.poll() is None  # still waiting for that step
            assert digests(output) == before  # the published outputs are untouched
            stdout, stderr = build.communicate(timeout=HANG_SECONDS)
        finally:
            if build.poll() is None:
                build.kill()
    assert build.returncode == 0, stderr[-3000:]
    assert step in unfinished_tasks(cluster.log(victim))  # it died in that step...
    assert f"{step}] succeeded in" in cluster.log(survivor)  # ...which the other worker ran again
    meta = json.loads((output / "public" / "embeddings-meta.json").read_text())
    assert meta["collections"]["docs"]["documents"] == 7
    assert digests(output) != before


def test_an_unreachable_broker_fails_fast_naming_it_and_what_to_start(tmp_path):
    require_celery()
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    broker = f"amqp://guest:guest@127.0.0.1:{port}//"
    env = {**clean_environ(), "DAGSTER_HOME": str(home), "RAG_CELERY_BROKER": broker, "PYTHONPATH": str(REPO_ROOT)}
    # Fast means it gives up instead of retrying for ever (kombu's default): the timeout is a
    # generous hang guard, since Python's and Dagster's imports alone took 34 s under load.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rag_assets.serve.cli",
            "build",
            "--content-dir",
            str(SAMPLE_CONTENT),
            "--output-dir",
            str(tmp_path / "out"),
            "--embedder",
            "hashing",
            "--executor",
            "celery",
            "--celery-config",
            str(REPO_ROOT / "celery.yaml"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"cannot reach the Celery broker at amqp://guest:***@127.0.0.1:{port}//" in done.stderr
    assert "start the broker there" in done.stderr and "dagster-celery worker start" in done.stderr
    assert "guest:guest" not in done.stderr  # the password is not printed
    assert "Connection refused" in done.stderr  # it gave up on the refusal itself, with the cause
    assert not (tmp_path / "out" / "public").exists()


def test_the_celery_config_names_its_broker_and_the_runs_cover_every_key_in_order(tmp_path):
    celery = load_celery_config(REPO_ROOT / "celery.yaml", {"RAG_CELERY_BROKER": "amqp://u:p@h:5672//"})
    assert celery.broker == "amqp://u:p@h:5672//"
    assert celery.queue == "dagster"
    source = celery.execution["config"]["config_source"]
    assert source["task_acks_late"] is True and source["worker_prefetch_multiplier"] == 1
    assert source["broker_heartbeat"] == 0  # a busy solo worker cannot answer heartbeats: its step would run twice
    with pytest.raises(DistributedBuildError, match=r"\$RAG_CELERY_BROKER, which is not set"):
        load_celery_config(REPO_ROOT / "celery.yaml", {})
    with pytest.raises(DistributedBuildError, match="no Celery config at"):
        load_celery_config(tmp_path / "missing.yaml", {})
    keys = ["docs", "docs~0", "docs~1", "posts", "learn"]
    assert run_slices(keys, 1) == [[k] for k in keys]
    assert run_slices(keys, 2) == [["docs", "docs~0"], ["docs~1", "posts"], ["learn"]]


CLAIM_IN_PARALLEL = """
import os, sys, time
from pathlib import Path
import dagster as dg
from rag_assets.defs.distributed import claim_op

@dg.job(name="claim_in_parallel")
def claim():
    claim_op("embedding_api")()

go, ready, count = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
children = []
for number in range(count):
    read, write = os.pipe()
    if os.fork() == 0:  # a run process of its own, forked once the imports are done
        outcome = b"failed"
        try:
            instance = dg.DagsterInstance.get()
            ready.with_name(f"{ready.name}-{number}").touch()
            while not go.exists():  # every process starts its run at the same instant
                time.sleep(0.005)
            if claim.execute_in_process(instance=instance, raise_on_error=False).success:
                outcome = b"ok"
        finally:
            os.write(write, outcome)
            os._exit(0)
    os.close(write)
    children.append(read)
for read in children:
    print(os.read(read, 16).decode())
    os.waitpid(-1, 0)
"""


def test_the_pools_are_recorded_before_parallel_runs_claim_them(tmp_path, monkeypatch):
    """On PostgreSQL, runs that first claim a pool at the same instant fail (Dagster inserts the
    pool's default limit from each; all but one hit the unique key): the build records the
    pools in one run first, after which parallel claims succeed.

    The three runs are processes of their own, each with its own instance and connections,
    forked from one process that imported Dagster once (as the build's run processes fork
    from a server that imported the project): three interpreters importing Dagster cost
    three times the CPU and only spread the instant they claim at."""
    require_celery()
    from rag_assets.defs.distributed import POOLS, prepare_pools

    with scratch_database() as (settings, _connect):
        env = {
            **clean_environ(),
            **settings,
            "DAGSTER_HOME": str(postgres_home(tmp_path / "home")),
            "PYTHONPATH": str(REPO_ROOT),
        }
        for key, value in settings.items():  # the instance's yaml reads them when it opens
            monkeypatch.setenv(key, value)
        with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
            prepare_pools(instance)
            limit = instance.get_concurrency_config().pool_config.default_pool_limit
            for pool in POOLS:
                assert instance.event_log_storage.get_concurrency_info(pool).slot_count == limit
        go, ready, count = tmp_path / "go", tmp_path / "ready", 3
        runs = subprocess.Popen(
            [sys.executable, "-c", CLAIM_IN_PARALLEL, str(go), str(ready), str(count)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + HANG_SECONDS
        while not all(ready.with_name(f"ready-{n}").exists() for n in range(count)):
            assert runs.poll() is None, runs.communicate()
            assert time.monotonic() < deadline, "the run processes never opened their instance"
            time.sleep(0.05)
        go.touch()
        out, err = runs.communicate(timeout=120)
        assert out.split() == ["ok"] * count, err[-4000:]
