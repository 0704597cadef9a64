"""Real Celery workers for the distributed-build tests: `dagster-celery worker start` processes.

A :class:`CeleryCluster` is what a distributed deployment shares: a Dagster instance on
PostgreSQL (a throw-away database, see postgres.py), the RabbitMQ broker on 127.0.0.1:5672,
a queue of its own (so workers of another test or session on the same broker never take its
steps) and one environment for the workers and `rag build`. Workers run in sessions of their
own and are stopped by killing their process group (background processes here may ignore
SIGINT and SIGTERM). Without the broker or the `distributed` extra the tests skip, except
under CI, where that fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from .postgres import postgres_home, require_service, scratch_database

REPO_ROOT = Path(__file__).resolve().parents[1]
BROKER = os.environ.get("RAG_TEST_CELERY_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
BROKER_HOST, BROKER_PORT = "127.0.0.1", 5672
BIN = Path(sys.executable).parent
WORKER_READY_SECONDS = 90


def require_celery() -> None:
    """The extra is installed and the broker answers; else skip (fail under CI) saying which is missing."""
    require_service(("celery", "dagster_celery"), "distributed", "RabbitMQ", BROKER_HOST, BROKER_PORT)


def clean_environ() -> dict[str, str]:
    """This process's environment without any instance, rag or provider setting of the developer's."""
    drop = ("DAGSTER_", "RAG_", "OLLAMA_HOST", "OPENAI_", "OPENROUTER_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


@dataclass
class CeleryCluster:
    folder: Path
    env: dict[str, str]
    celery_yaml: Path
    queue: str
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start_workers(self, *names: str) -> None:
        """Workers as documented (dagster-celery's CLI) on this cluster's queue, started together; waits until ready."""
        for name in names:
            log = self.folder / f"{name}.log"
            # The node name carries the queue's own suffix: Celery's control queue
            # ("<node>.celery.pidbox") is exclusive per node name on the broker, so a worker of
            # another run on this host (a parallel session, one being killed) must not share it.
            self.workers[name] = subprocess.Popen(
                [
                    str(BIN / "dagster-celery"),
                    "worker",
                    "start",
                    "-A",
                    "dagster_celery.app",
                    "-y",
                    str(self.celery_yaml),
                    "-q",
                    self.queue,
                    "-n",
                    self.node(name),
                    "--",
                    "--pool",
                    "solo",
                ],
                env=self.env,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + WORKER_READY_SECONDS
        for name in names:
            while f"{self.node(name)}@" not in (text := self.log(name)) or " ready." not in text:
                if self.workers[name].poll() is not None or time.monotonic() > deadline:
                    self.kill(name)
                    pytest.fail(f"worker {name} did not start:\n{text[-3000:]}")
                time.sleep(0.3)

    def node(self, name: str) -> str:
        """The Celery node name of worker ``name`` (before the ``@host``): unique to this cluster."""
        return f"{name}-{self.queue}"

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str) -> None:
        """SIGKILL the worker's whole process group (dagster-celery's CLI and the celery process it starts)."""
        process = self.workers.pop(name)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=30)

    def rag(self, *args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "rag_assets.serve.cli", *args],
            env=self.env,
            cwd=cwd or self.folder,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def rag_background(self, *args: str, cwd: Path | None = None) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "rag_assets.serve.cli", *args],
            env=self.env,
            cwd=cwd or self.folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def build_args(self, content: Path, output: Path, *extra: str) -> list[str]:
        return [
            "build",
            "--force",
            "--content-dir",
            str(content),
            "--output-dir",
            str(output),
            "--embedder",
            "hashing",
            "--private-embedder",
            "hashing",
            "--executor",
            "celery",
            "--celery-config",
            str(self.celery_yaml),
            *extra,
        ]

    def instance(self):
        import dagster as dg

        saved = {k: os.environ.get(k) for k in self.env if k.startswith("DAGSTER_PG_")}
        os.environ.update({k: self.env[k] for k in saved})  # the yaml reads them when the instance opens
        try:
            return dg.DagsterInstance.from_config(self.env["DAGSTER_HOME"])
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@contextmanager
def celery_cluster(folder: Path, pool_limit: int | None = None) -> Iterator[CeleryCluster]:
    """A cluster in ``folder``; ``pool_limit`` replaces dagster.yaml's per-pool limit."""
    require_celery()
    with scratch_database() as (settings, _connect):
        home = postgres_home(folder / "dagster_home")
        if pool_limit is not None:
            instance_yaml = yaml.safe_load((home / "dagster.yaml").read_text())
            instance_yaml["concurrency"]["pools"]["default_limit"] = pool_limit
            (home / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml))
        queue = f"rag-test-{uuid.uuid4().hex[:10]}"
        celery_yaml = folder / "celery.yaml"
        config = yaml.safe_load((REPO_ROOT / "celery.yaml").read_text())
        config["execution"]["config"]["config_source"]["task_default_queue"] = queue
        celery_yaml.write_text(yaml.safe_dump(config))
        env = {
            **clean_environ(),
            **settings,
            "DAGSTER_HOME": str(home),
            "RAG_CELERY_BROKER": BROKER,
            # dagster-celery's CLI starts the `celery` command found on PATH: this environment's.
            "PATH": os.pathsep.join((str(BIN), os.environ.get("PATH", ""))),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p),
        }
        cluster = CeleryCluster(folder, env, celery_yaml, queue)
        # The instance's tables, made once: workers started together on an empty database each
        # run Dagster's schema creation, and one of them fails ("alembic_version" already exists).
        with cluster.instance():
            pass
        try:
            yield cluster
        finally:
            for name in list(cluster.workers):
                cluster.kill(name)
            _delete_queue(queue)


def _delete_queue(queue: str) -> None:
    """Leave the shared broker as it was: the test's queue goes with it."""
    from kombu import Connection

    with Connection(BROKER, connect_timeout=3) as connection:
        connection.default_channel.queue_delete(queue)
