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
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.assembly import loaded_definitions
from rag_assets.defs.distributed import CeleryRunConfig, build_collections_on_celery
from rag_assets.defs.jobs import (
    BUILD_TAG,
    PUBLISH_JOB,
    REFRESH_TIERS_JOB,
    TIER_STORE_ASSETS,
    UPDATE_COLLECTION_JOB,
    UPDATE_VAULTS_JOBS,
)
from rag_assets.defs.outcomes import (
    BuildOutcome,
    CollectionOutcome,
    VaultOutcome,
    check_outcomes,
    collection_outcomes,
    failed_partitions,
    failure_message,
    partition_metadata,
    skipped_files,
    unpartitioned_metadata,
)
from rag_assets.defs.partitions import (
    COLLECTIONS_PARTITION,
    VAULT_PARTITIONS,
    covering_range,
    range_tags,
    sync_partitions,
    sync_vault_partitions,
)
from rag_assets.ingest.collections import discover_collections
from rag_assets.ingest.shards import partition_keys

# The CLI reports failures itself, in one line without a traceback; Dagster's console
# logger would repeat them with stack traces, so it only speaks with --verbose.
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


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
    tiers: Collection[str] | None = None,
    publish: bool = True,
    verbose: bool = False,
    full: bool | None = None,
    on_collection: Callable[[CollectionOutcome], None] = lambda _: None,
    on_vault: Callable[[VaultOutcome], None] = lambda _: None,
    celery: CeleryRunConfig | None = None,
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

    ``tiers`` names the tiers whose stores the build brings up to date (the planner's: those with
    a vault to build or purge); the others are left alone. None, the default: every tier in use,
    so a run with no vault to build refreshes both stores (purges, tier cards, leak audit).
    """
    started = time.perf_counter()
    sync_partitions(instance, cfg)
    sync_vault_partitions(instance, cfg)
    defs = loaded_definitions(cfg)
    run_config = {} if verbose else QUIET_RUN_CONFIG
    all_collections = discover_collections(cfg).collections
    targets = list(all_collections if collections is None else collections)
    vault_targets = [v.name for v in cfg.vaults] if vaults is None else list(vaults)
    if full is None:
        full = set(targets) >= set(all_collections)
    tags = {BUILD_TAG: "full" if full else "incremental"}
    if not targets and not publish:
        if not _tiers_in_use(cfg, tiers):
            return BuildOutcome([], {}, [], None, time.perf_counter() - started)
        return _build_vaults(defs, cfg, instance, vault_targets, tiers, run_config, tags, started, on_vault)

    def then_vaults(outcome: BuildOutcome) -> BuildOutcome:
        """The vault runs after the collections' (when vaults are in use and the collections succeeded)."""
        if outcome.error is not None or not _tiers_in_use(cfg, tiers):
            return outcome
        built = _build_vaults(defs, cfg, instance, vault_targets, tiers, run_config, tags, started, on_vault)
        return _with_tiers(outcome, built, started)

    # A sharded collection is all of its shards' partitions (rejoined when published).
    wanted = partition_keys(cfg, targets) if partitions is None else list(partitions)
    keys = covering_range(list(instance.get_dynamic_partitions(COLLECTIONS_PARTITION)), wanted)
    if celery is not None:
        outcome = build_collections_on_celery(
            cfg,
            instance,
            celery,
            [k for k in keys if k in wanted],
            tags,
            parallel_runs,
            partitions_per_run,
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
    outcomes = collection_outcomes(result, keys, skipped_files(result), t0)
    for collection_outcome in outcomes:
        on_collection(collection_outcome)
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
    tiers: Collection[str] | None,
    run_config: dict,
    tags: dict[str, str],
    started: float,
    on_vault: Callable[[VaultOutcome], None],
) -> BuildOutcome:
    """One run per tier: its vaults (over a range of its partitions), then its store.

    A failed vault (a missing folder, a refused embedder) does not stop the others: its
    rows stay as they were and the build reports the failure. The run then stops before the
    tier store, so one ``refresh_tier_stores`` run refreshes the stores the tier runs did not
    (purges, tier cards, leak audit): also those of a tier with no vault to build, unless
    ``tiers`` (not None) leaves that tier out.
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
        if not keys and tiers is not None and tier not in tiers:
            continue  # the planner found nothing to do in this tier's store
        if keys:
            t0 = time.perf_counter()
            result = defs.resolve_job_def(UPDATE_VAULTS_JOBS[tier]).execute_in_process(
                instance=instance, raise_on_error=False, run_config=run_config, **partition_args(keys, tags)
            )
            by_partition = partition_metadata(result)
            failed = failed_partitions(result)
            for key in keys:
                if key not in per_vault:
                    per_vault[key], seconds[key] = {}, 0.0  # re-checked: in the range between two asked for
                per_vault[key].update(by_partition.get(key, {}))
                seconds[key] += sum(m.get("seconds", 0.0) for m in by_partition.get(key, {}).values())
                if not result.success and (failed is None or key in failed):
                    seconds[key] = seconds[key] or time.perf_counter() - t0
                    # The vault's own error when the step names it; else the run's (it failed as a whole).
                    errors.setdefault(key, failed[key] if failed is not None else failure_message(result))
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


def _tiers_in_use(cfg: RagConfig, tiers: Collection[str] | None = None) -> bool:
    """Vaults are configured, or were (their rows must then be purged from the tier stores),
    and ``tiers`` (None: any) names a tier to bring up to date."""
    if tiers is not None and not tiers:
        return False
    return bool(cfg.vaults) or cfg.safe_store_path.exists() or cfg.private_store_path.exists()
