"""What changed since the published build, and how old it is (no Dagster import).

Compares the collections on disk (hashed with the stat cache, so unchanged files
are not read) with the manifest of the last build: per collection, the files
added, changed and removed. `rag build`, `rag check`, `rag status`, the change
sensor and the freshness checks all read it from here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.base.file_lock import exclusive_lock
from rag_assets.base.verified import VerificationRecord
from rag_assets.config import RagConfig
from rag_assets.index import generations
from rag_assets.index import manifest as manifest_io
from rag_assets.index.collection_snapshots import take_snapshots
from rag_assets.index.index_json import read_meta
from rag_assets.index.integrity import Damage, publication_damage, read_json_object
from rag_assets.ingest import journal_snapshots
from rag_assets.ingest.boundaries import collection_policy
from rag_assets.ingest.change_journal import JournalFiles, JournalToken, read_since
from rag_assets.ingest.collections import discover_collections
from rag_assets.ingest.shards import ShardSplits, collection_of, collection_shards, split_snapshot
from rag_assets.ingest.sources import overall_content_hash
from rag_assets.ingest.stat_cache import StatCache
from rag_assets.ingest.watch import ContentWatch, WatchBuilder
from rag_assets.records import CollectionSnapshot, SkippedFile

# The one source of the freshness thresholds: `rag status` (Fresh/Stale/Old), the
# `index_recent` check and the freshness policies of the published and tier stores.
FRESH_HOURS = 12  # younger: Fresh
STALE_HOURS = 48  # up to this: Stale; older: Old


@dataclass
class CollectionChange:
    collection: str
    status: str  # new | changed | removed | unchanged
    content_hash: str | None
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)  # on disk now: relative path -> SHA-256
    skipped: list[SkippedFile] = field(default_factory=list)  # on disk now, but not readable by the build
    # The partitions to re-index: the collection, or the shards of a sharded one whose records
    # do not hold their current files (the others' records are published as they are).
    partitions: list[str] = field(default_factory=list)
    resharded: bool = False  # its shard count changed since its records were made
    # (removed, added) pairs of the same content: a file moved or renamed (also in added/removed).
    renamed: list[tuple[str, str]] = field(default_factory=list)

    def summary(self) -> str:
        if self.status == "new":
            return f"new collection ({len(self.added)} files)"
        if self.status == "removed":
            return "no longer a collection (its folder was removed or is left out)"
        if self.status == "changed" and self.resharded:
            return "re-index needed: its shard count changed"
        if self.status == "changed" and not (self.added or self.changed or self.removed):
            return "re-index needed: its last indexing was not published"
        parts = [
            f"{len(v)} {k}"
            for k, v in (("added", self.added), ("changed", self.changed), ("removed", self.removed))
            if v
        ]
        return ", ".join(parts) or "unchanged"


@dataclass
class ChangeReport:
    collections: list[CollectionChange]
    current_hash: str
    published_hash: str | None
    has_index: bool
    damage: list[Damage] = field(default_factory=list)  # published outputs that fail verification
    # With `rag watch`'s journal: the collections walked (the others' snapshots were taken as
    # the journal vouched for them); None: no journal was read, every collection was walked.
    walked: list[str] | None = None

    @property
    def changed(self) -> list[CollectionChange]:
        return [c for c in self.collections if c.status != "unchanged"]

    @property
    def up_to_date(self) -> bool:
        return self.has_index and not self.damage and not self.changed and self.current_hash == self.published_hash


@dataclass(frozen=True)
class _Watched:
    """The content hash a walk computed for a config, and what that walk read (by stat)."""

    cfg: RagConfig
    content_hash: str
    watch: ContentWatch | None
    # With `rag watch` running: the journal point the walk's snapshots are of (None: any
    # collection's walk met a symlink, which the journal cannot vouch for).
    token: JournalToken | None = None

    def unchanged(self) -> bool:
        if self.token is not None:
            read = read_since(JournalFiles(self.cfg.watch_dir), self.cfg.content_dir, self.token)
            return read is not None and not read.everything and not read.changed
        return self.watch is not None and self.watch.unchanged()


_watched: _Watched | None = None  # this process's last detect_changes(watch=True) with a watch


def detect_changes(
    cfg: RagConfig,
    *,
    save_stat_cache: bool = True,
    verify_outputs: bool = True,
    record: VerificationRecord | None = None,
    watch: bool = False,
    journal: bool = True,
) -> ChangeReport:
    """Compare the content on disk with the last published build; ``verify_outputs=False``
    leaves the published files unread (no damage reported: a sensor tick). ``watch``: keep
    what the walk read (rag_assets.ingest.watch), so that :func:`content_hash_if_unchanged`
    can later tell by stat alone whether the content hash is still this one. With `rag watch`
    running (and ``journal``), only the collections its journal names are walked
    (rag_assets.ingest.change_journal); ``journal=False`` walks them all."""
    global _watched
    gen = generations.published(cfg)
    # The header first (collections and their hashes), no ledger segment read.
    previous = (manifest_io.read_manifest(gen.manifest_path, collections=()) or {}).get("collections", {})
    stat_cache = StatCache(cfg.stat_cache_path)
    splits = ShardSplits(cfg.shard_splits_path)
    indexed = read_indexed_collections(cfg)
    policy = collection_policy(cfg)
    names = discover_collections(cfg).collections
    files = JournalFiles(cfg.watch_dir)
    reuse = journal_snapshots.reusable(files, cfg.content_dir, policy, names) if journal else None
    builder = WatchBuilder() if watch and reuse is None else None
    if builder is not None:
        builder.add_folder_entries(cfg.content_dir)  # before discovery reads it
    snapshots, linked = take_snapshots(cfg, names, stat_cache, policy, builder, reuse)
    if reuse is not None:
        journal_snapshots.save(files, cfg.content_dir, policy, reuse.token, snapshots, linked, reuse.files)
    previous, known_by_collection = _known_files(gen.manifest_path, previous, snapshots)
    changes: list[CollectionChange] = []
    hashes: dict[str, str] = {}
    for name, snapshot in snapshots.items():
        hashes[name] = snapshot.content_hash
        before = previous.get(name)
        if before is None:
            changes.append(
                CollectionChange(
                    name,
                    "new",
                    snapshot.content_hash,
                    added=sorted(snapshot.files),
                    files=snapshot.files,
                    skipped=snapshot.skipped,
                    partitions=[shard.key for shard in collection_shards(cfg, name)],
                )
            )
            continue
        known = dict(known_by_collection.get(name, {}))
        known.update({path: None for path in before.get("skipped", {})})  # skipped: hash unknown
        change = CollectionChange(
            name, "unchanged", snapshot.content_hash, files=snapshot.files, skipped=snapshot.skipped
        )
        still_skipped = {s.path for s in snapshot.skipped}
        if before.get("contentHash") == snapshot.content_hash and not records_current(cfg, snapshot, indexed, splits):
            # Published output is current, but the record the next publish would load is not
            # (a build was killed after indexing): re-index so stale text is never published.
            change.status = "changed"
        elif before.get("contentHash") != snapshot.content_hash:
            change.status = "changed"
            change.added = sorted(p for p in snapshot.files if p not in known)
            change.changed = sorted(p for p, h in snapshot.files.items() if p in known and known[p] not in (h, None))
            change.removed = sorted(p for p in known if p not in snapshot.files and p not in still_skipped)
            change.renamed = renamed_files(change.removed, change.added, known, snapshot.files)
        if change.status == "changed":
            change.partitions = stale_partitions(cfg, snapshot, indexed, splits)
            change.resharded = resharded(cfg, name, indexed)
        changes.append(change)
    for name in sorted(set(previous) - set(hashes)):
        changes.append(CollectionChange(name, "removed", None))
    if save_stat_cache:
        stat_cache.save()
        splits.save()
    current_hash = overall_content_hash(hashes)
    if builder is not None:
        made = builder.finish()
        _watched = _Watched(cfg, current_hash, made) if made is not None else None
    elif watch and reuse is not None:
        _watched = _Watched(cfg, current_hash, None, None if any(linked.values()) else reuse.token)
    meta = read_meta(gen.meta_path)
    damage = publication_damage(cfg, gen, record) if verify_outputs else []
    return ChangeReport(
        changes,
        current_hash,
        meta.get("contentHash") if meta else None,
        gen.index_path.is_file(),
        damage,
        sorted(linked) if reuse is not None else None,
    )


def content_hash_if_unchanged(cfg: RagConfig) -> str | None:
    """The content hash of this process's last ``detect_changes(cfg, watch=True)``, when
    nothing its walk read has changed since (a ``stat`` of each path, no walk, no hashing);
    None when there is none for ``cfg`` or something changed: walk again."""
    watched = _watched
    if watched is None or watched.cfg != cfg or not watched.unchanged():
        return None
    return watched.content_hash


@dataclass(frozen=True)
class ContentMatch:
    """Whether the published index is of the content on disk now: both content hashes, whether
    an index exists, and what changed by collection (for the reader; empty when told by stat)."""

    passed: bool
    published_hash: str | None
    current_hash: str
    changed: dict[str, str]
    has_index: bool = True


def published_matches_content(cfg: RagConfig) -> ContentMatch:
    """Compare the published index's content hash with the content's now. When nothing this
    process's last watched walk read has changed since (``rag build`` watches its planner's walk,
    see :func:`content_hash_if_unchanged`), its hash is the content's, told by a ``stat`` of each
    path instead of a second walk; else, or when the hashes differ, the content is walked again.
    The published files are not read for damage: the verdict does not use it, and reading them
    (every segment's SHA-256, the store's quick_check) grows with the corpus."""
    current = content_hash_if_unchanged(cfg)
    gen = generations.published(cfg)
    published = (read_meta(gen.meta_path) or {}).get("contentHash")
    if current is not None and current == published and gen.index_path.is_file():
        return ContentMatch(True, published, current, {})
    report = detect_changes(cfg, save_stat_cache=False, verify_outputs=False)
    # The manifest may not be rewritten yet when the check after a publish runs (it is the next
    # asset), so the verdict compares hashes only; the per-collection list is for the reader.
    return ContentMatch(
        report.has_index and report.current_hash == report.published_hash,
        report.published_hash,
        report.current_hash,
        {c.collection: c.summary() for c in report.changed},
        report.has_index,
    )


def _known_files(
    manifest_path: Path, previous: dict[str, Any], snapshots: dict[str, CollectionSnapshot]
) -> tuple[dict[str, Any], dict[str, dict[str, str | None]]]:
    """(the published collections, the published files of each changed one by path with
    their SHA-256). Only the changed collections' ledger segments are read: an edit of one
    file reads one collection's ledger, not the corpus's. A ledger that cannot be read makes
    every collection new, as a damaged manifest does."""
    changed = {
        name
        for name, snapshot in snapshots.items()
        if name in previous and previous[name].get("contentHash") != snapshot.content_hash
    }
    if not changed:
        return previous, {}
    published = manifest_io.read_manifest(manifest_path, collections=changed)
    if published is None:
        return {}, {}
    known: dict[str, dict[str, str | None]] = {}
    for doc in published.get("documents", {}).values():
        path = doc.get("path", "")
        known.setdefault(path.split("/", 1)[0], {})[path] = doc.get("contentHash")
    return previous, known


def renamed_files(
    removed: list[str], added: list[str], known: dict[str, str | None], files: dict[str, str]
) -> list[tuple[str, str]]:
    """(old, new) for each removed file whose content reappears under an added path."""
    by_hash: dict[str, list[str]] = {}
    for path in added:
        by_hash.setdefault(files[path], []).append(path)
    pairs = []
    for old in removed:
        candidates = by_hash.get(known.get(old) or "")
        if candidates:
            pairs.append((old, candidates.pop(0)))
    return pairs


def encoding_change(cfg: RagConfig) -> str | None:
    """ "old -> new" when the published index's vector encoding is not the configured one (a
    republish writes it anew: the content has not changed, its format has); else None."""
    meta = read_meta(generations.published(cfg).meta_path)
    if meta is None:
        return None
    published = meta.get("vectorEncoding", "float")
    return None if published == cfg.vector_encoding else f"{published} -> {cfg.vector_encoding}"


def records_current(
    cfg: RagConfig, snapshot: CollectionSnapshot, indexed: dict[str, str], splits: ShardSplits | None = None
) -> bool:
    """Whether the intermediate records the next publish loads hold the collection as it is.

    An unsharded collection missing from the ledger is trusted (the ledger is younger than
    some indexes), unless the ledger names shards of it: then its plain record, if any, is
    one left from before it was sharded, holding the content of then. A shard never is
    trusted, since a shard count just changed has no record yet.
    """
    shards = collection_shards(cfg, snapshot.collection)
    if len(shards) == 1:
        if resharded(cfg, snapshot.collection, indexed):
            return False
        return indexed.get(snapshot.collection, snapshot.content_hash) == snapshot.content_hash
    return not stale_partitions(cfg, snapshot, indexed, splits)


def resharded(cfg: RagConfig, collection: str, indexed: dict[str, str]) -> bool:
    """Whether the ledger's partitions of the collection are of another shard count than the
    configured one (the ledger keeps only the layout last built, see record_indexed_partitions)."""
    built = {key for key in indexed if collection_of(key) == collection}
    wanted = {shard.key for shard in collection_shards(cfg, collection)}
    return bool(built or len(wanted) > 1) and built != wanted


def stale_partitions(
    cfg: RagConfig, snapshot: CollectionSnapshot, indexed: dict[str, str], splits: ShardSplits | None = None
) -> list[str]:
    """The partitions of a changed collection to re-index: itself, or (sharded) the shards whose
    record, per the ledger, does not hold their files as they are now (``splits``: the shard
    hashes kept by content hash, see ShardSplits)."""
    shards = collection_shards(cfg, snapshot.collection)
    if len(shards) == 1:
        return [snapshot.collection]
    hashes = splits.split(snapshot, shards) if splits else split_snapshot(snapshot, shards)
    return [key for key, digest in hashes.items() if indexed.get(key) != digest]


def age_label(built_at: str | None, now: dt.datetime | None = None) -> tuple[str, float | None]:
    """Fresh (< 12 h), Stale (12 to 48 h) or Old (> 48 h), and the age in seconds."""
    if not built_at:
        return "Missing", None
    try:
        built = dt.datetime.fromisoformat(built_at.replace("Z", "+00:00"))
    except ValueError:
        return "Unknown", None
    age = ((now or dt.datetime.now(dt.UTC)) - built).total_seconds()
    hours = age / 3600
    return ("Fresh" if hours < FRESH_HOURS else "Stale" if hours <= STALE_HOURS else "Old"), max(age, 0.0)


# The ledger's entry for a partition whose new record is being written: no content hash equals
# it, so a build stopped before the record is on disk (killed, disk full) re-indexes the
# partition instead of trusting the record left from before.
PENDING = "pending"


def record_pending_partitions(cfg: RagConfig, keys: Iterable[str]) -> None:
    """Mark the partitions whose records a run is about to write (see :data:`PENDING`); the
    publish that loads the written records then notes what they hold."""
    record_indexed_partitions(cfg, {key: PENDING for key in keys})


def record_indexed_partitions(cfg: RagConfig, hashes: dict[str, str]) -> None:
    """Note which content each partition's intermediate record now holds (``{partition: hash}``;
    a partition is a collection or one shard of one, see rag_assets/ingest/shards.py).

    The manifest says what was *published*; this says what the next publish will *load*.
    A build killed between the two leaves them different, and ``rag build`` uses this
    ledger to re-index such a collection instead of publishing a stale record.
    """
    # Runs of other shards update the ledger at the same time (Celery workers, concurrent
    # partition runs): the lock keeps each read-modify-write whole, so none loses another's
    # entry (a lost "pending" would let a stopped run's stale record pass for current).
    with exclusive_lock(cfg.indexed_ledger_path.with_name(cfg.indexed_ledger_path.name + ".lock")):
        ledger = read_indexed_collections(cfg)
        ledger.update(hashes)
        # Entries of another shard count of these collections describe records no publish loads.
        for collection in {collection_of(key) for key in hashes}:
            layout = {shard.key for shard in collection_shards(cfg, collection)}
            for key in [k for k in ledger if collection_of(k) == collection and k not in layout]:
                del ledger[key]
        atomic_write_bytes(cfg.indexed_ledger_path, orjson.dumps(ledger, option=orjson.OPT_SORT_KEYS))


def read_indexed_collections(cfg: RagConfig) -> dict[str, str]:
    """The ledger; a damaged one (or one of the wrong shape) counts as empty, so every
    collection is re-indexed rather than trusted."""
    ledger = read_json_object(cfg.indexed_ledger_path) or {}
    return {k: v for k, v in ledger.items() if isinstance(v, str)}
