"""The shared shape of the project's SQLite caches: one file, WAL, short transactions."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path


class SqliteCache:
    """A cache file with a schema; every call opens its own short-lived connection, so
    the change sensor, several runs and the CLI can share it without holding locks."""

    schema = ""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn:
            conn.executescript(self.schema)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn
