"""The change sensors: re-index the collections or vaults whose files changed, in one run.

A sharded collection is hashed per shard, so an edit re-indexes only the shard holding the
file; publishing then rejoins every shard of the collection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.jobs import (
    BUILD_TAG,
    PUBLISH_JOB,
    REFRESH_TIERS_JOB,
    UPDATE_COLLECTION_JOB,
    UPDATE_VAULTS_JOBS,
    publish_job,
    refresh_tiers_job,
    update_collection_job,
    update_vault_jobs,
)
from rag_assets.defs.partitions import (
    COLLECTIONS_PARTITION,
    VAULT_PARTITIONS,
    covering_range,
    partition_changes,
    range_tags,
    vault_partition_changes,
)
from rag_assets.defs.partitions import partition_requests as partition_requests_for
from rag_assets.index.freshness import read_indexed_collections
from rag_assets.index.manifest import read_manifest
from rag_assets.ingest.boundaries import collection_policy
from rag_assets.ingest.collections import discover_collections
from rag_assets.ingest.shards import collection_shards, split_snapshot
from rag_assets.ingest.sources import StatCache, snapshot_collection
from rag_assets.privacy.vaults import departed_vaults, detect_vault_changes


@dataclass
class ContentHashes:
    """The content as the sensor sees it: a hash per partition (collection or shard) and per collection."""

    partitions: dict[str, str]
    collections: dict[str, str]
    collection_of: dict[str, str]  # partition -> its collection


def initial_state(cfg: RagConfig, now: ContentHashes) -> dict:
    """Without a cursor, start from the last published build, so a current index triggers nothing.

    The manifest holds each collection's hash; a shard counts as built when its collection's
    published hash is the current one and the indexed ledger says its record holds that shard.
    """
    published = (read_manifest(cfg.manifest_path) or {}).get("collections", {})
    hashes = {name: entry.get("contentHash") for name, entry in published.items()}
    indexed = read_indexed_collections(cfg)
    sharded = {collection for key, collection in now.collection_of.items() if key != collection}
    # A sharded collection's state is its shards'; its own name would read as a removed partition.
    published_hash = {name: hashes.pop(name, None) for name in sharded}
    for key, collection in now.collection_of.items():
        if collection in sharded and published_hash[collection] == now.collections[collection]:
            hashes[key] = indexed.get(key)
    return {"hashes": hashes, "generation": {}}


def current_hashes(cfg: RagConfig) -> ContentHashes:
    """Per-partition content hashes; the stat cache keeps this to one stat per unchanged file.
    A sharded collection is walked once and its snapshot cut into its shards' hashes."""
    stat_cache = StatCache(cfg.stat_cache_path)
    policy = collection_policy(cfg)
    now = ContentHashes({}, {}, {})
    for name in discover_collections(cfg).collections:
        snapshot = snapshot_collection(cfg.content_dir, name, stat_cache, policy=policy)
        now.collections[name] = snapshot.content_hash
        split = split_snapshot(snapshot, collection_shards(cfg, name))  # {name: hash} when unsharded
        now.partitions.update(split)
        now.collection_of.update({key: name for key in split})
    stat_cache.save()
    return now


def range_request(
    job_name: str, order: Sequence[str], wanted: Sequence[str], run_key: str, tags: dict[str, str]
) -> dg.RunRequest:
    """One run over the partitions ``wanted`` (and any added in between them, see covering_range)."""
    keys = covering_range(order, wanted)
    if len(keys) == 1:
        return dg.RunRequest(job_name=job_name, partition_key=keys[0], run_key=run_key, tags=tags)
    return dg.RunRequest(job_name=job_name, run_key=run_key, tags={**tags, **range_tags(keys)})


def _after_sync(existing: list[str], added: list[str], deleted: list[str]) -> list[str]:
    """The partitions in Dagster's order once the tick's add/delete requests are applied."""
    return [p for p in existing if p not in deleted] + list(added)


def build_change_sensor(cfg: RagConfig) -> dg.SensorDefinition:
    automation = cfg.automation

    @dg.sensor(
        name="content_change_sensor",
        # Two targets, so every RunRequest names its job (Dagster rejects a request for a job
        # the sensor does not target).
        jobs=[update_collection_job, publish_job],
        minimum_interval_seconds=automation.sensor_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING if automation.sensor_enabled else dg.DefaultSensorStatus.STOPPED,
        description="Hashes every collection (stat-checked) and re-indexes the ones whose files changed, in one run.",
    )
    def content_change_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        now = current_hashes(cfg)
        hashes = now.partitions
        state = json.loads(context.cursor) if context.cursor else initial_state(cfg, now)
        before: dict = state["hashes"]
        generation: dict = state["generation"]
        existing = list(context.instance.get_dynamic_partitions(COLLECTIONS_PARTITION))
        added, deleted = partition_changes(cfg, existing)
        changed: list[str] = []
        for name, digest in sorted(hashes.items()):
            if before.get(name) == digest and name not in added:
                continue
            # The generation counter lets an edit that is later undone run again.
            generation[name] = generation.get(name, 0) + 1
            changed.append(name)
        requests = []
        if changed:
            # One run for every changed partition (collection or shard); its key names the content
            # (partition + hash + generation of each), so one state never runs twice.
            run_key = ",".join(f"{name}:{hashes[name]}:{generation[name]}" for name in changed)
            requests.append(
                range_request(
                    UPDATE_COLLECTION_JOB,
                    _after_sync(existing, added, deleted),
                    changed,
                    run_key,
                    {BUILD_TAG: "incremental"},
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
        partition_requests = partition_requests_for(COLLECTIONS_PARTITION, added, deleted)
        cursor = json.dumps({"hashes": hashes, "generation": generation}, sort_keys=True)
        if not requests and not partition_requests:
            return dg.SensorResult(skip_reason=f"no change in {len(hashes)} collections", cursor=cursor)
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partition_requests, cursor=cursor)

    return content_change_sensor


def build_vault_sensor(cfg: RagConfig) -> dg.SensorDefinition:
    automation = cfg.automation

    @dg.sensor(
        name="vault_sensor",
        jobs=[*update_vault_jobs.values(), refresh_tiers_job],
        minimum_interval_seconds=automation.sensor_interval_seconds,
        default_status=dg.DefaultSensorStatus.RUNNING if automation.sensor_enabled else dg.DefaultSensorStatus.STOPPED,
        description=(
            "Keeps each tier's vault partitions equal to rag.yaml's vaults, re-indexes the vaults whose notes "
            "(or the Safe tier's rules) changed (one run per tier), and purges vaults that left a tier."
        ),
    )
    def vault_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        # The cursor holds what was last requested per vault; the stores' `sources` tables hold
        # what was built. A vault runs when it differs from both, so an in-flight run is not
        # requested twice and an undone edit runs again.
        state = json.loads(context.cursor) if context.cursor else {"requested": {}, "generation": 0}
        requested: dict = state["requested"]
        order: dict[str, list[str]] = {}
        partition_requests: list = []
        for tier, name in VAULT_PARTITIONS.items():
            existing = list(context.instance.get_dynamic_partitions(name))
            added, deleted = vault_partition_changes(cfg, tier, existing)
            order[tier] = _after_sync(existing, added, deleted)
            partition_requests += partition_requests_for(name, added, deleted)
        stale: dict[str, dict[str, str]] = {}  # vault -> tier -> source hash
        for change in detect_vault_changes(cfg):
            if change.status in ("new", "changed"):
                stale.setdefault(change.vault, {})[change.tier] = change.source_hash
        to_run: dict[str, list[str]] = {}  # tier -> vaults
        keys: list[str] = []
        for vault, hashes in sorted(stale.items()):
            key = "|".join(sorted(f"{tier}:{digest}" for tier, digest in hashes.items()))
            if requested.get(vault) == key:
                continue
            requested[vault] = key
            keys.append(f"{vault}:{key}")
            for tier in hashes:
                to_run.setdefault(tier, []).append(vault)
        requests = []
        if to_run:
            state["generation"] += 1
            for tier, vaults in sorted(to_run.items()):
                run_key = f"{tier}:{','.join(keys)}:{state['generation']}"
                requests.append(
                    range_request(UPDATE_VAULTS_JOBS[tier], order[tier], vaults, run_key, {BUILD_TAG: "incremental"})
                )
        departed = departed_vaults(cfg)
        departed_key = json.dumps(departed, sort_keys=True)
        if departed and not requests and requested.get("__departed__") != departed_key:
            state["generation"] += 1
            requested["__departed__"] = departed_key
            requests.append(
                dg.RunRequest(
                    job_name=REFRESH_TIERS_JOB,
                    run_key=f"purge:{departed_key}:{state['generation']}",
                    tags={BUILD_TAG: "incremental"},
                )
            )
        cursor = json.dumps(state, sort_keys=True)
        if not requests and not partition_requests:
            return dg.SensorResult(skip_reason=f"no change in {len(cfg.vaults)} vaults", cursor=cursor)
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partition_requests, cursor=cursor)

    return vault_sensor
