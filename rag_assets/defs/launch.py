"""A tier's ingest launched from the admin console into the project's Dagster instance.

``/admin`` must answer at once, while a tier's ingest takes seconds to hours. So the run id
is made first, the run executes in a background thread of the server (the same job and
assets ``rag build`` runs: ``update_safe_vaults`` / ``update_private_vaults`` over the
tier's vault partitions, or ``refresh_tier_stores`` for a tier left without vaults, which
purges the rows of the removed ones), and the console polls :func:`run_progress`, which
reads the run from the instance. The instance is the one at ``DAGSTER_HOME``
(``DagsterInstance.get()``), so the run shows in the Dagster UI like any other.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.jobs import BUILD_TAG, REFRESH_TIERS_JOB, TIER_STORE_ASSETS, UPDATE_VAULTS_JOBS
from rag_assets.defs.partitions import VAULT_PARTITIONS, covering_range, sync_vault_partitions
from rag_assets.defs.runner import QUIET_RUN_CONFIG, failure_message, partition_args

log = logging.getLogger("rag_assets.defs.launch")

LAUNCHED_BY_TAG = "rag/launched-by"
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}
# Opening an instance on a new DAGSTER_HOME creates its tables; two threads opening it at
# once (a run starting, a progress poll) both tried to, and one failed ("table exists").
_OPENING = threading.Lock()


def project_instance() -> dg.DagsterInstance:
    """The instance at DAGSTER_HOME (the one the Dagster UI shows), opened one thread at a time."""
    with _OPENING:
        return dg.DagsterInstance.get()


class LaunchRefused(Exception):
    """An ingest that cannot start (no DAGSTER_HOME, one of the tier already running) or a run
    unknown; the message says why, ``status`` is the HTTP status the console answers."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Launch:
    """One ingest this process started: its thread, and the error that kept it from running."""

    run_id: str
    tier: str
    thread: threading.Thread
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


class IngestLauncher:
    """Starts tier ingests in background threads and reports their runs' progress."""

    def __init__(self) -> None:
        self._launches: dict[str, Launch] = {}
        self._lock = threading.Lock()

    def launch(self, cfg: RagConfig, tier: str, who: str) -> str:
        """Start the tier's ingest; its run id, at once (the run is created a moment later)."""
        if tier not in VAULT_PARTITIONS:
            raise LaunchRefused(f"only the vault tiers are ingested here (safe, private), not {tier!r}")
        if not os.environ.get("DAGSTER_HOME"):
            raise LaunchRefused(
                "DAGSTER_HOME is not set: start `rag serve` with DAGSTER_HOME pointing at the folder of the "
                "project's dagster.yaml (the instance the Dagster UI shows), so the run is recorded there"
            )
        with self._lock:
            running = next((ln for ln in self._launches.values() if ln.tier == tier and not ln.done.is_set()), None)
            if running is not None:
                raise LaunchRefused(
                    f"an ingest of the {tier} tier is running (run {running.run_id}); wait for it to end", 409
                )
            run_id = str(uuid.uuid4())
            thread = threading.Thread(
                target=self._run, args=(cfg, tier, run_id, who), name=f"rag-admin-ingest-{tier}", daemon=True
            )
            launch = Launch(run_id, tier, thread)
            self._launches[run_id] = launch
        thread.start()
        return run_id

    def _run(self, cfg: RagConfig, tier: str, run_id: str, who: str) -> None:
        launch = self._launches[run_id]
        try:
            result = execute_tier_ingest(cfg, tier, run_id, tags={BUILD_TAG: "incremental", LAUNCHED_BY_TAG: who})
            if not result.success:
                launch.error = failure_message(result)
        except Exception as exc:  # the run may not exist: the console shows this instead
            log.error("the %s ingest %s could not run", tier, run_id, exc_info=True)
            launch.error = f"{type(exc).__name__}: {exc}"
        finally:
            launch.done.set()

    def wait(self, run_id: str, timeout: float | None = None) -> bool:
        """Block until a launch of this process ends (tests, shutdown); False on timeout."""
        launch = self._launches.get(run_id)
        return launch is None or launch.done.wait(timeout)

    def progress(self, run_id: str) -> dict[str, Any]:
        """The run's status as the instance has it, with its steps and materialisations so far."""
        launch = self._launches.get(run_id)
        with project_instance() as instance:
            run = instance.get_run_by_id(run_id)
            if run is None:
                if launch is None:
                    raise LaunchRefused(f"no run {run_id} in the Dagster instance", 404)
                status = "FAILURE" if launch.done.is_set() else "STARTING"
                return {
                    "runId": run_id,
                    "tier": launch.tier,
                    "status": status,
                    "finished": launch.done.is_set(),
                    "error": launch.error,
                }
            stats = instance.get_run_stats(run_id)
        status = run.status.value
        return {
            "runId": run_id,
            "tier": launch.tier if launch else None,
            "job": run.job_name,
            "status": status,
            "finished": status in FINISHED,
            "stepsSucceeded": stats.steps_succeeded,
            "stepsFailed": stats.steps_failed,
            "materializations": stats.materializations,
            "error": launch.error if launch else None,
        }


def execute_tier_ingest(cfg: RagConfig, tier: str, run_id: str, tags: dict[str, str]) -> dg.ExecuteInProcessResult:
    """Run the tier's ingest as run ``run_id`` in the instance at DAGSTER_HOME (blocking)."""
    from rag_assets.defs.assembly import loaded_definitions

    # Entering the instance makes its storage the one Dagster consults while the definitions
    # load (see runner.cli_instance); leaving it disposes it.
    with project_instance() as instance:
        sync_vault_partitions(instance, cfg)
        defs = loaded_definitions(cfg)
        vaults = [v.name for v in cfg.tier_vaults(tier)]
        keys = covering_range(list(instance.get_dynamic_partitions(VAULT_PARTITIONS[tier])), vaults)
        if keys:
            return defs.resolve_job_def(UPDATE_VAULTS_JOBS[tier]).execute_in_process(
                instance=instance,
                raise_on_error=False,
                run_config=QUIET_RUN_CONFIG,
                run_id=run_id,
                **partition_args(keys, tags),
            )
        # No vault left in the tier: refresh its store alone (purges the removed vaults' rows).
        return defs.resolve_job_def(REFRESH_TIERS_JOB).execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config=QUIET_RUN_CONFIG,
            run_id=run_id,
            tags=tags,
            asset_selection=[dg.AssetKey(TIER_STORE_ASSETS[tier])],
        )
