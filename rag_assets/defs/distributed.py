"""Distributed builds: one run per collection partition, whose steps Celery workers execute.

A `rag build` run covers a range of partitions with one step per asset (defs/runner.py), so
a second worker would have nothing to take. A distributed build therefore launches one
``index_collection_celery`` run per collection partition (content hash, parse, chunk,
embed: four steps on the workers), a few at a time, and once every one of them succeeded one
``publish_index_celery`` run. Every collection partition key is handled alike (a shard
``docs~1`` is just another key). The runs use dagster-celery's ``celery_executor`` with the
settings of a dagster-celery config file (``celery.yaml``), the same file the workers are
started with, so both sides agree on the broker and on redelivery (``task_acks_late``: a
step whose worker died goes back to the queue for the next worker).

Limits still hold across workers: the ``embedding_api`` pool is claimed per step from the
shared instance by each run's orchestrator; publishing is one run, tagged ``rag/publishes``,
started only when no other such run is in progress, and its writes take the publish lock.

The Safe and Private vaults are not distributed: their runs stay in the `rag build`
process, so vault text never reaches a worker on another machine.

Why the runs are started here rather than queued for ``dagster-daemon`` as a backfill: that
way measured 1.6-3.7 times slower (bench/celery_queue.py; docs/operations/celery.md), mostly because each queued run is a new process importing Dagster and the project,
and it needs a running daemon and code location.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import yaml

from rag_assets.config import CONFIG_ADAPTER, RagConfig
from rag_assets.config.masking import mask_url
from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.io_managers import load_record
from rag_assets.defs.jobs import INDEX_COLLECTION_JOB, PUBLISHES_TAG, jobs_with_executor
from rag_assets.defs.jobs import PUBLISH_JOB as PUBLISH_JOB_NAME
from rag_assets.defs.outcomes import (
    BuildOutcome,
    CollectionOutcome,
    check_outcomes,
    collection_outcomes,
    failure_message,
    partition_metadata,
    unpartitioned_metadata,
)
from rag_assets.defs.partitions import range_tags

INDEX_JOB = f"{INDEX_COLLECTION_JOB}_celery"
PUBLISH_JOB = f"{PUBLISH_JOB_NAME}_celery"
# The worker command the errors and docs/operations/celery.md name (dagster-celery's own CLI).
WORKER_COMMAND = "dagster-celery worker start -A dagster_celery.app -y celery.yaml -- --pool solo"
# dagster-celery's queue when the config names none.
DEFAULT_QUEUE = "dagster"
# Runs of one build in flight at once: each has one step running at a time, so this bounds
# the steps waiting in the broker; raise it with the number of workers.
DEFAULT_PARALLEL_RUNS = 4
# How long the publish run waits for another publishing run (the `rag/publishes` limit).
PUBLISH_WAIT_SECONDS = 600
# How long the broker and worker checks wait before the build gives up.
BROKER_TIMEOUT_SECONDS = 3.0


# dagster-celery registers its task anew for every step it submits; Celery then warns that the
# name is taken (by the same task), once per step, on the build's terminal.
warnings.filterwarnings("ignore", message="Task name 'execute_plan' is already registered")


class DistributedBuildError(RuntimeError):
    """The distributed build cannot start: no broker, no worker, no shared instance."""


@dataclass(frozen=True)
class CeleryRunConfig:
    """The ``execution`` block of a dagster-celery config file, and the broker it names."""

    execution: dict[str, Any]
    broker: str
    path: Path

    @property
    def run_config(self) -> dict[str, Any]:
        return {"execution": self.execution}

    @property
    def queue(self) -> str:
        """Where the steps go: config_source's task_default_queue (workers listen with -q)."""
        source = self.execution.get("config", {}).get("config_source") or {}
        return source.get("task_default_queue") or DEFAULT_QUEUE


def load_celery_config(path: Path, environ: dict[str, str] | None = None) -> CeleryRunConfig:
    """Read ``path`` (dagster-celery's worker config format); the broker may come from ``env:``."""
    env = os.environ if environ is None else environ
    if not path.is_file():
        raise DistributedBuildError(f"no Celery config at {path}: pass --celery-config (the file the workers use, -y)")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    execution = data.get("execution") or {}
    broker = (execution.get("config") or {}).get("broker")
    if isinstance(broker, dict) and "env" in broker:
        value = env.get(broker["env"])
        if not value:
            raise DistributedBuildError(
                f"{path} takes the Celery broker URL from ${broker['env']}, which is not set: "
                f"export {broker['env']}=amqp://guest:guest@127.0.0.1:5672// (the workers need the same)"
            )
        broker = value
    if not isinstance(broker, str) or not broker:
        raise DistributedBuildError(f"{path} names no broker under execution.config.broker")
    return CeleryRunConfig(execution=execution, broker=broker, path=path)


def distributed_definitions(cfg: RagConfig) -> dg.Definitions:
    """The project's definitions plus the two Celery jobs."""
    from dagster_celery import celery_executor  # the distributed extra

    jobs = jobs_with_executor("celery", celery_executor, "on a Celery worker")
    return dg.Definitions.merge(build_definitions(cfg), dg.Definitions(jobs=jobs))


# A worker process keeps its definitions between steps: building them is most of a short
# step's cost, and they depend only on these two strings.
@functools.lru_cache(maxsize=8)
def reconstruct_job(job_name: str, settings_json: str) -> dg.JobDefinition:
    """What a worker calls to rebuild a job: the configuration travels with the run, whole
    (as pydantic's JSON of it: :func:`config_json`)."""
    return distributed_definitions(CONFIG_ADAPTER.validate_json(settings_json)).resolve_job_def(job_name)


def config_json(cfg: RagConfig) -> str:
    """``cfg`` as text for a reconstructable job's arguments (Dagster passes them as strings)."""
    return CONFIG_ADAPTER.dump_json(cfg).decode()


def reconstructable_job(cfg: RagConfig, job_name: str):
    """A job the workers can rebuild from its name and the build's configuration."""
    return dg.build_reconstructable_job(
        # Dagster annotates reconstructable_args as a 1-tuple; any number of arguments is its use
        __name__,
        reconstruct_job.__name__,
        reconstructable_args=(job_name, config_json(cfg)),  # type: ignore[arg-type]
    )


def check_broker(url: str, timeout: float = BROKER_TIMEOUT_SECONDS) -> None:
    """Fail fast, naming the broker and what to start, when nothing answers at ``url``."""
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=timeout) as connection:
            connection.ensure_connection(max_retries=1, timeout=timeout)
    except Exception as error:  # kombu raises the transport's own errors (socket, AMQP, Redis)
        raise DistributedBuildError(
            f"cannot reach the Celery broker at {mask_url(url)} ({type(error).__name__}: {error}); "
            "start the broker there (RabbitMQ: `rabbitmq-server`) or point the config's broker at a running one, "
            f"then start workers with `{WORKER_COMMAND}`"
        ) from error


def check_workers(celery: CeleryRunConfig, timeout: float = BROKER_TIMEOUT_SECONDS) -> list[str]:
    """The workers that consume the steps' queue; fails when none does (the runs would wait for ever)."""
    from celery import Celery

    app = Celery("rag-assets-check", broker=celery.broker)
    try:
        answers = app.control.inspect(timeout=timeout).active_queues() or {}
    finally:
        app.close()
    names = sorted(worker for worker, queues in answers.items() if any(q.get("name") == celery.queue for q in queues))
    if not names:
        raise DistributedBuildError(
            f"no Celery worker consumes the queue {celery.queue!r} on the broker {mask_url(celery.broker)}: start "
            f"at least one with `{WORKER_COMMAND}` (same DAGSTER_HOME, same {celery.path.name}"
            + (f", and -q {celery.queue}" if celery.queue != DEFAULT_QUEUE else "")
            + ")"
        )
    return names


def require_shared_instance(instance: dg.DagsterInstance) -> None:
    """Workers record their steps in the build's instance: it must be one they can open too."""
    if instance.is_ephemeral:
        raise DistributedBuildError(
            "a distributed build needs a persistent Dagster instance shared with the workers: set DAGSTER_HOME "
            "(dagster.postgres.yaml for workers on other machines)"
        )


def wait_for_publishing_slot(
    instance: dg.DagsterInstance, timeout: float = PUBLISH_WAIT_SECONDS, poll: float = 1.0
) -> list[str]:
    """Honour dagster.yaml's `rag/publishes` limit of one for a run that bypasses the run queue:
    wait while another run with that tag is queued or in progress. Returns the ids of those
    still busy after ``timeout`` (none: go ahead), since a run whose process was killed stays
    "started" until someone marks it failed."""
    busy = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    deadline = time.monotonic() + timeout
    while True:
        runs = instance.get_runs(filters=dg.RunsFilter(tags=PUBLISHES_TAG, statuses=busy))
        if not runs or time.monotonic() >= deadline:
            return [run.run_id for run in runs]
        time.sleep(poll)


@dataclass
class RunReport:
    """What the build needs of one run of a distributed build, made in the process that ran it."""

    outcomes: list[CollectionOutcome]
    failed_checks: list[str]
    warnings: list[str]


# The op concurrency pools the build's steps claim (defs/embeddings.py, defs/tiers.py).
POOLS = ("embedding_api",)


def prepare_pools(instance: dg.DagsterInstance, pools: Sequence[str] = POOLS) -> None:
    """Have ``instance`` record each pool's limit before runs claim it in parallel.

    The first claim of a pool inserts its default limit. On PostgreSQL, two runs doing that at
    once make one fail (a unique-key violation aborts its transaction, Dagster's fallback
    update then fails too), and with it the run. One tiny run, alone, claims every pool first.
    """

    @dg.job(name="rag_prepare_pools", description="Records the op concurrency pools' limits (distributed builds).")
    def prepare():
        for pool in pools:
            claim_op(pool)()

    result = prepare.execute_in_process(instance=instance, raise_on_error=False)
    if not result.success:
        raise DistributedBuildError(
            f"could not record the concurrency pools {', '.join(pools)}: {failure_message(result)}"
        )


def claim_op(pool: str) -> dg.OpDefinition:
    """An op that does nothing but claim one slot of ``pool`` (see :func:`prepare_pools`)."""

    @dg.op(name=f"claim_{pool}", pool=pool)
    def claim() -> None:
        """Nothing: claiming the pool's slot is the point."""

    return claim


def run_slices(keys: Sequence[str], partitions_per_run: int) -> list[list[str]]:
    """``keys`` in order, cut into runs of at most ``partitions_per_run`` contiguous partitions."""
    size = max(1, partitions_per_run)
    return [list(keys[i : i + size]) for i in range(0, len(keys), size)]


def execute_partition_runs(
    cfg: RagConfig,
    instance: dg.DagsterInstance,
    celery: CeleryRunConfig,
    keys: Sequence[str],
    tags: dict[str, str],
    parallel: int = DEFAULT_PARALLEL_RUNS,
    partitions_per_run: int = 1,
    on_report: Callable[[RunReport], None] = lambda _: None,
) -> list[RunReport]:
    """``index_collection_celery`` runs over ``keys`` (one per partition by default), ``parallel`` at a time.

    Each run's orchestrator lives in a process of its own: Dagster starting a run reconfigures
    Python logging (``logging.config.dictConfig``), which deadlocks against another run logging
    in a thread of the same process. The processes fork from a server that imported the
    project once, so a run starts in milliseconds rather than seconds. That server keeps the
    environment of the first build of the process (DAGSTER_PG_*): one build per process, as
    `rag build` and the tests (subprocesses) do.
    """
    slices = run_slices(keys, partitions_per_run)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    settings_json = config_json(cfg)
    ref = instance.get_ref()
    reports: dict[str, RunReport] = {}
    with ProcessPoolExecutor(max_workers=max(1, min(parallel, len(slices) or 1)), mp_context=context) as pool:
        futures = {
            pool.submit(_run_slice, ref, settings_json, part, celery.run_config, tags): part[0] for part in slices
        }
        for future in as_completed(futures):
            reports[futures[future]] = report = future.result()
            on_report(report)
    return [reports[part[0]] for part in slices]


def _run_slice(
    ref: Any, settings_json: str, keys: list[str], run_config: dict[str, Any], tags: dict[str, str]
) -> RunReport:
    """In a run process: execute one run over ``keys`` and summarise it."""
    started = time.perf_counter()
    cfg = CONFIG_ADAPTER.validate_json(settings_json)
    job = dg.build_reconstructable_job(  # reconstructable_args: as in reconstructable_job
        __name__,
        reconstruct_job.__name__,
        reconstructable_args=(INDEX_JOB, settings_json),  # type: ignore[arg-type]
    )
    with dg.DagsterInstance.from_ref(ref) as instance:
        result = dg.execute_job(job, instance=instance, run_config=run_config, tags={**tags, **run_tags(keys)})
        # The skipped files are in the parsed records on the shared disk, where the workers wrote them.
        skipped = {
            key: load_record(cfg.intermediate_dir, "parsed_documents", key).skipped for key in _built(result, keys)
        }
        errors, warnings = check_outcomes(result)
        return RunReport(collection_outcomes(result, keys, skipped, started), errors, warnings)


def run_tags(keys: Sequence[str]) -> dict[str, str]:
    """The tags that make a run cover ``keys``: one partition, or a contiguous range of them."""
    return {"dagster/partition": keys[0]} if len(keys) == 1 else range_tags(keys)


def _built(result: dg.JobExecutionResult, keys: Sequence[str]) -> list[str]:
    by_partition = partition_metadata(result)
    return [key for key in keys if "parsed_documents" in by_partition.get(key, {})]


def execute_publish_run(
    cfg: RagConfig, instance: dg.DagsterInstance, celery: CeleryRunConfig, tags: dict[str, str]
) -> dg.JobExecutionResult:
    return dg.execute_job(
        reconstructable_job(cfg, PUBLISH_JOB), instance=instance, run_config=celery.run_config, tags=tags
    )


def _each_outcome(on_collection: Callable[[CollectionOutcome], None], report: RunReport) -> None:
    """``on_collection`` for every collection a finished run reports."""
    for outcome in report.outcomes:
        on_collection(outcome)


def build_collections_on_celery(
    cfg: RagConfig,
    instance: dg.DagsterInstance,
    celery: CeleryRunConfig,
    keys: Sequence[str],
    tags: dict[str, str],
    parallel: int | None,
    partitions_per_run: int,
    on_collection: Callable[[CollectionOutcome], None],
) -> BuildOutcome:
    """Index ``keys`` on the workers (a run per partition, or per ``partitions_per_run``), then
    publish once if every run succeeded.

    A failed collection leaves the published outputs as they were (no publish run), as a
    failed range run does; the other collections' runs still finish, so their records are
    ready for the next build.
    """
    require_shared_instance(instance)
    check_broker(celery.broker)
    check_workers(celery)
    prepare_pools(instance)
    reports = execute_partition_runs(
        cfg,
        instance,
        celery,
        keys,
        tags,
        parallel or DEFAULT_PARALLEL_RUNS,
        partitions_per_run,
        functools.partial(_each_outcome, on_collection),
    )
    outcomes = [outcome for report in reports for outcome in report.outcomes]
    failed_checks = [problem for report in reports for problem in report.failed_checks]
    warnings = [warning for report in reports for warning in report.warnings]
    failures = [o for o in outcomes if not o.success]
    if failures:
        return BuildOutcome(outcomes, {}, failed_checks, "; ".join(str(o.error) for o in failures), 0.0, warnings)
    blocking = wait_for_publishing_slot(instance)
    if blocking:
        return BuildOutcome(
            outcomes,
            {},
            failed_checks,
            (
                f"publishing: another publishing run is still in progress after {PUBLISH_WAIT_SECONDS} s ("
                f"{', '.join(blocking)}); if a killed process left it behind, mark it failed in the Dagster UI"
            ),
            0.0,
            warnings,
        )
    result = execute_publish_run(cfg, instance, celery, tags)
    if not result.success:
        return BuildOutcome(outcomes, {}, [], f"publishing: {failure_message(result)}", 0.0)
    errors, warns = check_outcomes(result)
    return BuildOutcome(
        collections=outcomes,
        publish_metadata=unpartitioned_metadata(result),
        failed_checks=failed_checks + errors,
        warnings=warnings + warns,
        error=None,
        seconds=0.0,
    )
