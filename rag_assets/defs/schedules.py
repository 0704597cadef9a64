"""The nightly full rebuild."""

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.jobs import BUILD_TAG, UPDATE_COLLECTION_JOB
from rag_assets.defs.partitions import COLLECTIONS_PARTITION


def build_nightly_schedule(cfg: RagConfig) -> dg.ScheduleDefinition:
    automation = cfg.automation

    @dg.schedule(
        name="nightly_full_rebuild",
        cron_schedule=automation.nightly_cron,
        execution_timezone=automation.timezone,
        job_name=UPDATE_COLLECTION_JOB,
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Re-index and republish every collection (one run per partition, queued one at a time).",
    )
    def nightly_full_rebuild(context: dg.ScheduleEvaluationContext):
        # Each run re-indexes one collection and republishes; the `rag/build=full` tag is
        # limited to one run at a time in dagster.yaml, so the runs queue instead of racing.
        stamp = context.scheduled_execution_time.isoformat()
        for name in context.instance.get_dynamic_partitions(COLLECTIONS_PARTITION):
            yield dg.RunRequest(partition_key=name, run_key=f"nightly:{stamp}:{name}", tags={BUILD_TAG: "full"})

    return nightly_full_rebuild
