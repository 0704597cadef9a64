"""Partitions: one per content collection (or per shard of a sharded one), and one per vault of each tier.

Dynamic partitions, because collections are folders and vaults are config entries: the
sensors add a partition when one appears and remove it when it goes, without a code
reload; `rag build` syncs them the same way before it runs. A collection configured with
``shards: {docs: 2}`` is the partitions ``docs~0`` and ``docs~1`` (rag_assets/ingest/shards.py);
changing its shard count swaps those partitions for the new ones.

A build runs each partitioned asset once over a *range* of partitions (a single-run
backfill, see :func:`range_tags`), so its runs do not grow with the number of collections.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.ingest.collections import discover_collections
from rag_assets.ingest.shards import partition_keys

COLLECTIONS_PARTITION = "collections"
collection_partitions = dg.DynamicPartitionsDefinition(name=COLLECTIONS_PARTITION)

# One partitions definition per tier, so each tier's asset lists only its own vaults: the
# private vault `personal` is never a partition of the Safe tier. The Private store holds
# every vault (raw), the Safe store only the vaults configured `tier: safe`.
SAFE_VAULTS_PARTITION = "safe_vaults"
PRIVATE_VAULTS_PARTITION = "private_vaults"
safe_vault_partitions = dg.DynamicPartitionsDefinition(name=SAFE_VAULTS_PARTITION)
private_vault_partitions = dg.DynamicPartitionsDefinition(name=PRIVATE_VAULTS_PARTITION)
VAULT_PARTITIONS = {"safe": SAFE_VAULTS_PARTITION, "private": PRIVATE_VAULTS_PARTITION}

# The run tags of a single-run backfill: every partitioned asset of the run handles the
# partitions from start to end (in the order they were added) in one step.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"


def _changes(wanted: Sequence[str], existing: list[str]) -> tuple[list[str], list[str]]:
    return [w for w in wanted if w not in existing], [p for p in existing if p not in wanted]


def collection_partition_keys(cfg: RagConfig) -> list[str]:
    """The partitions the collections should have: one per collection, one per shard of a sharded one."""
    return partition_keys(cfg, discover_collections(cfg).collections)


def partition_changes(cfg: RagConfig, existing: list[str]) -> tuple[list[str], list[str]]:
    """(partitions to add, partitions to delete) so the partitions match the folders and shard counts."""
    return _changes(collection_partition_keys(cfg), existing)


def _sync(instance: dg.DagsterInstance, name: str, wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    added, removed = _changes(wanted, list(instance.get_dynamic_partitions(name)))
    if added:
        instance.add_dynamic_partitions(name, added)
    for key in removed:
        instance.delete_dynamic_partition(name, key)
    return added, removed


def sync_partitions(instance: dg.DagsterInstance, cfg: RagConfig) -> tuple[list[str], list[str]]:
    return _sync(instance, COLLECTIONS_PARTITION, collection_partition_keys(cfg))


def partition_requests(name: str, added: list[str], deleted: list[str]) -> list:
    """The sensor-side equivalent of a sync: requests Dagster applies with the tick."""
    requests: list = []
    if added:
        requests.append(dg.AddDynamicPartitionsRequest(name, added))
    if deleted:
        requests.append(dg.DeleteDynamicPartitionsRequest(name, deleted))
    return requests


def tier_vault_names(cfg: RagConfig, tier: str) -> list[str]:
    """The vaults whose rows the tier's store holds: the partitions of that tier's asset."""
    return [v.name for v in cfg.tier_vaults(tier)]


def vault_partition_changes(cfg: RagConfig, tier: str, existing: list[str]) -> tuple[list[str], list[str]]:
    return _changes(tier_vault_names(cfg, tier), existing)


def sync_vault_partitions(instance: dg.DagsterInstance, cfg: RagConfig) -> None:
    for tier, name in VAULT_PARTITIONS.items():
        _sync(instance, name, tier_vault_names(cfg, tier))


def covering_range(order: Sequence[str], wanted: Sequence[str]) -> list[str]:
    """The partitions a single run over ``wanted`` handles: Dagster runs contiguous ranges,
    so the ones added in between are re-checked too (their caches make that cheap)."""
    positions = [order.index(key) for key in wanted if key in order]
    if not positions:
        return []
    return list(order[min(positions) : max(positions) + 1])


def range_tags(keys: Sequence[str]) -> dict[str, str]:
    """Run tags that make one run handle the partitions ``keys[0]`` to ``keys[-1]``."""
    return {RANGE_START_TAG: keys[0], RANGE_END_TAG: keys[-1]}
