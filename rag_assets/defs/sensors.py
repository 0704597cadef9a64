"""The change sensors: run what the planner (rag_assets/planning.py) says must be rebuilt.

The collection sensor requests one run over the planned partitions (changed collections or
shards; every partition after a model, chunker or encoding change) or, with nothing to
re-index, a publish (removed collections); the vault sensor one run per tier over its planned
vaults, or a purge of vaults that left a tier. Both are the plan `rag build` would run.

A sharded collection is hashed per shard, so an edit re-indexes only the shard holding the
file; publishing then rejoins every shard of the collection.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

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
from rag_assets.ingest.shards import collection_of
from rag_assets.planning import ObservedState, Plan, observe, plan

# The cursor's entry for the last publish-only request (removed collections).
PUBLISH_KEY = "__publish__"


def partition_tokens(cfg: RagConfig, state: ObservedState, keys: list[str]) -> dict[str, str]:
    """What each planned partition would be built from: its collection's content hash and the
    build signature (model, dimension, chunker) and encoding, so a change of any re-requests it."""
    hashes = {c.collection: c.content_hash or "" for c in state.changes.collections}
    signature = state.signature.code_version if state.signature else ""
    return {key: f"{hashes.get(collection_of(key), '')}:{signature}:{state.encoding}" for key in keys}


def publish_token(the_plan: Plan) -> str:
    """A publish-only plan's identity (its causes), so the same one is not requested twice."""
    return hashlib.sha256("\n".join(sorted(str(c) for c in the_plan.causes)).encode()).hexdigest()[:16]


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
        # The planner decides what must be rebuilt (the content against the manifest and the
        # ledger, the embedder and chunker against the sidecar, the encoding); the cursor holds
        # what this sensor last requested per partition, so a run in flight is not requested
        # twice and an edit later undone runs again (the generation counter).
        state = observe(cfg, verify_outputs=False, vaults=False)
        the_plan = plan(cfg, state)
        cursor = json.loads(context.cursor) if context.cursor else {}
        requested: dict = cursor.get("requested", {})
        generation: dict = cursor.get("generation", {})
        existing = list(context.instance.get_dynamic_partitions(COLLECTIONS_PARTITION))
        added, deleted = partition_changes(cfg, existing)
        wanted = partition_tokens(cfg, state, the_plan.keys(cfg))
        changed = [key for key, token in sorted(wanted.items()) if requested.get(key) != token]
        # Requested by an earlier tick, but gone now: whether or not its run published it, a
        # publish makes sure it leaves every output.
        gone = sorted(key for key in requested if key != PUBLISH_KEY and collection_of(key) not in state.collections)
        for key in [k for k in requested if k not in wanted and k != PUBLISH_KEY]:
            del requested[key]  # current again (or gone): a later change to it runs
        requests = []
        if changed:
            for key in changed:
                generation[key] = generation.get(key, 0) + 1
                requested[key] = wanted[key]
            run_key = ",".join(f"{key}:{wanted[key].split(':', 1)[0]}:{generation[key]}" for key in changed)
            tag = "full" if the_plan.full else "incremental"
            order = _after_sync(existing, added, deleted)
            requests.append(range_request(UPDATE_COLLECTION_JOB, order, changed, run_key, {BUILD_TAG: tag}))
        elif (the_plan.publish and not wanted) or gone:
            token = publish_token(the_plan) + (f":{','.join(gone)}" if gone else "")
            if requested.get(PUBLISH_KEY) != token:
                requested[PUBLISH_KEY] = token
                generation[PUBLISH_KEY] = generation.get(PUBLISH_KEY, 0) + 1
                requests.append(
                    dg.RunRequest(
                        job_name=PUBLISH_JOB,
                        run_key=f"publish:{token}:{generation[PUBLISH_KEY]}",
                        tags={BUILD_TAG: "incremental"},
                    )
                )
        if not (the_plan.publish and not wanted) and not gone:
            requested.pop(PUBLISH_KEY, None)
        partition_requests = partition_requests_for(COLLECTIONS_PARTITION, added, deleted)
        new_cursor = json.dumps({"requested": requested, "generation": generation}, sort_keys=True)
        if not requests and not partition_requests:
            return dg.SensorResult(skip_reason=f"no change in {len(state.collections)} collections", cursor=new_cursor)
        return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=partition_requests, cursor=new_cursor)

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
        state: dict[str, Any] = json.loads(context.cursor) if context.cursor else {"requested": {}, "generation": 0}
        requested: dict = state["requested"]
        order: dict[str, list[str]] = {}
        partition_requests: list = []
        for tier, name in VAULT_PARTITIONS.items():
            existing = list(context.instance.get_dynamic_partitions(name))
            added, deleted = vault_partition_changes(cfg, tier, existing)
            order[tier] = _after_sync(existing, added, deleted)
            partition_requests += partition_requests_for(name, added, deleted)
        observed = observe(cfg, collections=False)
        the_plan = plan(cfg, observed)
        hashes = {(c.vault, c.tier): c.source_hash for c in observed.vault_changes}
        stale: dict[str, dict[str, str]] = {}  # vault -> tier -> source hash, as planned
        for tier, vaults in the_plan.vaults.items():
            for vault in vaults:
                stale.setdefault(vault, {})[tier] = hashes[(vault, tier)] or ""
        to_run: dict[str, list[str]] = {}  # tier -> vaults
        keys: list[str] = []
        for vault, tier_hashes in sorted(stale.items()):
            key = "|".join(sorted(f"{tier}:{digest}" for tier, digest in tier_hashes.items()))
            if requested.get(vault) == key:
                continue
            requested[vault] = key
            keys.append(f"{vault}:{key}")
            for tier in tier_hashes:
                to_run.setdefault(tier, []).append(vault)
        requests = []
        if to_run:
            state["generation"] += 1
            for tier, vaults in sorted(to_run.items()):
                run_key = f"{tier}:{','.join(keys)}:{state['generation']}"
                requests.append(
                    range_request(UPDATE_VAULTS_JOBS[tier], order[tier], vaults, run_key, {BUILD_TAG: "incremental"})
                )
        departed = the_plan.purge
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
