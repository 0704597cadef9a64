"""The change sensor: re-index a collection soon after one of its files changes."""

import json

import dagster as dg

from rag_assets.config import RagConfig, discover_collections
from rag_assets.defs.jobs import BUILD_TAG, PUBLISH_JOB, UPDATE_COLLECTION_JOB
from rag_assets.defs.partitions import COLLECTIONS_PARTITION, partition_changes
from rag_assets.manifest import read_manifest
from rag_assets.sources import StatCache, snapshot_collection


def initial_state(cfg: RagConfig) -> dict:
    """Without a cursor, start from the last published build, so a current index triggers nothing."""
    published = (read_manifest(cfg.manifest_path) or {}).get("collections", {})
    return {"hashes": {name: entry.get("contentHash") for name, entry in published.items()}, "generation": {}}


def current_hashes(cfg: RagConfig) -> dict[str, str]:
    """Per-collection content hashes; the stat cache keeps this to one stat per unchanged file."""
    stat_cache = StatCache(cfg.stat_cache_path)
    hashes = {
        name: snapshot_collection(cfg.content_dir, name, stat_cache).content_hash
        for name in discover_collections(cfg).collections
    }
    stat_cache.save()
    return hashes


def build_change_sensor(cfg: RagConfig) -> dg.SensorDefinition:
    automation = cfg.automation

    @dg.sensor(
        name="content_change_sensor",
        job_name=UPDATE_COLLECTION_JOB,
        minimum_interval_seconds=automation.sensor_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING if automation.sensor_enabled else dg.DefaultSensorStatus.STOPPED,
        description="Hashes every collection (stat-checked) and re-indexes the ones whose files changed.",
    )
    def content_change_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        state = json.loads(context.cursor) if context.cursor else initial_state(cfg)
        before: dict = state["hashes"]
        generation: dict = state["generation"]
        hashes = current_hashes(cfg)
        existing = list(context.instance.get_dynamic_partitions(COLLECTIONS_PARTITION))
        added, deleted = partition_changes(cfg, existing)
        requests = []
        for name, digest in sorted(hashes.items()):
            if before.get(name) == digest and name not in added:
                continue
            # The run key names the content (collection + hash) so one state never runs twice;
            # the generation counter lets an edit that is later undone run again.
            generation[name] = generation.get(name, 0) + 1
            requests.append(
                dg.RunRequest(
                    partition_key=name,
                    run_key=f"{name}:{digest}:{generation[name]}",
                    tags={BUILD_TAG: "incremental"},
                )
            )
        removed = sorted(set(before) - set(hashes))
        if removed and not requests:
            # Nothing to re-index, but the removed collections must leave every output.
            requests.append(
                dg.RunRequest(
                    job_name=PUBLISH_JOB,
                    run_key=f"removed:{','.join(removed)}:{sum(generation.values())}",
                    tags={BUILD_TAG: "incremental"},
                )
            )
        partition_requests = []
        if added:
            partition_requests.append(dg.AddDynamicPartitionsRequest(COLLECTIONS_PARTITION, added))
        if deleted:
            partition_requests.append(dg.DeleteDynamicPartitionsRequest(COLLECTIONS_PARTITION, deleted))
        cursor = json.dumps({"hashes": hashes, "generation": generation}, sort_keys=True)
        if not requests and not partition_requests:
            return dg.SensorResult(skip_reason=f"no change in {len(hashes)} collections", cursor=cursor)
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partition_requests, cursor=cursor)

    return content_change_sensor
