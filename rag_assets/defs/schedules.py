"""The nightly full rebuilds: every collection in one run, every vault in one run per tier."""

from __future__ import annotations

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.jobs import BUILD_TAG, UPDATE_COLLECTION_JOB, UPDATE_VAULTS_JOBS
from rag_assets.defs.partitions import (
    COLLECTIONS_PARTITION,
    VAULT_PARTITIONS,
    range_tags,
)


def _nightly(cfg: RagConfig, name: str, job_name: str, partitions: str, description: str) -> dg.ScheduleDefinition:
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
        # One run over every partition, tagged `rag/build=full` (which rehashes every file);
        # dagster.yaml runs such full rebuilds one at a time.
        keys = list(context.instance.get_dynamic_partitions(partitions))
        if not keys:
            return dg.SkipReason(f"no {partitions} partitions yet")
        stamp = context.scheduled_execution_time.isoformat()
        return dg.RunRequest(run_key=f"nightly:{stamp}", tags={BUILD_TAG: "full", **range_tags(keys)})

    return nightly


def build_nightly_schedule(cfg: RagConfig) -> dg.ScheduleDefinition:
    return _nightly(
        cfg, "nightly_full_rebuild", UPDATE_COLLECTION_JOB, COLLECTIONS_PARTITION,
        "Re-index every collection and republish, in one run.",
    )


def build_nightly_vault_schedules(cfg: RagConfig) -> list[dg.ScheduleDefinition]:
    """One schedule per tier: collections and each tier's vaults have different partitions."""
    return [
        _nightly(
            cfg, f"nightly_{tier}_vault_rebuild", UPDATE_VAULTS_JOBS[tier], VAULT_PARTITIONS[tier],
            f"Rebuild every {tier} vault into the {tier.capitalize()} store with a rehash, in one run.",
        )
        for tier in ("safe", "private")
    ]
