"""Hashing the files of a collection, with a cache of unchanged files' hashes
(:mod:`rag_assets.ingest.stat_cache`).

The content hash is SHA-256 over every indexed file's relative path and bytes, in sorted
order, so renaming, moving, editing, adding or removing a file changes it. The files are
those :func:`rag_assets.ingest.walker.list_folder` lists (the same the parser reads): hidden
files and folders are left out, and a skipped entry (a symlink out of the content folder,
a FIFO, a file too large, an undecodable name) is never read; only its path and reason
enter the hash, so a newly skipped file still triggers the build that reports it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from rag_assets.ingest.stat_cache import StatCache
from rag_assets.ingest.walker import (
    FileRefused,
    Listing,
    WalkPolicy,
    default_policy,
    list_folder,
)
from rag_assets.records import CollectionSnapshot, SkippedFile


def iter_collection_files(root: Path, policy: WalkPolicy | None = None) -> Iterator[Path]:
    """Every readable, non-hidden regular file under ``root``, in sorted relative-path order."""
    for _, path, _ in iter_collection_entries(root, policy):
        yield path


def iter_collection_entries(root: Path, policy: WalkPolicy | None = None) -> list[tuple[str, Path, os.stat_result]]:
    """(relative path, path, stat) of every file :func:`list_folder` lets a build read."""
    return [(f.rel, f.path, f.stat) for f in list_folder(root, policy).files]


def combine_hashes(entries: Mapping[str, str]) -> str:
    """One SHA-256 over ``name -> hash`` pairs, independent of insertion order."""
    digest = hashlib.sha256()
    for name in sorted(entries):
        # surrogateescape: a name that slipped through undecoded hashes as its raw bytes
        # instead of failing the whole build.
        digest.update(name.encode("utf-8", "surrogateescape"))
        digest.update(b"\0")
        digest.update(entries[name].encode("ascii"))
        digest.update(b"\n")
    return digest.hexdigest()


def skip_marker(reason: str) -> str:
    """What a skipped entry contributes to the content hash: its reason, not its bytes."""
    return "skipped:" + hashlib.sha256(reason.encode("utf-8", "backslashreplace")).hexdigest()


def snapshot_collection(
    content_dir: Path,
    collection: str,
    stat_cache: StatCache | None = None,
    *,
    root: Path | None = None,
    policy: WalkPolicy | None = None,
    holds: Callable[[str], bool] | None = None,
    listing: Listing | None = None,
) -> CollectionSnapshot:
    """Hash one collection folder (``root``, default ``content_dir/collection``); a missing
    folder is an empty collection. ``policy`` defaults to staying inside ``content_dir``
    (or ``root`` when given) and out of its vaults folder. ``holds`` keeps only the files
    (and skipped entries) whose ``<collection>/...`` path it accepts: one shard's.
    ``listing``: the folder's :func:`list_folder` with this policy and the ``<collection>/``
    prefix, when the caller has it already (the shards of a collection share one walk)."""
    policy = policy or default_policy(root or content_dir)
    root = root or content_dir / collection
    cache = stat_cache or StatCache(None)
    files: dict[str, str] = {}
    skipped: list[SkippedFile] = []
    total = 0
    if root.is_dir():
        listing = listing if listing is not None else list_folder(root, policy, prefix=f"{collection}/")
        skipped.extend(s for s in listing.skipped if holds is None or holds(s.path))
        for item in listing.files:
            rel = f"{collection}/{item.rel}"
            if holds is not None and not holds(rel):
                continue
            try:
                # The walk's string, not item.path: a Path per file was most of a walk's time,
                # and a stat cache hit (nearly every file) never opens the file.
                files[rel] = cache.sha256(rel, item.where, item.stat, policy.max_file_bytes)
            except (OSError, FileRefused) as exc:
                # Vanished, unreadable or swapped for a FIFO since the listing: one bad file
                # is one skipped file (the parser reports the same path), not a failed build.
                skipped.append(SkippedFile(rel, unreadable_reason(exc)))
                continue
            total += item.stat.st_size
    cache.forget_missing(f"{collection}/", set(files), holds)
    snapshot = CollectionSnapshot(
        collection=collection, root=str(root), content_hash="", files=files, total_bytes=total, skipped=skipped
    )
    snapshot.content_hash = combine_hashes(snapshot_entries(snapshot))
    return snapshot


def snapshot_entries(snapshot: CollectionSnapshot) -> dict[str, str]:
    """What the content hash covers: each file's SHA-256, and each skipped entry's marker."""
    markers = {s.path: skip_marker(s.reason) for s in snapshot.skipped if s.path not in snapshot.files}
    return {**markers, **snapshot.files}


# A file listed and hashed that is gone when the parser reads the folder: reported, never
# silently missing from an index whose content hash still covers it.
VANISHED_REASON = (
    "file vanished while the build was reading the folder; the next build indexes it if it is back, or drops it"
)


def unreadable_reason(exc: BaseException) -> str:
    """The skip reason for a file that could not be read."""
    if isinstance(exc, FileRefused):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return VANISHED_REASON
    if isinstance(exc, OSError):
        return f"cannot read file: {exc.strerror or exc}"
    return f"cannot read file: {exc}"


def overall_content_hash(collection_hashes: Mapping[str, str]) -> str:
    """The index's ``contentHash``: one hash over every collection's hash."""
    return combine_hashes(collection_hashes)
