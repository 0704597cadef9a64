"""The embedding cache's grouped writes: fewer transactions, nothing embedded lost on a failure."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from rag_assets.embed.cache import EmbeddingCache, text_key
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.pipeline import embed_collection
from rag_assets.records import Chunk, ChunkedCollection


def chunked(n: int) -> ChunkedCollection:
    chunks = [
        Chunk(f"c/doc/chunk-{i}", f"text number {i} about vlans", "c", "doc", "Doc", i, n, [], 5, []) for i in range(n)
    ]
    return ChunkedCollection("c", "hash", [], chunks)


def writes(path) -> int:
    """Transactions that wrote rows: each put_many stamps its rows with one created_at."""
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT COUNT(DISTINCT created_at) FROM embedding_vectors").fetchone()[0]


def test_a_writer_groups_batches_into_one_write_until_its_interval_passes(tmp_path):
    cache = EmbeddingCache(tmp_path / "cache.db")
    emb = HashingEmbedder(16)
    grouped = cache.writer(emb.model, interval=3600)
    for start in range(0, 30, 10):
        texts = [f"grouped {i}" for i in range(start, start + 10)]
        grouped.add(texts, emb.embed_documents(texts))
    assert cache.count() == 0  # nothing written before the interval or a flush
    grouped.flush()
    assert cache.count() == 30 and writes(cache.path) == 1
    found = cache.get_many(emb.model, 16, ["grouped 3", "grouped 29"])
    assert np.array_equal(found[1], emb.embed_query("grouped 29"))
    each = cache.writer(emb.model, interval=0)  # a slow embedder: every batch written at once
    for start in range(0, 30, 10):
        texts = [f"each {i}" for i in range(start, start + 10)]
        each.add(texts, emb.embed_documents(texts))
        assert cache.count() == 30 + start + 10


class FailsOnBatch(HashingEmbedder):
    """Raises (not a batch error: the run stops) on its ``n``-th batch."""

    def __init__(self, n: int) -> None:
        super().__init__(16)
        self.n, self.calls = n, 0

    def embed_documents(self, texts, *, batch_label=None):
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError("the embedder went away")
        return super().embed_documents(texts)


def test_batches_embedded_before_a_failure_are_cached(tmp_path):
    cache = EmbeddingCache(tmp_path / "cache.db")
    with pytest.raises(RuntimeError, match="went away"):
        embed_collection(chunked(50), FailsOnBatch(4), cache=cache, batch_size=10)
    assert cache.count() == 30  # batches 1-3, written when the run stopped
    embedded, stats = embed_collection(chunked(50), HashingEmbedder(16), cache=cache, batch_size=10)
    assert stats.cache_hits == 30 and stats.cache_misses == 20 and cache.count() == 50
    assert np.array_equal(embedded.vectors, HashingEmbedder(16).embed_documents([c.text for c in chunked(50).chunks]))


def test_a_cache_made_before_the_rowid_table_is_copied_into_it_once(tmp_path):
    path = tmp_path / "cache.db"
    emb = HashingEmbedder(16)
    vector = emb.embed_query("an old text")
    with sqlite3.connect(path) as conn:  # the schema before 2026-12-03
        conn.execute(
            "CREATE TABLE embedding_cache (model TEXT NOT NULL, text_sha256 TEXT NOT NULL, dimension INTEGER NOT NULL,"
            " vector BLOB NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (model, text_sha256)) WITHOUT ROWID"
        )
        conn.execute(
            "INSERT INTO embedding_cache VALUES (?, ?, 16, ?, 1.0)",
            (emb.model, text_key("an old text"), vector.astype(np.float32).tobytes()),
        )
    conn.close()
    cache = EmbeddingCache(path)
    assert np.array_equal(cache.get_many(emb.model, 16, ["an old text"])[0], vector)
    assert cache.count() == 1
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert tables == {"embedding_vectors"}
    cache.put_many(emb.model, ["a new text"], emb.embed_documents(["a new text"]))
    assert EmbeddingCache(path).count() == 2  # opened again: nothing left to copy, nothing lost
