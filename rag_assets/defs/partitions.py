"""One partition per content collection, so each collection rebuilds on its own.

Dynamic partitions, because collections are folders: the change sensor adds a
partition when a folder appears and removes it when the folder goes, without a
code reload; `rag build` syncs them the same way before it runs.
"""

from __future__ import annotations

from typing import Sequence

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.ingest.collections import discover_collections

COLLECTIONS_PARTITION = "collections"
collection_partitions = dg.DynamicPartitionsDefinition(name=COLLECTIONS_PARTITION)


def _changes(wanted: Sequence[str], existing: list[str]) -> tuple[list[str], list[str]]:
    return [w for w in wanted if w not in existing], [p for p in existing if p not in wanted]


def partition_changes(cfg: RagConfig, existing: list[str]) -> tuple[list[str], list[str]]:
    """(collections to add, partitions to delete) so the partitions match the folders."""
    return _changes(discover_collections(cfg).collections, existing)


def _sync(instance: dg.DagsterInstance, name: str, wanted: Sequence[str]) -> tuple[list[str], list[str]]:
    added, removed = _changes(wanted, list(instance.get_dynamic_partitions(name)))
    if added:
        instance.add_dynamic_partitions(name, added)
    for key in removed:
        instance.delete_dynamic_partition(name, key)
    return added, removed


def sync_partitions(instance: dg.DagsterInstance, cfg: RagConfig) -> tuple[list[str], list[str]]:
    return _sync(instance, COLLECTIONS_PARTITION, discover_collections(cfg).collections)


def partition_requests(name: str, added: list[str], deleted: list[str]) -> list:
    """The sensor-side equivalent of a sync: requests Dagster applies with the tick."""
    requests: list = []
    if added:
        requests.append(dg.AddDynamicPartitionsRequest(name, added))
    if deleted:
        requests.append(dg.DeleteDynamicPartitionsRequest(name, deleted))
    return requests


VAULTS_PARTITION = "vaults"
# One partition per note vault listed in rag.yaml; kept equal to the config by the vault
# sensor (in `dagster dev`) and by `rag build`, so removing a vault from the config removes
# its partition and its rows from both tier stores.
vault_partitions = dg.DynamicPartitionsDefinition(name=VAULTS_PARTITION)


def vault_partition_changes(cfg: RagConfig, existing: list[str]) -> tuple[list[str], list[str]]:
    return _changes([v.name for v in cfg.vaults], existing)


def sync_vault_partitions(instance: dg.DagsterInstance, cfg: RagConfig) -> tuple[list[str], list[str]]:
    return _sync(instance, VAULTS_PARTITION, [v.name for v in cfg.vaults])
