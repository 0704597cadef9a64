"""The log file of a tier: what its store is asked and does while it is current, kept apart from it.

Every tier's store has a SQLite file of logs beside it, named after it
(``rag-store-public.db`` -> ``rag-store-public-logs.db``, see :func:`log_path`):

- ``search_log(id, at, query, params JSON, results JSON, top_score, latency_ms, top_relevance)``:
  every search made against the store (``rag log``; written by
  :class:`rag_assets.search.retrieval.SearchIndex`)
- ``answer_log``: every answer given, a session's memory (:mod:`rag_assets.index.answer_log`)
- ``admin_actions``: what the admin console did (:mod:`rag_assets.index.admin_actions`; the
  public tier's file only)
- ``store_migration(at, rows)``: when the rows an older store kept in its own tables were moved here

Searching, answering and the admin console write only this file, so the store's file stays as
the build left it: the next build finds the store verified by size, mtime and inode
(:mod:`rag_assets.base.verified`) and does not ``quick_check`` it again (seconds at 100,000
chunks). The file is not part of a generation: a publish does not copy or carry it, and it is
as private as its tier's store (the Private tier's questions stay in the Private tier's file,
a Safe question is sanitised before it is logged; the leak audit reads this file too).

An older store held these tables itself: the first open of its log file moves their rows here
(:func:`migrate`, in one transaction, marked in ``store_migration`` so it runs once) and then
drops them from the store. A damaged log file never blocks a build or a search: it is renamed
aside (``<name>.damaged-<time>``, kept for its owner to read) and a new one is started.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from rag_assets.base.sqlite_cache import sqlite_problem
from rag_assets.index import store

log = logging.getLogger("rag_assets.index.tier_logs")

SUFFIX = "-logs.db"
SCHEMA = """
CREATE TABLE IF NOT EXISTS search_log (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    query TEXT NOT NULL,
    params JSON,
    results JSON,
    top_score REAL,
    latency_ms REAL,
    top_relevance REAL
);
CREATE TABLE IF NOT EXISTS answer_log (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    session TEXT,
    question TEXT NOT NULL,
    query TEXT NOT NULL,
    answer TEXT,
    sources JSON,
    model TEXT,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    latency_ms REAL,
    abstained INTEGER NOT NULL,
    citation_problems JSON,
    error TEXT
);
CREATE INDEX IF NOT EXISTS idx_answer_log_session ON answer_log(session, id);
CREATE TABLE IF NOT EXISTS admin_actions (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    who TEXT NOT NULL,
    action TEXT NOT NULL,
    tier TEXT,
    target TEXT,
    outcome TEXT NOT NULL,
    detail TEXT
);
CREATE TABLE IF NOT EXISTS store_migration (
    at TEXT NOT NULL,
    rows INTEGER NOT NULL
);
"""
# The tables an older store kept (and this file now does), moved by their ids.
TABLES = ("search_log", "answer_log", "admin_actions")


def log_path(store_path: Path) -> Path:
    """The log file of the store at ``store_path`` (beside it, under the name the caller uses:
    the public store's link, not the generation's slot it leads to)."""
    return store_path.with_name(store_path.stem + SUFFIX)


def connect(store_path: Path) -> sqlite3.Connection:
    """A connection to the log file of the store at ``store_path``, created (and an older
    store's rows moved into it) on first use. A damaged file is set aside and a new one started."""
    path = log_path(store_path)
    try:
        return _open(path, store_path)
    except sqlite3.OperationalError:
        raise  # busy or locked: the file is sound, the caller decides (a search is not failed for it)
    except sqlite3.DatabaseError:
        if recover(store_path) is None:
            raise  # not the file's damage (the store's, say): nothing to set aside
        return _open(path, store_path)


def append(store_path: Path, sql: str, params: tuple) -> None:
    """Run one INSERT (``sql``) in the store's log file. A file found damaged by it is set aside
    and the row written into a new one; other errors (busy, read-only) are raised."""
    for attempt in (1, 2):
        try:
            with closing(connect(store_path)) as conn:
                conn.execute(sql, params)
            return
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError:
            if attempt == 2 or recover(store_path) is None:
                raise


def ensure(store_path: Path) -> bool:
    """Open the store's log file once (creating it, and moving an older store's rows into it)
    before that store is replaced; False (logged) when it cannot be opened, which never fails a build."""
    try:
        with closing(connect(store_path)):
            return True
    except sqlite3.Error:
        log.warning("could not open the log file of %s", store_path, exc_info=True)
        return False


def exists(store_path: Path) -> bool:
    """Whether there is anything logged to read: the log file, or an older store's own tables."""
    return log_path(store_path).is_file() or store_path.is_file()


def _open(path: Path, store_path: Path) -> sqlite3.Connection:
    conn = store.connect(path)
    try:
        conn.executescript(SCHEMA)
        if conn.execute("SELECT 1 FROM store_migration").fetchone() is None:
            migrate(conn, store_path)
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(conn: sqlite3.Connection, store_path: Path) -> int:
    """Move the log rows the store at ``store_path`` still holds into the log file open on
    ``conn`` (once: marked in the same transaction), then drop them from the store; the rows moved.
    A store that cannot be read is left for the next open (its damage is the build's to report)."""
    try:
        legacy = _legacy_rows(store_path)
    except sqlite3.DatabaseError:
        log.warning("could not read the logs of %s; they are moved at a later open", store_path, exc_info=True)
        return 0
    with store.transaction(conn):
        if conn.execute("SELECT 1 FROM store_migration").fetchone() is not None:
            return 0  # another process moved them meanwhile
        moved = 0
        for table, (columns, rows) in legacy.items():
            names = ", ".join(columns)
            conn.executemany(f"INSERT OR IGNORE INTO {table}({names}) VALUES ({', '.join('?' * len(columns))})", rows)
            moved += len(rows)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        conn.execute("INSERT INTO store_migration(at, rows) VALUES (?, ?)", (stamp, moved))
    if legacy:
        drop_legacy(store_path)
    return moved


def _legacy_rows(store_path: Path) -> dict[str, tuple[list[str], list[tuple]]]:
    """The log tables the store holds: (the columns this file knows, the rows), by table."""
    if not store_path.is_file():
        return {}
    out: dict[str, tuple[list[str], list[tuple]]] = {}
    with closing(store.connect(store_path, readonly=True)) as src:
        present = {r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in TABLES:
            if table not in present:
                continue
            known = {r[1] for r in _schema_columns(table)}
            columns = [r[1] for r in src.execute(f"PRAGMA table_info({table})") if r[1] in known]
            out[table] = (columns, src.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id").fetchall())
    return out


def _schema_columns(table: str) -> list[tuple]:
    with closing(sqlite3.connect(":memory:")) as mem:
        mem.executescript(SCHEMA)
        return mem.execute(f"PRAGMA table_info({table})").fetchall()


def drop_legacy(store_path: Path) -> bool:
    """Drop the log tables an older store kept (their rows are in the log file); True when
    there were any. Best effort: a store that cannot be written keeps them (they are not read)."""
    try:
        with closing(store.connect(store_path)) as conn:
            present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            found = [t for t in TABLES if t in present]
            if found:
                with store.transaction(conn):
                    for table in found:
                        conn.execute(f"DROP TABLE {table}")
            return bool(found)
    except sqlite3.Error:
        log.warning("could not drop the moved logs of %s", store_path, exc_info=True)
        return False


def recover(store_path: Path) -> Path | None:
    """Set the store's log file aside when it fails ``quick_check`` (after an error that may be
    its damage); where it went, or None when it is sound or absent."""
    path = log_path(store_path)
    return set_aside(path) if sqlite_problem(path) else None


def set_aside(path: Path) -> Path | None:
    """Rename a damaged log file (and its WAL) aside, so a new one can start; the new name,
    or None when there was no file."""
    if not path.is_file():
        return None
    aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}")
    wal = Path(f"{path}-wal")
    if wal.exists():  # its last transactions: kept with it
        os.replace(wal, Path(f"{aside}-wal"))
    Path(f"{path}-shm").unlink(missing_ok=True)  # an index of the WAL, rebuilt from it
    os.replace(path, aside)
    log.warning("the log file %s is damaged; kept as %s, a new one is started", path, aside)
    return aside
