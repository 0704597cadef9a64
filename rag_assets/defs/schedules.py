"""The nightly full rebuilds: the planner's forced plan (rag_assets/planning.py), as
`rag build --force` runs it: every collection in one run, every vault in one run per tier."""

from __future__ import annotations

import functools
from collections.abc import Callable

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.jobs import BUILD_TAG, UPDATE_COLLECTION_JOB, UPDATE_VAULTS_JOBS
from rag_assets.defs.partitions import (
    COLLECTIONS_PARTITION,
    VAULT_PARTITIONS,
    covering_range,
    range_tags,
)
from rag_assets.planning import Plan, observe, plan

# What one schedule runs of the forced plan: the collection partitions, or one tier's vaults.
Selector = Callable[[RagConfig, Plan], list[str]]


def _nightly(
    cfg: RagConfig, name: str, job_name: str, partitions: str, description: str, select: Selector, vaults: bool
) -> dg.ScheduleDefinition:
    automation = cfg.automation

    @dg.schedule(
        name=name,
        cron_schedule=automation.nightly_cron,
        execution_timezone=automation.timezone,
        job_name=job_name,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=description,
    )
    def nightly(context: dg.ScheduleEvaluationContext):
        # One run over what the forced plan names, tagged `rag/build=full` (which rehashes every
        # file); dagster.yaml runs such full rebuilds one at a time. The plan's observation
        # trusts the stat cache and leaves the published files unread: only names are needed.
        state = observe(cfg, verify_outputs=False, collections=not vaults, vaults=vaults)
        wanted = select(cfg, plan(cfg, state, force=True))
        keys = covering_range(list(context.instance.get_dynamic_partitions(partitions)), wanted)
        if not keys:
            return dg.SkipReason(f"no {partitions} partitions yet")
        stamp = context.scheduled_execution_time.isoformat()
        return dg.RunRequest(run_key=f"nightly:{stamp}", tags={BUILD_TAG: "full", **range_tags(keys)})

    return nightly


def build_nightly_schedule(cfg: RagConfig) -> dg.ScheduleDefinition:
    return _nightly(
        cfg,
        "nightly_full_rebuild",
        UPDATE_COLLECTION_JOB,
        COLLECTIONS_PARTITION,
        "Re-index every collection and republish, in one run.",
        lambda config, the_plan: the_plan.keys(config),
        vaults=False,
    )


def _tier_vaults(tier: str, _config: RagConfig, the_plan: Plan) -> list[str]:
    """The vaults of ``tier`` that ``the_plan`` rebuilds."""
    return the_plan.vaults.get(tier, [])


def build_nightly_vault_schedules(cfg: RagConfig) -> list[dg.ScheduleDefinition]:
    """One schedule per tier: collections and each tier's vaults have different partitions."""
    return [
        _nightly(
            cfg,
            f"nightly_{tier}_vault_rebuild",
            UPDATE_VAULTS_JOBS[tier],
            VAULT_PARTITIONS[tier],
            f"Rebuild every {tier} vault into the {tier.capitalize()} store with a rehash, in one run.",
            functools.partial(_tier_vaults, tier),
            vaults=True,
        )
        for tier in ("safe", "private")
    ]
