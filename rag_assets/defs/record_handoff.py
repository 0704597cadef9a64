"""The record a one-partition step just wrote, handed to the next read of its file.

An edit's run has one partition (the edited shard): the hash, parse, chunk and embed steps each
write its record, and the next step, or the publish, reads it back at once. At 100,000 chunks in
10 collections of 2 shards that was 0.15-0.2 s of a 2.9 s build spent unpickling records that
were still in memory a moment before. A step of one partition offers its record here once the
file is in place (rag_assets.defs.staged_records); the next :func:`take` of that path returns the
object instead of unpickling the file, as long as the file is still the one written (same device,
inode, size and modification time). One record is held at a time, handed over once (a second
read unpickles the file), and only when it holds at most :data:`MAX_ITEMS` documents, chunks or
files, so a large partition's record is never held beside the next step's work.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

MAX_ITEMS = 20_000  # documents + chunks + files of a record held for the next step

_lock = threading.Lock()
_held: tuple[Path, tuple[int, int, int, int], Any] | None = None


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _items(record: Any) -> int:
    return sum(len(getattr(record, name, ()) or ()) for name in ("documents", "chunks", "files"))


def offer(path: Path, record: Any) -> None:
    """Hold ``record``, just written to ``path``, for the next :func:`take` of that path (it
    replaces any record held before; one too large is not held)."""
    global _held
    identity = _identity(path) if _items(record) <= MAX_ITEMS else None
    with _lock:
        _held = (path, identity, record) if identity is not None else None


def take(path: Path) -> tuple[bool, Any]:
    """(True, the record) when the record held is ``path``'s and the file is still the one
    written, and it is let go; else (False, None), and the file must be read."""
    global _held
    with _lock:
        held = _held
        if held is None or held[0] != path:
            return False, None
        _held = None
    if _identity(path) != held[1]:
        return False, None
    return True, held[2]


def forget() -> None:
    """Let go of the record held (tests; a process that is done building)."""
    global _held
    with _lock:
        _held = None
