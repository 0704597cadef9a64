"""Running the jobs in-process: what `rag build`, the benchmarks and tests share.

One build is the ``index_collection`` job once per collection partition, then
the ``publish_index`` job; then ``index_vault`` once per vault partition and
``refresh_tier_stores``: the same jobs and assets the Dagster UI launches.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.jobs import (
    BUILD_TAG,
    INDEX_COLLECTION_JOB,
    INDEX_VAULT_JOB,
    PUBLISH_JOB,
    REFRESH_TIERS_JOB,
)
from rag_assets.defs.partitions import sync_partitions, sync_vault_partitions
from rag_assets.ingest.collections import discover_collections
from rag_assets.records import SkippedFile

# The CLI reports failures itself, in one line without a traceback; Dagster's console
# logger would repeat them with stack traces, so it only speaks with --verbose.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass
class CollectionOutcome:
    collection: str
    success: bool
    seconds: float
    metadata: dict[str, dict[str, Any]]  # asset -> metadata values
    skipped: list[SkippedFile] = field(default_factory=list)
    error: str | None = None


@dataclass
class VaultOutcome:
    vault: str
    success: bool
    seconds: float
    metadata: dict[str, dict[str, Any]]  # asset -> metadata values (counts only, never note text)
    error: str | None = None


@dataclass
class BuildOutcome:
    collections: list[CollectionOutcome]
    publish_metadata: dict[str, dict[str, Any]]
    failed_checks: list[str]  # checks of severity ERROR: the build failed
    error: str | None
    seconds: float
    warnings: list[str] = field(default_factory=list)  # checks of severity WARN
    vaults: list[VaultOutcome] = field(default_factory=list)
    tier_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return (
            self.error is None
            and all(c.success for c in self.collections)
            and all(v.success for v in self.vaults)
            and not self.failed_checks
        )


@contextmanager
def cli_instance() -> Iterator[dg.DagsterInstance]:
    """The project's instance when DAGSTER_HOME is set (runs then show in the UI), else ephemeral."""
    instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
    # Entering the instance makes its storage the one Dagster consults while it loads the
    # definitions; without it a storage left current by an earlier, disposed instance in the
    # same process is used (and fails). Leaving it disposes the instance.
    with instance:
        yield instance


def run_build(
    cfg: RagConfig,
    instance: dg.DagsterInstance,
    *,
    collections: Sequence[str] | None = None,
    vaults: Sequence[str] | None = None,
    publish: bool = True,
    verbose: bool = False,
    full: bool | None = None,
    on_collection: Callable[[CollectionOutcome], None] = lambda _: None,
    on_vault: Callable[[VaultOutcome], None] = lambda _: None,
) -> BuildOutcome:
    """Index the given collections (default: all) and publish, stopping at the first failure;
    then build the given vaults (default: all) into the tier stores and refresh them.

    ``collections=[]`` only republishes (a collection was removed); with ``publish=False``
    too, the public outputs are left alone (a vaults-only build). ``full`` tags the runs
    as a full rebuild or an incremental update, which the manifest records as lastFullBuild
    or lastIncrementalUpdate.
    """
    from rag_assets.definitions import build_definitions

    started = time.perf_counter()
    sync_partitions(instance, cfg)
    sync_vault_partitions(instance, cfg)
    defs = build_definitions(cfg)
    run_config = {} if verbose else QUIET_RUN_CONFIG
    all_collections = discover_collections(cfg).collections
    targets = list(all_collections if collections is None else collections)
    vault_targets = [v.name for v in cfg.vaults] if vaults is None else list(vaults)
    if full is None:
        full = set(targets) >= set(all_collections)
    tags = {BUILD_TAG: "full" if full else "incremental"}
    if not targets and not publish:
        if not _tiers_in_use(cfg):
            return BuildOutcome([], {}, [], None, time.perf_counter() - started)
        return _build_vaults(defs, cfg, instance, vault_targets, run_config, tags, started, on_vault)
    outcomes: list[CollectionOutcome] = []
    index_job = defs.resolve_job_def(INDEX_COLLECTION_JOB)
    for collection in targets:
        t0 = time.perf_counter()
        result = index_job.execute_in_process(
            partition_key=collection, instance=instance, raise_on_error=False, run_config=run_config, tags=tags
        )
        outcome = CollectionOutcome(
            collection=collection,
            success=result.success,
            seconds=time.perf_counter() - t0,
            metadata=materialization_metadata(result),
            skipped=list(result.output_for_node("parsed_documents").skipped)
            if _produced(result, "parsed_documents")
            else [],
            error=None if result.success else failure_message(result),
        )
        outcomes.append(outcome)
        on_collection(outcome)
        if not result.success:
            return BuildOutcome(outcomes, {}, [], f"collection {collection}: {outcome.error}", time.perf_counter() - started)
    result = defs.resolve_job_def(PUBLISH_JOB).execute_in_process(
        instance=instance, raise_on_error=False, run_config=run_config, tags=tags
    )
    failed_checks, warnings = _check_outcomes(result)
    outcome = BuildOutcome(
        collections=outcomes,
        publish_metadata=materialization_metadata(result),
        failed_checks=failed_checks,
        warnings=warnings,
        error=None if result.success else f"publishing: {failure_message(result)}",
        seconds=time.perf_counter() - started,
    )
    if outcome.error or not _tiers_in_use(cfg):
        return outcome
    tiers = _build_vaults(defs, cfg, instance, vault_targets, run_config, tags, started, on_vault)
    outcome.vaults, outcome.tier_metadata = tiers.vaults, tiers.tier_metadata
    outcome.failed_checks += tiers.failed_checks
    outcome.warnings += tiers.warnings
    outcome.error = tiers.error
    outcome.seconds = time.perf_counter() - started
    return outcome


def _build_vaults(
    defs: dg.Definitions,
    cfg: RagConfig,
    instance: dg.DagsterInstance,
    vaults: Sequence[str],
    run_config: dict,
    tags: dict[str, str],
    started: float,
    on_vault: Callable[[VaultOutcome], None],
) -> BuildOutcome:
    """Each vault's run, then one refresh of both tier stores (purges, cards, leak audit).

    A failed vault (a missing folder, a refused embedder) does not stop the others: its
    rows stay as they were and the build reports the failure.
    """
    outcomes: list[VaultOutcome] = []
    job = defs.resolve_job_def(INDEX_VAULT_JOB)
    for vault in vaults:
        t0 = time.perf_counter()
        result = job.execute_in_process(
            partition_key=vault, instance=instance, raise_on_error=False, run_config=run_config, tags=tags
        )
        outcome = VaultOutcome(
            vault=vault,
            success=result.success,
            seconds=time.perf_counter() - t0,
            metadata=materialization_metadata(result),
            error=None if result.success else failure_message(result),
        )
        outcomes.append(outcome)
        on_vault(outcome)
    result = defs.resolve_job_def(REFRESH_TIERS_JOB).execute_in_process(
        instance=instance, raise_on_error=False, run_config=run_config, tags=tags
    )
    failed_checks, warnings = _check_outcomes(result)
    errors = [f"vault {o.vault}: {o.error}" for o in outcomes if not o.success]
    if not result.success:
        errors.append(f"tier stores: {failure_message(result)}")
    return BuildOutcome(
        collections=[],
        publish_metadata={},
        failed_checks=failed_checks,
        warnings=warnings,
        error="; ".join(errors) or None,
        seconds=time.perf_counter() - started,
        vaults=outcomes,
        tier_metadata=materialization_metadata(result),
    )


def _tiers_in_use(cfg: RagConfig) -> bool:
    """Vaults are configured, or were (their rows must then be purged from the tier stores)."""
    return bool(cfg.vaults) or cfg.safe_store_path.exists() or cfg.private_store_path.exists()


def _check_outcomes(result: dg.ExecuteInProcessResult) -> tuple[list[str], list[str]]:
    """(failed ERROR checks, failed WARN checks) of a run, one line each."""
    failed = [c for c in result.get_asset_check_evaluations() if not c.passed]
    errors = [_describe_check(c) for c in failed if c.severity == dg.AssetCheckSeverity.ERROR]
    return errors, [_describe_check(c) for c in failed if c.severity != dg.AssetCheckSeverity.ERROR]


def _describe_check(evaluation) -> str:
    """A check result in one line: its problems, or its short metadata values."""
    values = {k: getattr(v, "value", v) for k, v in evaluation.metadata.items()}
    if values.get("problems"):
        detail = str(values["problems"]).replace("\n", " ")
    else:
        detail = ", ".join(f"{k}={v}" for k, v in values.items() if len(str(v)) <= 80 and "\n" not in str(v))
    return f"{evaluation.check_name}: {detail}"


def _produced(result: dg.ExecuteInProcessResult, node: str) -> bool:
    return any(e.is_successful_output and e.node_name == node for e in result.all_node_events)


def materialization_metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """Asset name -> {metadata key: plain value} for a run's materialisations."""
    out: dict[str, dict[str, Any]] = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        out[mat.asset_key.to_user_string()] = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
    return out


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The user-facing error of a failed run: the root cause, without the traceback."""
    messages = []
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            while error is not None and error.cause is not None:
                error = error.cause
            text = error.message.strip() if error else "unknown error"
            messages.append(f"step {event.step_key}: {text}")
    return "; ".join(messages) or "the run failed (see the Dagster logs)"
