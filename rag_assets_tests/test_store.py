"""The SQLite store: schema, WAL, FTS sync and all-or-nothing replacement."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from rag_assets.index import store
from rag_assets.records import Chunk, Document, EmbeddedCollection


def make_collection(name: str, texts: list[str]) -> EmbeddedCollection:
    doc = Document(name, "doc", f"{name}/doc.md", "Doc", "", ["t"], {}, "", "2026-01-01", "sha")
    chunks = [
        Chunk(f"{name}/doc/chunk-{i}", t, name, "doc", "Doc", i, len(texts), ["H"], len(t.split()), ["t"])
        for i, t in enumerate(texts)
    ]
    vectors = np.eye(len(texts), 8, dtype=np.float32)
    return EmbeddedCollection(name, "h", [doc], chunks, vectors, "m", 8)


def fts_ids(path, query: str) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT c.id FROM fts_chunks JOIN chunks c ON c.rowid = fts_chunks.rowid WHERE fts_chunks MATCH ?",
                (query,),
            )
        ]


def test_replace_writes_schema_rows_vectors_and_fts(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(path, [make_collection("posts", ["routers and switches", "zfs pools"])], model="m", dimension=8, built_at="t")
    summary = store.summarise(path)
    assert (summary.documents, summary.chunks, summary.fts_rows, summary.model) == (1, 2, 2, "m")
    assert summary.per_collection == {"posts": {"documents": 1, "chunks": 2}}
    assert fts_ids(path, "switch") == ["posts/doc/chunk-0"]  # porter stemming: switches -> switch
    with sqlite3.connect(path) as conn:
        blob = conn.execute("SELECT embedding FROM chunks WHERE id = 'posts/doc/chunk-1'").fetchone()[0]
    assert np.frombuffer(blob, dtype=np.float32)[1] == 1.0
    assert store.orphan_counts(path) == {"chunks_without_document": 0, "fts_rows_without_chunk": 0}


def test_replacing_again_leaves_no_stale_rows_or_fts_entries(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(path, [make_collection("posts", ["old words here", "more old"])], model="m", dimension=8, built_at="1")
    store.replace_contents(path, [make_collection("docs", ["new words"])], model="m", dimension=8, built_at="2")
    assert store.chunk_ids(path) == {"docs/doc/chunk-0"}
    assert fts_ids(path, "old") == [] and fts_ids(path, "new") == ["docs/doc/chunk-0"]
    assert store.summarise(path).built_at == "2"


def test_a_failed_write_keeps_the_previous_contents(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(path, [make_collection("posts", ["kept text"])], model="m", dimension=8, built_at="1")
    broken = make_collection("docs", ["a", "b"])
    broken.chunks[1].id = broken.chunks[0].id  # primary-key clash half-way through the write
    with pytest.raises(sqlite3.IntegrityError):
        store.replace_contents(path, [broken], model="m", dimension=8, built_at="2")
    assert store.chunk_ids(path) == {"posts/doc/chunk-0"}
    assert fts_ids(path, "kept") == ["posts/doc/chunk-0"]


def test_a_reader_sees_the_old_version_until_commit(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(path, [make_collection("posts", ["first"])], model="m", dimension=8, built_at="1")
    reader = sqlite3.connect(path)
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 1
    store.replace_contents(path, [make_collection("docs", ["x", "y", "z"])], model="m", dimension=8, built_at="2")
    assert reader.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 1  # its snapshot is intact
    reader.execute("COMMIT")
    assert reader.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 3
    reader.close()


def test_sync_touches_only_what_changed_and_leaves_no_orphans(tmp_path):
    path = tmp_path / "s.db"
    first = make_collection("posts", ["alpha words", "beta words", "gamma words"])
    result = store.sync_contents(path, [first], model="m", dimension=8, built_at="1")
    assert result.full_rewrite
    second = make_collection("posts", ["alpha words", "beta changed"])  # chunk 1 edited, chunk 2 gone
    result = store.sync_contents(path, [second, make_collection("docs", ["delta"])], model="m", dimension=8, built_at="2")
    assert not result.full_rewrite
    assert (result.chunks_written, result.chunks_deleted) == (2, 2)  # posts chunk-1 and docs chunk-0 in; old chunk-1 and chunk-2 out
    assert store.chunk_ids(path) == {"posts/doc/chunk-0", "posts/doc/chunk-1", "docs/doc/chunk-0"}
    assert fts_ids(path, "gamma") == [] and fts_ids(path, "changed") == ["posts/doc/chunk-1"]
    assert store.orphan_counts(path) == {"chunks_without_document": 0, "fts_rows_without_chunk": 0}
    result = store.sync_contents(path, [make_collection("docs", ["delta"])], model="m", dimension=8, built_at="3")
    assert result.documents_deleted == 1 and store.chunk_ids(path) == {"docs/doc/chunk-0"}
    assert store.summarise(path).fts_rows == 1
    result = store.sync_contents(path, [make_collection("docs", ["delta"])], model="other", dimension=8, built_at="4")
    assert result.full_rewrite and store.summarise(path).model == "other"
