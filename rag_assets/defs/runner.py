"""Running the jobs in-process: what `rag build`, the benchmarks and tests share.

One build is at most three runs: ``update_collection`` once over the range of collection
partitions (indexing, then publishing), then ``update_safe_vaults`` and
``update_private_vaults`` once each over their tier's vault partitions (vaults, then the
tier store): the same jobs and assets the Dagster UI launches. Only a failure adds runs:
a tier whose vault step failed gets a ``refresh_tier_stores`` run for its store.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.jobs import (
    BUILD_TAG,
    COLLECTION_ASSETS,
    PUBLISH_JOB,
    REFRESH_TIERS_JOB,
    TIER_STORE_ASSETS,
    UPDATE_COLLECTION_JOB,
    UPDATE_VAULTS_JOBS,
)
from rag_assets.defs.partitions import (
    COLLECTIONS_PARTITION,
    VAULT_PARTITIONS,
    covering_range,
    range_tags,
    sync_partitions,
    sync_vault_partitions,
)
from rag_assets.defs.ranges import FAILED_PARTITION
from rag_assets.ingest.collections import discover_collections
from rag_assets.ingest.shards import partition_keys
from rag_assets.records import SkippedFile

if TYPE_CHECKING:
    from rag_assets.defs.distributed import CeleryRunConfig

# The CLI reports failures itself, in one line without a traceback; Dagster's console
# logger would repeat them with stack traces, so it only speaks with --verbose.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass
class CollectionOutcome:
    collection: str  # the partition: a collection, or one shard of one (docs~0)
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
    partitions: Sequence[str] | None = None,
    vaults: Sequence[str] | None = None,
    publish: bool = True,
    verbose: bool = False,
    full: bool | None = None,
    on_collection: Callable[[CollectionOutcome], None] = lambda _: None,
    on_vault: Callable[[VaultOutcome], None] = lambda _: None,
    celery: "CeleryRunConfig | None" = None,
    parallel_runs: int | None = None,
    partitions_per_run: int = 1,
) -> BuildOutcome:
    """Index the given collections (default: all) and publish, in one run; then build the
    given vaults (default: all) into the tier stores, one run per tier.

    ``collections=[]`` only republishes (a collection was removed); with ``publish=False``
    too, the public outputs are left alone (a vaults-only build). ``full`` tags the runs
    as a full rebuild or an incremental update, which the manifest records as lastFullBuild
    or lastIncrementalUpdate. A run covers the contiguous range of partitions from the first
    to the last one asked for (see :func:`covering_range`), so collections added in between
    are re-checked too; their caches make that cheap. ``partitions`` narrows the collections to
    these partitions (the shards of a sharded collection that changed; default: every
    partition of ``collections``); an empty list with ``publish`` only republishes.

    With ``celery`` (a dagster-celery config, see defs/distributed.py) the collections are
    built instead by runs of ``partitions_per_run`` partitions (default: one run each) on
    Celery workers, ``parallel_runs`` at a time, then published by one more run; the vaults
    still build here.
    """
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

    def then_vaults(outcome: BuildOutcome) -> BuildOutcome:
        """The vault runs after the collections' (when vaults are in use and the collections succeeded)."""
        if outcome.error is not None or not _tiers_in_use(cfg):
            return outcome
        tiers = _build_vaults(defs, cfg, instance, vault_targets, run_config, tags, started, on_vault)
        return _with_tiers(outcome, tiers, started)

    # A sharded collection is all of its shards' partitions (rejoined when published).
    wanted = partition_keys(cfg, targets) if partitions is None else list(partitions)
    keys = covering_range(list(instance.get_dynamic_partitions(COLLECTIONS_PARTITION)), wanted)
    if celery is not None:
        from rag_assets.defs.distributed import build_collections_on_celery

        outcome = build_collections_on_celery(
            cfg, instance, celery, [k for k in keys if k in wanted], tags, parallel_runs, partitions_per_run,
            on_collection,
        )
        outcome.seconds = time.perf_counter() - started
        return then_vaults(outcome)
    t0 = time.perf_counter()
    if keys:
        result = defs.resolve_job_def(UPDATE_COLLECTION_JOB).execute_in_process(
            instance=instance, raise_on_error=False, run_config=run_config, **partition_args(keys, tags)
        )
    else:
        result = defs.resolve_job_def(PUBLISH_JOB).execute_in_process(
            instance=instance, raise_on_error=False, run_config=run_config, tags=tags
        )
    skipped = result.output_for_node("parsed_documents") if _produced(result, "parsed_documents") else {}
    outcomes = collection_outcomes(result, keys, skipped, t0)
    for outcome in outcomes:
        on_collection(outcome)
    error = failure_message(result) if not result.success else ""
    failed_checks, warnings = check_outcomes(result)
    if not result.success:
        where = "publishing: " if all(o.success for o in outcomes) else ""
        return BuildOutcome(outcomes, {}, [], f"{where}{error}", time.perf_counter() - started)
    outcome = BuildOutcome(
        collections=outcomes,
        publish_metadata=unpartitioned_metadata(result),
        failed_checks=failed_checks,
        warnings=warnings,
        error=None,
        seconds=time.perf_counter() - started,
    )
    return then_vaults(outcome)


def collection_outcomes(
    result: dg.ExecuteInProcessResult | dg.JobExecutionResult, keys: Sequence[str], parsed: dict[str, Any], t0: float
) -> list[CollectionOutcome]:
    """Each collection of a run over ``keys``: built, failed, or (stopped by another's failure) left out.

    ``parsed`` holds the run's parsed_documents records ({partition: record}) for their skipped files.
    """
    by_partition = partition_metadata(result)
    failed_key, error = failed_partition(result)
    outcomes: list[CollectionOutcome] = []
    for key in keys:
        metadata = by_partition.get(key, {})
        done = set(COLLECTION_ASSETS) <= set(metadata)
        if not done and failed_key not in (None, key):
            continue  # stopped by another collection's failure: neither built nor failed
        outcomes.append(
            CollectionOutcome(
                collection=key,
                success=done,
                # A range runs in one step per asset: a partition's time is the sum of its shares.
                seconds=sum(m.get("seconds", 0.0) for m in metadata.values()) if done else time.perf_counter() - t0,
                metadata=metadata,
                skipped=list(parsed[key].skipped) if key in parsed else [],
                error=None if done else error,
            )
        )
    return outcomes


def _with_tiers(outcome: BuildOutcome, tiers: BuildOutcome, started: float) -> BuildOutcome:
    """``outcome`` of the collections, completed with the vault runs' ``tiers``."""
    outcome.vaults, outcome.tier_metadata = tiers.vaults, tiers.tier_metadata
    outcome.failed_checks += tiers.failed_checks
    outcome.warnings += tiers.warnings
    outcome.error = tiers.error
    outcome.seconds = time.perf_counter() - started
    return outcome


def partition_args(keys: Sequence[str], tags: dict[str, str]) -> dict[str, Any]:
    """``execute_in_process`` arguments for one run over ``keys`` (a contiguous range)."""
    if len(keys) == 1:
        return {"partition_key": keys[0], "tags": tags}
    return {"tags": {**tags, **range_tags(keys)}}


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
    """One run per tier: its vaults (over a range of its partitions), then its store.

    A failed vault (a missing folder, a refused embedder) does not stop the others: its
    rows stay as they were and the build reports the failure. The run then stops before the
    tier store, so one ``refresh_tier_stores`` run refreshes the stores the tier runs did not
    (purges, tier cards, leak audit): also those of a tier with no vault to build.
    """
    per_vault: dict[str, dict[str, dict[str, Any]]] = {v: {} for v in vaults}
    seconds: dict[str, float] = {v: 0.0 for v in vaults}
    errors: dict[str, str] = {}
    failed_checks: list[str] = []
    warnings: list[str] = []
    tier_metadata: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    refresh: list[str] = []
    for tier, partitions in VAULT_PARTITIONS.items():
        keys = covering_range(list(instance.get_dynamic_partitions(partitions)), vaults)
        if keys:
            t0 = time.perf_counter()
            result = defs.resolve_job_def(UPDATE_VAULTS_JOBS[tier]).execute_in_process(
                instance=instance, raise_on_error=False, run_config=run_config, **partition_args(keys, tags)
            )
            by_partition = partition_metadata(result)
            failed, error = failed_partitions(result)
            for key in keys:
                if key not in per_vault:
                    per_vault[key], seconds[key] = {}, 0.0  # re-checked: in the range between two asked for
                per_vault[key].update(by_partition.get(key, {}))
                seconds[key] += sum(m.get("seconds", 0.0) for m in by_partition.get(key, {}).values())
                if not result.success and (failed is None or key in failed):
                    seconds[key] = seconds[key] or time.perf_counter() - t0
                    errors.setdefault(key, _vault_error(error, key))
        if keys and result.success:
            tier_metadata.update(unpartitioned_metadata(result))
        else:
            # No vault of this tier to build, or its run stopped before the store.
            refresh.append(TIER_STORE_ASSETS[tier])
        if keys:
            errors_, warnings_ = check_outcomes(result)
            failed_checks += errors_
            warnings += warnings_
    if refresh:
        # One run refreshes those stores (purges, tier cards, leak audit) without their vaults.
        result = defs.resolve_job_def(REFRESH_TIERS_JOB).execute_in_process(
            instance=instance,
            raise_on_error=False,
            run_config=run_config,
            tags=tags,
            asset_selection=[dg.AssetKey(asset) for asset in refresh],
        )
        if not result.success:
            problems.append(f"tier stores: {failure_message(result)}")
        tier_metadata.update(unpartitioned_metadata(result))
        errors_, warnings_ = check_outcomes(result)
        failed_checks += errors_
        warnings += warnings_
    outcomes = []
    for vault in per_vault:
        outcome = VaultOutcome(
            vault=vault,
            success=vault not in errors,
            seconds=seconds[vault],
            metadata=per_vault[vault],
            error=errors.get(vault),
        )
        outcomes.append(outcome)
        on_vault(outcome)
    problems = [f"vault {o.vault}: {o.error}" for o in outcomes if not o.success] + problems
    return BuildOutcome(
        collections=[],
        publish_metadata={},
        failed_checks=failed_checks,
        warnings=warnings,
        error="; ".join(problems) or None,
        seconds=time.perf_counter() - started,
        vaults=outcomes,
        tier_metadata=tier_metadata,
    )


def _vault_error(error: str, vault: str) -> str:
    """The part of a tier run's error about one vault (the step names each failed vault)."""
    for part in error.split("; "):
        if part.startswith(f"vault {vault}: "):
            return part.removeprefix(f"vault {vault}: ")
    return error


def _tiers_in_use(cfg: RagConfig) -> bool:
    """Vaults are configured, or were (their rows must then be purged from the tier stores)."""
    return bool(cfg.vaults) or cfg.safe_store_path.exists() or cfg.private_store_path.exists()


def check_outcomes(result: dg.ExecuteInProcessResult) -> tuple[list[str], list[str]]:
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


def _materializations(result: dg.ExecuteInProcessResult) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        values = {k: getattr(v, "value", v) for k, v in mat.metadata.items()}
        yield mat.asset_key.to_user_string(), mat.partition, values


def partition_metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, dict[str, Any]]]:
    """Partition -> asset name -> {metadata key: plain value} for a run's partitioned materialisations."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for asset, partition, values in _materializations(result):
        if partition is not None:
            out.setdefault(partition, {})[asset] = values
    return out


def unpartitioned_metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """Asset name -> {metadata key: plain value} for a run's unpartitioned materialisations."""
    return {asset: values for asset, partition, values in _materializations(result) if partition is None}


def materialization_metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict[str, Any]]:
    """Asset name -> {metadata key: plain value} for a run's materialisations (one partition each)."""
    return {asset: values for asset, _, values in _materializations(result)}


def failed_partitions(result: dg.ExecuteInProcessResult) -> tuple[set[str] | None, str]:
    """(the partitions a failed run names as failed, or None if it names none; the error)."""
    named: set[str] | None = None
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.user_failure_data is not None:
            value = event.step_failure_data.user_failure_data.metadata.get(FAILED_PARTITION)
            if value is not None:
                named = (named or set()) | set(str(getattr(value, "value", value)).split(","))
    return named, failure_message(result) if not result.success else ""


def failed_partition(result: dg.ExecuteInProcessResult) -> tuple[str | None, str]:
    """(the one partition a failed collection run names, or None; the error)."""
    named, error = failed_partitions(result)
    return (next(iter(named)) if named else None), error


def failure_message(result: dg.ExecuteInProcessResult) -> str:
    """The user-facing error of a failed run: a ``dg.Failure``'s description (it names the
    partition), else the root cause, without the traceback."""
    messages = []
    for event in result.all_events:
        if event.is_step_failure:
            user_failure = event.step_failure_data.user_failure_data
            if user_failure is not None and user_failure.description:
                messages.append(user_failure.description)
                continue
            error = event.step_failure_data.error
            while error is not None and error.cause is not None:
                error = error.cause
            text = error.message.strip() if error else "unknown error"
            messages.append(f"step {event.step_key}: {text}")
    return "; ".join(messages) or "the run failed (see the Dagster logs)"
