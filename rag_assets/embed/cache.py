"""A SQLite cache of embeddings keyed by (model, SHA-256 of the exact text sent).

An unchanged chunk is never sent to a provider twice, and switching models back
and forth costs nothing the second time. The cache holds only the hash of the
text, never the text itself, so it leaks nothing a store would not.

The vectors live in a rowid table with a unique index on the key, not in a ``WITHOUT
ROWID`` table keyed by it: a 1.5 KB vector row in the key's own B-tree made every insert
at a random key move large rows between pages (15,176 vectors took 1.1 CPU s to write and
69 MB on disk; now 0.3 s and 32 MB). A cache made before (table ``embedding_cache``) is
copied into the new table once, when it is first opened.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Sequence

import numpy as np

from rag_assets.base.sqlite_cache import SqliteCache

TABLE = "embedding_vectors"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    model TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    dimension INTEGER NOT NULL,
    vector BLOB NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE (model, text_sha256)
);
"""
_LEGACY_TABLE = "embedding_cache"  # the WITHOUT ROWID table of caches made before 2026-12-03
_COLUMNS = "model, text_sha256, dimension, vector, created_at"
_LOOKUP_CHUNK = 500  # stays under SQLite's bound-parameter limit


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache(SqliteCache):
    """Vectors by (model, text hash); each call opens its own short transaction."""

    schema = _SCHEMA

    def prepare(self, conn: sqlite3.Connection) -> None:
        migrate_legacy_table(conn)

    def get_many(self, model: str, dimension: int, texts: Sequence[str]) -> dict[int, np.ndarray]:
        """Cached vectors for the texts found, by position in ``texts``."""
        keys = [text_key(t) for t in texts]
        positions: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            positions.setdefault(key, []).append(i)
        found: dict[int, np.ndarray] = {}
        unique = list(positions)
        with self.session() as conn:
            for start in range(0, len(unique), _LOOKUP_CHUNK):
                part = unique[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT text_sha256, vector FROM {TABLE}"
                    f" WHERE model = ? AND dimension = ? AND text_sha256 IN ({marks})",
                    (model, dimension, *part),
                )
                for key, blob in rows:
                    if not isinstance(blob, bytes) or len(blob) != dimension * 4:
                        continue  # a damaged row is a miss: the text is embedded again
                    vector = np.frombuffer(blob, dtype=np.float32)
                    for i in positions[key]:
                        found[i] = vector
        return found

    def put_many(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        now = time.time()
        rows = [
            (model, text_key(t), int(v.shape[0]), np.ascontiguousarray(v, dtype=np.float32).tobytes(), now)
            for t, v in zip(texts, vectors)
        ]
        with self.session() as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(f"INSERT OR REPLACE INTO {TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")

    def writer(self, model: str, interval: float = 1.0) -> CacheWriter:
        """A writer that groups ``put_many`` calls (see :class:`CacheWriter`)."""
        return CacheWriter(self, model, interval)

    def count(self, model: str | None = None) -> int:
        with self.session() as conn:
            if model is None:
                return conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()[0]
            return conn.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE model = ?", (model,)).fetchone()[0]


def migrate_legacy_table(conn: sqlite3.Connection) -> bool:
    """Copy a cache's legacy ``embedding_cache`` table into today's and drop it, in one
    transaction (a kill leaves the old table whole); False when there is none."""
    exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    if conn.execute(exists, (_LEGACY_TABLE,)).fetchone() is None:
        return False
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute(exists, (_LEGACY_TABLE,)).fetchone() is not None:  # another process may have done it
            conn.execute(f"INSERT OR IGNORE INTO {TABLE} ({_COLUMNS}) SELECT {_COLUMNS} FROM {_LEGACY_TABLE}")
            conn.execute(f"DROP TABLE {_LEGACY_TABLE}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True


class CacheWriter:
    """Vectors for the cache, written together once ``interval`` seconds have passed since the
    last write (and on ``flush``): a fast embedder finishes a batch every few milliseconds, and
    each write is a transaction, a commit and a WAL checkpoint, which cost more than embedding
    it did. A slow (remote) embedder still writes after every batch, so a run stopped midway
    loses at most ``interval`` seconds of embedding, which the next run redoes."""

    def __init__(self, cache: EmbeddingCache, model: str, interval: float = 1.0) -> None:
        self.cache, self.model, self.interval = cache, model, interval
        self._texts: list[str] = []
        self._vectors: list[np.ndarray] = []
        self._last = time.monotonic()

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        self._texts.extend(texts)
        self._vectors.append(vectors)
        if time.monotonic() - self._last >= self.interval:
            self.flush()

    def flush(self) -> None:
        """Write what is pending, in one transaction."""
        if self._texts:
            self.cache.put_many(self.model, self._texts, np.concatenate(self._vectors))
            self._texts, self._vectors = [], []
        self._last = time.monotonic()
