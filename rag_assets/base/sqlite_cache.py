"""The shared shape of the project's SQLite caches: one file, WAL, short transactions.

A cache is never trusted when damaged: a file that fails ``PRAGMA quick_check`` (or is not
a database at all) is discarded and started afresh, which costs only recomputation.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from rag_assets.base.verified import Fingerprint, VerificationRecord, fingerprint

log = logging.getLogger(__name__)

# (path, inode, size, mtime) of cache files already verified by this process: a build opens
# the same cache once per collection, and one quick_check per file and process is enough.
_verified: set[tuple[str, int, int, int]] = set()


@dataclass
class _Sessions:
    """This process's sessions on one cache file since :func:`track_sessions`: the file's
    fingerprint before the first and after the last, and whether each began with the file as
    the one before had left it (``unbroken``: nothing else changed it between them)."""

    first: Fingerprint | None
    last: Fingerprint | None
    unbroken: bool = True


_sessions: dict[str, _Sessions] = {}
_sessions_lock = threading.Lock()


def track_sessions() -> None:
    """Start noting the cache sessions of this process afresh (a build, before its run)."""
    with _sessions_lock:
        _sessions.clear()


def changed_only_here(path: Path, since: Fingerprint | None) -> bool:
    """Whether the cache file at ``path`` went from the fingerprint ``since`` (None: no file) to
    the one it has now through this process's sessions alone, since :func:`track_sessions`: the
    first began at ``since``, each next one where the one before left the file, and nothing
    changed it after the last. A change made between them by another process (or by hand)
    breaks that; one made while a session of this process had the file open does not show
    (the window of a call)."""
    with _sessions_lock:
        noted = _sessions.get(str(path))
        return bool(noted and noted.unbroken and noted.first == since and noted.last == fingerprint(path))


class SqliteCache:
    """A cache file with a schema; every call opens its own short-lived connection, so
    the change sensor, several runs and the CLI can share it without holding locks."""

    schema = ""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.discarded = discard_if_damaged(path)
        if self.discarded:
            log.warning("discarded the damaged cache %s (%s); it is rebuilt as work is redone", path, self.discarded)
        with self.session() as conn:
            conn.executescript(self.schema)
            self.prepare(conn)

    def prepare(self, conn: sqlite3.Connection) -> None:
        """Bring an older file up to the schema (a migration), on the connection that made it."""

    @contextlib.contextmanager
    def session(self) -> Iterator[sqlite3.Connection]:
        """A connection for one call, closed after it; the file's fingerprint is noted before
        and after (see :func:`changed_only_here`)."""
        key = str(self.path)
        before = fingerprint(self.path)
        with _sessions_lock:
            noted = _sessions.get(key)
            if noted is None:
                _sessions[key] = _Sessions(before, before)
            elif noted.last != before:
                noted.unbroken = False
        try:
            with closing(self._connect()) as conn:
                yield conn
        finally:
            after = fingerprint(self.path)
            with _sessions_lock:
                if (noted := _sessions.get(key)) is not None:  # None: tracking started afresh meanwhile
                    noted.last = after

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn


def discard_if_damaged(path: Path, record: VerificationRecord | None = None) -> str | None:
    """Delete the SQLite file at ``path`` (with its WAL) when it fails ``quick_check``;
    returns why it was discarded, or None when it is sound or absent. With a ``record``
    (rag_assets.base.verified), a file that passed before and is unchanged is not checked again."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    key = (str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if key in _verified:
        return None
    problem = record.run(path, "quick_check", lambda: sqlite_problem(path)) if record else sqlite_problem(path)
    if problem is None:
        _verified.add(key)
        return None
    for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    return problem


def sqlite_problem(path: Path) -> str | None:
    """Why the SQLite file at ``path`` is unusable, or None when it passes ``quick_check``
    (or does not exist)."""
    if not path.is_file():
        return None
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            rows = [r[0] for r in conn.execute("PRAGMA quick_check(5)")]
    except sqlite3.DatabaseError as exc:
        return f"not a readable SQLite database ({exc})"
    if rows != ["ok"]:
        return "SQLite integrity check failed: " + "; ".join(" ".join(r.split()) for r in rows)
    return None
