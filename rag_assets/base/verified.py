"""Remembering which files were verified, so a check costs what changed since the last one.

``rag status``, ``rag check`` and the start of a build verify the published files (SHA-256
against the sidecar) and the SQLite files (``PRAGMA quick_check``): minutes at a million
chunks. A :class:`VerificationRecord` keeps, beside the outputs, each file that passed a check
with its fingerprint: size, mtime_ns, ctime_ns, inode and device (and those of its SQLite
``-wal`` file). A check is skipped only while the fingerprint is unchanged. Any write changes
ctime, and ``os.utime`` cannot set ctime, so bytes changed with the size and mtime restored are
still verified again. Only passing checks are remembered, so damage is reported each time.

Timestamps are coarse (one kernel tick, up to 10 ms on ext4), so two same-size writes in one
tick can share a fingerprint: a file changed less than :data:`RACY_MARGIN_NS` before its check
is not remembered (git's "racily clean" rule) and is verified again next time.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import orjson

from rag_assets.base.atomic import atomic_write_bytes

RECORD_NAME = "verified.json"
RACY_MARGIN_NS = 100_000_000  # 0.1 s: ten times the coarsest tick of the usual file systems

Fingerprint = list[int]
T = TypeVar("T")


@dataclass
class VerificationCounts:
    """How many checks were run and how many were skipped as already verified (this process)."""

    performed: int = 0
    skipped: int = 0


counts = VerificationCounts()  # the public counter: `rag check` prints it, tests read it


def reset_counts() -> None:
    counts.performed = counts.skipped = 0


def fingerprint(path: Path) -> Fingerprint | None:
    """What changes whenever the file's bytes do (None: no such file). A SQLite ``-wal``
    file counts when it holds anything, by size, mtime and inode: opening the database, even
    read-only, creates or resets an empty log (and so its ctime)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    prints = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
    try:
        wal = path.with_name(path.name + "-wal").stat()
    except FileNotFoundError:
        return prints
    return prints + [wal.st_size, wal.st_mtime_ns, wal.st_ino] if wal.st_size else prints


@dataclass
class VerificationRecord:
    """Passing checks by file (``{path: {check: fingerprint}}``), kept in one JSON file.

    ``deep``: nothing is taken as verified (every check runs), results are still remembered."""

    path: Path
    deep: bool = False
    entries: dict[str, dict[str, Fingerprint]] = field(default_factory=dict)
    changed: bool = False

    @classmethod
    def load(cls, path: Path, *, deep: bool = False) -> VerificationRecord:
        """The record at ``path``; an empty one when it is missing or damaged (so all is verified)."""
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            data = None
        entries = data.get("files") if isinstance(data, dict) else None
        return cls(path, deep, entries if isinstance(entries, dict) else {})

    def run(self, file: Path, check: str, verify: Callable[[], str | None]) -> str | None:
        """``verify()`` (the problem, or None when sound) unless ``file`` passed ``check``
        with its present fingerprint; a pass is remembered when the file did not change meanwhile."""
        before = fingerprint(file)
        if before is None:
            return verify()  # no file: nothing to read (the check says whether that is damage)
        if not self.deep and self.entries.get(str(file), {}).get(check) == before:
            counts.skipped += 1
            return None
        counts.performed += 1
        problem = verify()
        if problem is None and fingerprint(file) == before and not _racy(before):
            self.entries.setdefault(str(file), {})[check] = before
            self.changed = True
        return problem

    def vouch(self, file: Path, check: str) -> None:
        """Remember ``file`` as passing ``check`` without reading it: for a file this process has
        just made, or changed by committed SQLite transactions after it passed the check, while
        nothing else changed it (a store slot under the publish lock, named by no generation
        until the swap; a cache whose changes since its check were all this process's, see
        rag_assets.base.sqlite_cache.changed_only_here). Its present fingerprint is remembered once it is past the
        racy margin (waited for, at most :data:`RACY_MARGIN_NS`) and unchanged meanwhile; any
        later write changes it, so damage done after is still found. ``deep`` records vouch
        for nothing."""
        before = fingerprint(file)
        if before is None or self.deep:
            return
        wait_ns = RACY_MARGIN_NS - (time.time_ns() - _latest_change_ns(before))
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        if fingerprint(file) == before and not _racy(before):
            self.entries.setdefault(str(file), {})[check] = before
            self.changed = True

    def save(self) -> None:
        """Write the record atomically, without the files that are gone; a record that
        cannot be written only costs verifications."""
        kept = {name: checks for name, checks in self.entries.items() if os.path.lexists(name)}
        if (not self.changed and len(kept) == len(self.entries)) or not self.path.parent.is_dir():
            return  # nothing new, or nothing built yet (no data folder to create)
        try:
            atomic_write_bytes(self.path, orjson.dumps({"version": 1, "files": kept}))
        except OSError:
            return
        self.entries, self.changed = kept, False


def _racy(print_: Fingerprint, seen_at_ns: int | None = None) -> bool:
    """Whether the file changed within the margin before ``seen_at_ns`` (default now): its
    fingerprint could repeat after a write in the same tick."""
    return (time.time_ns() if seen_at_ns is None else seen_at_ns) - _latest_change_ns(print_) < RACY_MARGIN_NS


def _latest_change_ns(print_: Fingerprint) -> int:
    """When the file last changed: its mtime, ctime and its log's mtime, whichever is latest."""
    return max(print_[1], print_[2], *print_[6:7])


class FingerprintMemo(Generic[T]):
    """Values computed from a file (a store's row counts), kept in this process while the
    file's :func:`fingerprint` is unchanged: a build summarised the store it had just written
    three times (publish, consistency check, the summary it prints), 0.6 CPU s each at 100,000
    chunks. The racy rule of :class:`VerificationRecord` applies: a value is kept only when
    the file had not changed within :data:`RACY_MARGIN_NS` before its fingerprint was taken,
    nor while it was computed. Keeps the ``size`` files used last."""

    def __init__(self, size: int = 4) -> None:
        self._size = size
        self._entries: dict[str, tuple[Fingerprint, T]] = {}
        self._lock = threading.Lock()  # a server's routes share it

    def get(self, file: Path, compute: Callable[[], T]) -> T:
        """``compute()``'s value for ``file`` (a copy: callers may change theirs)."""
        key = os.path.realpath(file)  # a link's target: a SQLite file's log is beside it
        seen_at = time.time_ns()
        before = fingerprint(Path(key))
        with self._lock:
            kept = self._entries.get(key)
        if before is not None and kept is not None and kept[0] == before:
            return copy.deepcopy(kept[1])
        value = compute()
        if before is not None and not _racy(before, seen_at) and fingerprint(Path(key)) == before:
            with self._lock:
                self._entries.pop(key, None)
                self._entries[key] = (before, copy.deepcopy(value))
                while len(self._entries) > self._size:
                    del self._entries[next(iter(self._entries))]
        return value

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
