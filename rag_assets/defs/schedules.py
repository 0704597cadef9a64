"""The nightly full rebuilds: every collection, and every vault."""

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.jobs import BUILD_TAG, UPDATE_COLLECTION_JOB, UPDATE_VAULT_JOB
from rag_assets.defs.partitions import COLLECTIONS_PARTITION, VAULTS_PARTITION


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
        # One run per partition, tagged `rag/build=full` (which rehashes every file); that tag
        # is limited to one run at a time in dagster.yaml, so the runs queue instead of racing.
        stamp = context.scheduled_execution_time.isoformat()
        for key in context.instance.get_dynamic_partitions(partitions):
            yield dg.RunRequest(partition_key=key, run_key=f"nightly:{stamp}:{key}", tags={BUILD_TAG: "full"})

    return nightly


def build_nightly_schedule(cfg: RagConfig) -> dg.ScheduleDefinition:
    return _nightly(
        cfg, "nightly_full_rebuild", UPDATE_COLLECTION_JOB, COLLECTIONS_PARTITION,
        "Re-index and republish every collection (one run per partition, queued one at a time).",
    )


def build_nightly_vault_schedule(cfg: RagConfig) -> dg.ScheduleDefinition:
    return _nightly(
        cfg, "nightly_vault_rebuild", UPDATE_VAULT_JOB, VAULTS_PARTITION,
        "Rebuild every vault into the Safe and Private stores (one run per vault) with a rehash.",
    )
