"""Finding the files of a collection and hashing them.

The content hash is SHA-256 over every file's relative path and bytes, in sorted
order, so renaming, moving, editing, adding or removing a file changes it.
Hidden files and folders (a leading dot: editor swap files, ``.DS_Store``,
``.git``) are not content and are left out of both the hash and the index.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterator, Mapping

from rag_assets.records import CollectionSnapshot

_READ_BLOCK = 1 << 20


def iter_collection_files(root: Path) -> Iterator[Path]:
    """Every non-hidden regular file under ``root``, in sorted relative-path order."""
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            if name.startswith("."):
                continue
            path = Path(dirpath) / name
            if path.is_file():
                found.append((path.relative_to(root).as_posix(), path))
    for _, path in sorted(found, key=lambda item: item[0]):
        yield path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_READ_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def combine_hashes(entries: Mapping[str, str]) -> str:
    """One SHA-256 over ``name -> hash`` pairs, independent of insertion order."""
    digest = hashlib.sha256()
    for name in sorted(entries):
        digest.update(name.encode("utf-8"))
        digest.update(b"\0")
        digest.update(entries[name].encode("ascii"))
        digest.update(b"\n")
    return digest.hexdigest()


def snapshot_collection(content_dir: Path, collection: str) -> CollectionSnapshot:
    """Hash one collection folder; a missing folder is an empty collection."""
    root = content_dir / collection
    files: dict[str, str] = {}
    total = 0
    if root.is_dir():
        for path in iter_collection_files(root):
            rel = path.relative_to(content_dir).as_posix()
            files[rel] = sha256_file(path)
            total += path.stat().st_size
    return CollectionSnapshot(
        collection=collection,
        root=str(root),
        content_hash=combine_hashes(files),
        files=files,
        total_bytes=total,
    )


def overall_content_hash(collection_hashes: Mapping[str, str]) -> str:
    """The index's ``contentHash``: one hash over every collection's hash."""
    return combine_hashes(collection_hashes)
