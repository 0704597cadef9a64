"""The stat cache: files' SHA-256 by (relative path, size, mtime, inode, ctime), one JSON file per
top folder (collection or vault), so that hashing 10,000 unchanged files costs 10,000 ``stat``
calls, not 10,000 reads, and an edit rewrites its collection's part, not the whole corpus's.

``data/stat-cache.json`` (the path the configuration names) becomes the folder
``data/stat-cache/``, holding ``<folder>.json`` per top folder (``docs.json`` for the files under
``docs/``). A part is read when a path under its folder is first asked for, and only the parts
that changed are written back: at a million chunks in 10 collections the single file was 119 MB,
read whole by each step that hashed and written whole by every edit. A single file left by an
earlier version is read once and replaced by the parts on the next save.

``rag build --force`` and the nightly rebuild ignore the cache (``trust=False``) and rehash
everything. A damaged part (or one of the wrong shape) only costs a rehash of its folder.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.ingest.walker import DEFAULT_MAX_FILE_BYTES, iter_blocks

PART_SUFFIX = ".json"


def parts_folder(path: Path) -> Path:
    """The folder of the parts of the stat cache named ``path`` (``stat-cache.json`` ->
    ``stat-cache/``)."""
    return path.with_name(path.stem)


def part_files(path: Path) -> list[Path]:
    """The files the stat cache named ``path`` is kept in now: its parts, and a single file
    left by an earlier version (to check for damage, or to remove)."""
    folder = parts_folder(path)
    parts = sorted(folder.glob(f"*{PART_SUFFIX}")) if folder.is_dir() else []
    return ([path] if path.is_file() else []) + parts


def sha256_file(path: str | Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> str:
    """The SHA-256 of a file's bytes, read in blocks (a file over ``max_bytes`` is refused)."""
    digest = hashlib.sha256()
    blocks = iter_blocks(path, max_bytes)
    next(blocks)  # the stat
    for block in blocks:
        digest.update(block)
    return digest.hexdigest()


def top_folder(rel: str) -> str:
    """``docs/`` of ``docs/a/b.md`` (a path without a folder is its own)."""
    head, sep, _ = rel.partition("/")
    return head + sep


class StatCache:
    """SHA-256 of files by (relative path, size, mtime): see the module docstring.

    The key also holds the inode and ctime, which a rename or ``cp -p`` over the file
    changes even when size and mtime stay the same.
    """

    def __init__(self, path: Path | None, *, trust: bool = True) -> None:
        self.path = path
        self._trust = trust
        self._parts: dict[str, dict[str, list]] = {}  # top folder -> {path: [size, mtime, ino, ctime, sha]}
        self._dirty: set[str] = set()
        self._legacy: dict[str, dict[str, list]] | None = None  # an earlier version's single file, by folder
        self._last_folder = ""  # the top folder ("docs/") of the last path asked for, and its part
        self._last_entries: dict[str, list] = {}
        if path is not None and path.is_file():
            self._legacy = _by_folder(_read_object(path))
            self._dirty.update(self._legacy)  # written as parts by the next save

    def sha256(self, rel: str, path: str | Path, stat: os.stat_result, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> str:
        """The file's SHA-256: the cached one while its stat key is unchanged, else read.
        ``path`` may be the walk's plain string: a hit never needs a ``Path``."""
        key = [stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns]
        # A walk asks for one folder's files in a row: its part kept at hand (finding it for each
        # of 711,000 files was 1.9 of a million-chunk edit's profiled 63 s).
        folder, entries = self._last_folder, self._last_entries
        if not (folder and rel.startswith(folder)):
            folder = top_folder(rel)
            entries = self._part(folder)
            # A top-level file's "folder" is its own name: no prefix of the next path's.
            self._last_folder, self._last_entries = (folder, entries) if folder.endswith("/") else ("", {})
        entry = entries.get(rel)
        if (
            self._trust
            and isinstance(entry, list)
            and len(entry) == 5
            and entry[:4] == key
            and isinstance(entry[4], str)
        ):
            return entry[4]
        digest = sha256_file(path, max_bytes)
        entries[rel] = [*key, digest]
        self._dirty.add(folder)
        return digest

    def forget_missing(self, prefix: str, seen: set[str], holds: Callable[[str], bool] | None = None) -> None:
        """Drop the entries under ``prefix`` not ``seen``; with ``holds``, only those it holds
        (a shard forgets its own departed files, not the other shards' ones)."""
        folder = top_folder(prefix)
        entries = self._part(folder)
        stale = [rel for rel in entries if rel.startswith(prefix) and rel not in seen and (holds is None or holds(rel))]
        for rel in stale:
            del entries[rel]
        if stale:
            self._dirty.add(folder)

    def save(self) -> None:
        """Write the parts that changed (each atomically); then remove an earlier version's single file."""
        if self.path is None or not self._dirty:
            return
        folder = parts_folder(self.path)
        folder.mkdir(parents=True, exist_ok=True)
        for name in sorted(self._dirty):
            atomic_write_bytes(folder / part_name(name), orjson.dumps(self._part(name)))
        self._dirty.clear()
        if self._legacy is not None:
            self.path.unlink(missing_ok=True)
            self._legacy = None

    def _part(self, folder: str) -> dict[str, list]:
        """The entries under the top folder ``folder``, read from its part when first asked for."""
        entries = self._parts.get(folder)
        if entries is None:
            if self._legacy is not None and folder in self._legacy:
                entries = self._legacy[folder]
            elif self.path is not None:
                entries = _read_object(parts_folder(self.path) / part_name(folder))
            else:
                entries = {}
            self._parts[folder] = entries
        return entries


def part_name(folder: str) -> str:
    """The file of a top folder's part: its name with any character a file name cannot hold quoted."""
    return quote(folder.rstrip("/") or "_", safe="") + ("" if folder.endswith("/") else "~file") + PART_SUFFIX


def _read_object(path: Path) -> dict[str, list]:
    try:
        data = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def _by_folder(entries: dict[str, list]) -> dict[str, dict[str, list]]:
    parts: dict[str, dict[str, list]] = {}
    for rel, entry in entries.items():
        parts.setdefault(top_folder(rel), {})[rel] = entry
    return parts
