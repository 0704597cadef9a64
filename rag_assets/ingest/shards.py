"""Sharded collections: which shard holds a file, and the partition keys of the shards.

A collection configured with ``shards: {docs: 4}`` is four partitions, ``docs~0`` to
``docs~3``; an unsharded collection keeps its plain key (``docs``). A file belongs to the
shard picked by SHA-256 of its path relative to the collection, so the split is the same
on every machine and run (Python's ``hash()`` is salted per process) and a file keeps its
shard until it is renamed.

A shard's content hash covers its files *and* its place (``i/n``), so changing the shard
count changes every shard's hash: the change sensor and the indexed ledger then treat every
shard of the collection as changed, never a record made under the old split as current.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.config import SHARD_MARK, RagConfig
from rag_assets.ingest.sources import combine_hashes, snapshot_collection, snapshot_entries
from rag_assets.ingest.stat_cache import StatCache
from rag_assets.ingest.walker import Listing, WalkPolicy
from rag_assets.records import CollectionSnapshot, ShardPart

# The name under which a shard's place enters its content hash. File names always start
# with "<collection>/", so it cannot collide with one.
_PLACE_ENTRY = f"{SHARD_MARK}shard"


@dataclass(frozen=True)
class Shard:
    """One partition of a collection: shard ``index`` of ``count`` (``count == 1``: unsharded)."""

    collection: str
    index: int = 0
    count: int = 1

    @property
    def key(self) -> str:
        return partition_key(self.collection, self.index, self.count)

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def holds(self, path: str) -> bool:
        """Whether the file ``<collection>/<path in the collection>`` belongs to this shard."""
        if self.count == 1:
            return True
        return shard_of(path, self.count) == self.index

    def label(self) -> str:
        return f"{self.index + 1} of {self.count}"


def shard_of(path: str, count: int) -> int:
    """The shard of the file ``<collection>/<path in the collection>`` among ``count``."""
    inside = path.split("/", 1)[1] if "/" in path else path
    return shard_index(inside, count)


def shard_index(path_in_collection: str, count: int) -> int:
    """The shard of a file: SHA-256 of its path relative to the collection, modulo ``count``."""
    digest = hashlib.sha256(path_in_collection.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") % count


def partition_key(collection: str, index: int, count: int) -> str:
    return collection if count == 1 else f"{collection}{SHARD_MARK}{index}"


def collection_shards(cfg: RagConfig, collection: str) -> list[Shard]:
    count = cfg.shard_count(collection)
    return [Shard(collection, i, count) for i in range(count)]


def partition_keys(cfg: RagConfig, collections: Iterable[str]) -> list[str]:
    """The partition keys of ``collections``, each collection's shards in order."""
    return [shard.key for name in collections for shard in collection_shards(cfg, name)]


def collection_of(key: str) -> str:
    """The collection a partition key belongs to (collection names never hold the shard mark)."""
    return key.split(SHARD_MARK, 1)[0]


def shard_for_key(cfg: RagConfig, key: str) -> Shard:
    """The shard a partition key names under the current configuration.

    A key left from another shard count (``docs~3`` once ``docs`` has 2 shards, before the
    partitions are synced) is refused rather than built as a shard that no longer exists.
    """
    collection, mark, index = key.partition(SHARD_MARK)
    count = cfg.shard_count(collection)
    if not mark:
        if count != 1:
            raise ValueError(
                f"partition {key} is collection {collection} unsharded, but it is configured with {count} shards"
            )
        return Shard(collection)
    if not index.isdigit() or int(index) >= count or count == 1 or str(int(index)) != index:
        raise ValueError(f"partition {key} is not a shard of {collection} ({count} shard(s) configured)")
    return Shard(collection, int(index), count)


def shard_hash(entries: Mapping[str, str], shard: Shard) -> str:
    """The content hash of one shard's files (``path -> hash or skip marker``) and its place."""
    if not shard.sharded:
        return combine_hashes(entries)
    return combine_hashes({**entries, _PLACE_ENTRY: f"{shard.index}/{shard.count}"})


def split_snapshot(snapshot: CollectionSnapshot, shards: Sequence[Shard]) -> dict[str, str]:
    """``{partition key: content hash}`` of a whole collection's snapshot cut into ``shards``:
    the hashes the shards' own ``content_hash`` partitions compute (one walk instead of n)."""
    if len(shards) == 1 and not shards[0].sharded:
        return {shards[0].key: snapshot.content_hash}
    # Each path's shard computed once (a SHA-256 each), not asked of every shard in turn: at
    # 16 shards of 71,000 files that was 1.1 million hashes per change detection.
    count = shards[0].count
    parts: list[dict[str, str]] = [{} for _ in range(count)]
    for path, digest in snapshot_entries(snapshot).items():
        parts[shard_of(path, count)][path] = digest
    return {shard.key: shard_hash(parts[shard.index], shard) for shard in shards}


class ShardSplits:
    """The shard hashes of each sharded collection, as :func:`split_snapshot` made them last, kept
    by the collection's content hash in one small JSON file: a collection unchanged since is not
    cut again (a SHA-256 of every path; 3.5 s of a one-file edit's change detection at a million
    chunks in 160 shards, for the collections the edit did not touch). The content hash covers
    every path, file digest and skip marker the split reads, so a kept split is the split of the
    snapshot whose hash it is kept under. A file that cannot be read only costs the splits."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, dict] = {}
        self._dirty = False
        if path is not None:
            try:
                data = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                data = {}
            self._entries = data if isinstance(data, dict) else {}

    def split(self, snapshot: CollectionSnapshot, shards: Sequence[Shard]) -> dict[str, str]:
        """``split_snapshot(snapshot, shards)``, kept from an earlier call for the same content."""
        key = f"{snapshot.content_hash}:{shards[0].count}"
        kept = self._entries.get(snapshot.collection)
        if isinstance(kept, dict) and kept.get("key") == key:
            hashes = kept.get("shards")
            if isinstance(hashes, dict) and sorted(hashes) == sorted(s.key for s in shards):
                return {str(k): str(v) for k, v in hashes.items()}
        hashes = split_snapshot(snapshot, shards)
        self._entries[snapshot.collection] = {"key": key, "shards": hashes}
        self._dirty = True
        return hashes

    def save(self) -> None:
        if self.path is not None and self._dirty:
            atomic_write_bytes(self.path, orjson.dumps(self._entries))
            self._dirty = False


def snapshot_shard(
    content_dir: Path, shard: Shard, stat_cache: StatCache, policy: WalkPolicy, listing: Listing | None = None
) -> CollectionSnapshot:
    """The snapshot of one shard's files, with the shard's content hash (see :func:`shard_hash`);
    ``listing``: the collection folder's, when the caller has it (see snapshot_collection)."""
    if not shard.sharded:
        return snapshot_collection(content_dir, shard.collection, stat_cache, policy=policy, listing=listing)
    snapshot = snapshot_collection(
        content_dir, shard.collection, stat_cache, policy=policy, holds=shard.holds, listing=listing
    )
    snapshot.content_hash = shard_hash(snapshot_entries(snapshot), shard)
    return snapshot


def shard_part(shard: Shard, snapshot: CollectionSnapshot) -> ShardPart | None:
    """What a shard's records carry so publishing can rejoin the collection; None unsharded."""
    if not shard.sharded:
        return None
    return ShardPart(shard.index, shard.count, snapshot_entries(snapshot))
