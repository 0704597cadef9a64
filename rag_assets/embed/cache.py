"""A SQLite cache of embeddings keyed by (model, SHA-256 of the exact text sent).

An unchanged chunk is never sent to a provider twice, and switching models back
and forth costs nothing the second time. The cache holds only the hash of the
text, never the text itself, so it leaks nothing a store would not.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from contextlib import closing

import numpy as np

from rag_assets.base.sqlite_cache import SqliteCache

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embedding_cache (
    model TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    dimension INTEGER NOT NULL,
    vector BLOB NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (model, text_sha256)
) WITHOUT ROWID;
"""
_LOOKUP_CHUNK = 500  # stays under SQLite's bound-parameter limit


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache(SqliteCache):
    """Vectors by (model, text hash); each call opens its own short transaction."""

    schema = _SCHEMA

    def get_many(self, model: str, dimension: int, texts: Sequence[str]) -> dict[int, np.ndarray]:
        """Cached vectors for the texts found, by position in ``texts``."""
        keys = [text_key(t) for t in texts]
        positions: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            positions.setdefault(key, []).append(i)
        found: dict[int, np.ndarray] = {}
        unique = list(positions)
        with closing(self._connect()) as conn:
            for start in range(0, len(unique), _LOOKUP_CHUNK):
                part = unique[start : start + _LOOKUP_CHUNK]
                marks = ",".join("?" * len(part))
                rows = conn.execute(
                    f"SELECT text_sha256, vector FROM embedding_cache"
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
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")

    def writer(self, model: str, interval: float = 1.0) -> CacheWriter:
        """A writer that groups ``put_many`` calls (see :class:`CacheWriter`)."""
        return CacheWriter(self, model, interval)

    def count(self, model: str | None = None) -> int:
        with closing(self._connect()) as conn:
            if model is None:
                return conn.execute("SELECT COUNT(*) FROM embedding_cache").fetchone()[0]
            return conn.execute("SELECT COUNT(*) FROM embedding_cache WHERE model = ?", (model,)).fetchone()[0]


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
