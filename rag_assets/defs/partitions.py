"""One partition per content collection, so each collection rebuilds on its own.

Dynamic partitions, because collections are folders: the change sensor adds a
partition when a folder appears and removes it when the folder goes, without a
code reload; `rag build` syncs them the same way before it runs.
"""

from __future__ import annotations

import dagster as dg

from rag_assets.config import RagConfig, discover_collections

COLLECTIONS_PARTITION = "collections"
collection_partitions = dg.DynamicPartitionsDefinition(name=COLLECTIONS_PARTITION)


def partition_changes(cfg: RagConfig, existing: list[str]) -> tuple[list[str], list[str]]:
    """(collections to add, partitions to delete) so the partitions match the folders."""
    wanted = discover_collections(cfg).collections
    return [c for c in wanted if c not in existing], [p for p in existing if p not in wanted]


def sync_partitions(instance: dg.DagsterInstance, cfg: RagConfig) -> tuple[list[str], list[str]]:
    existing = list(instance.get_dynamic_partitions(COLLECTIONS_PARTITION))
    added, removed = partition_changes(cfg, existing)
    if added:
        instance.add_dynamic_partitions(COLLECTIONS_PARTITION, added)
    for key in removed:
        instance.delete_dynamic_partition(COLLECTIONS_PARTITION, key)
    return added, removed
