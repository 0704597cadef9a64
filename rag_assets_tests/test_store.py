"""The SQLite store: schema, WAL, FTS sync and all-or-nothing replacement."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import numpy as np
import pytest

from rag_assets.index import fts, store
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
                "SELECT c.id FROM fts_chunks JOIN chunks c ON c.rowid = fts_chunks.rowid WHERE fts_chunks MATCH ?"
                " ORDER BY c.id",
                (query,),
            )
        ]


def test_replace_writes_schema_rows_vectors_and_fts(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(
        path, [make_collection("posts", ["routers and switches", "zfs pools"])], model="m", dimension=8, built_at="t"
    )
    summary = store.summarise(path)
    assert (summary.documents, summary.chunks, summary.fts_rows, summary.model) == (1, 2, 2, "m")
    assert summary.per_collection == {"posts": {"documents": 1, "chunks": 2}}
    assert fts_ids(path, "switch") == ["posts/doc/chunk-0"]  # porter stemming: switches -> switch
    with sqlite3.connect(path) as conn:
        blob = conn.execute("SELECT embedding FROM chunks WHERE id = 'posts/doc/chunk-1'").fetchone()[0]
    assert np.frombuffer(blob, dtype=np.float32)[1] == 1.0
    assert store.orphan_counts(path) == {"chunks_without_document": 0, "fts_rows_without_chunk": 0}


def test_the_summary_counts_from_the_indexes_what_the_rows_hold(tmp_path):
    """Per-collection counts by ID range and the embedded count by the partial index equal the
    counts of the rows themselves, also with a chunk whose vector is missing and collections
    whose names sort apart from their IDs ("a" and "a-b": "a-b/" sorts before "a/")."""
    path = tmp_path / "s.db"
    cols = [
        make_collection("a", ["one", "two", "three"]),
        make_collection("a-b", ["four"]),
        make_collection("b", ["x"]),
    ]
    store.replace_contents(path, cols, model="m", dimension=8, built_at="t")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE chunks SET embedding = NULL WHERE id = 'a/doc/chunk-1'")
        rows = {
            collection: {"documents": docs, "chunks": chunks}
            for collection, docs, chunks in conn.execute(
                "SELECT d.collection, COUNT(DISTINCT d.id), COUNT(c.id) FROM documents d"
                " LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.collection"
            )
        }
        plan = conn.execute("EXPLAIN QUERY PLAN SELECT COUNT(*) FROM chunks WHERE embedding IS NULL").fetchall()
    store.summaries.clear()
    summary = store.summarise(path)
    assert (
        summary.per_collection
        == rows
        == {
            "a": {"documents": 1, "chunks": 3},
            "a-b": {"documents": 1, "chunks": 1},
            "b": {"documents": 1, "chunks": 1},
        }
    )
    assert (summary.chunks, summary.embedded) == (5, 4)
    assert "idx_chunks_unembedded" in str(plan)  # not a read of every vector
    assert store.orphan_counts(path) == {"chunks_without_document": 0, "fts_rows_without_chunk": 0}
    with sqlite3.connect(path) as conn:  # an FTS row of no chunk, a chunk whose document is gone
        conn.execute("INSERT INTO fts_chunks(rowid, text, title) VALUES (100000, 'orphan row', 'orphan')")
        conn.execute("DELETE FROM documents WHERE id = 'a-b/doc'")
    assert store.orphan_counts(path) == {"chunks_without_document": 1, "fts_rows_without_chunk": 1}


def test_replacing_again_leaves_no_stale_rows_or_fts_entries(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(
        path, [make_collection("posts", ["old words here", "more old"])], model="m", dimension=8, built_at="1"
    )
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
    result = store.sync_contents(
        path, [second, make_collection("docs", ["delta"])], model="m", dimension=8, built_at="2"
    )
    assert not result.full_rewrite
    assert (result.chunks_written, result.chunks_deleted) == (
        2,
        2,
    )  # posts chunk-1 and docs chunk-0 in; old chunk-1 and chunk-2 out
    assert store.chunk_ids(path) == {"posts/doc/chunk-0", "posts/doc/chunk-1", "docs/doc/chunk-0"}
    assert fts_ids(path, "gamma") == [] and fts_ids(path, "changed") == ["posts/doc/chunk-1"]
    assert store.orphan_counts(path) == {"chunks_without_document": 0, "fts_rows_without_chunk": 0}
    result = store.sync_contents(path, [make_collection("docs", ["delta"])], model="m", dimension=8, built_at="3")
    assert result.documents_deleted == 1 and store.chunk_ids(path) == {"docs/doc/chunk-0"}
    assert store.summarise(path).fts_rows == 1
    result = store.sync_contents(path, [make_collection("docs", ["delta"])], model="other", dimension=8, built_at="4")
    assert result.full_rewrite and store.summarise(path).model == "other"


# ------------------------------------------------------------------------------ fields of fts_chunks


def index_contents(conn, table: str = "fts_chunks") -> list[tuple]:
    """Every (term, row, column, offset) the FTS5 index of ``table`` holds."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_v USING fts5vocab(main, {table}, 'instance')")
    return conn.execute(f"SELECT term, doc, col, offset FROM temp.{table}_v ORDER BY 1, 2, 3, 4").fetchall()


def assert_index_is_a_rebuild(conn) -> None:
    """fts_chunks holds exactly what FTS5 makes of the view ``chunk_fields`` now: the triggers
    left no stale entry (FTS5's integrity-check does not compare an external content)."""
    columns = ", ".join(fts.FIELDS)
    conn.execute("DROP TABLE IF EXISTS fresh")
    conn.execute(
        f"CREATE VIRTUAL TABLE fresh USING fts5({columns}, content='{fts.CONTENT}', content_rowid='chunk_rowid',"
        f" tokenize='{fts.TOKENIZE}')"
    )
    conn.execute("INSERT INTO fresh(fresh) VALUES ('rebuild')")
    assert index_contents(conn) == index_contents(conn, "fresh")
    conn.execute("DROP TABLE fresh")


def field_ids(path, column: str, word: str) -> list[str]:
    return fts_ids(path, f"{column} : {word}")


def test_title_headings_and_tags_are_fields_of_every_chunk(tmp_path):
    path = tmp_path / "s.db"
    collection = make_collection("posts", ["routers and switches", "zfs pools"])
    collection.documents[0] = replace(collection.documents[0], title="Proxmox networking", tags=["homelab", "Café"])
    collection.chunks[1] = replace(collection.chunks[1], heading_path=["Storage", "Pools & vdevs"])
    store.replace_contents(path, [collection], model="m", dimension=8, built_at="t")
    assert field_ids(path, "title", "proxmox") == ["posts/doc/chunk-0", "posts/doc/chunk-1"]
    assert field_ids(path, "tags", "cafe") == ["posts/doc/chunk-0", "posts/doc/chunk-1"]  # unicode61 folds é
    assert field_ids(path, "headings", "vdevs") == ["posts/doc/chunk-1"]
    assert field_ids(path, "headings", "h") == ["posts/doc/chunk-0"]
    assert field_ids(path, "text", "proxmox") == []
    with sqlite3.connect(path) as conn:  # FTS5 reads the fields back through the view
        assert conn.execute("SELECT title, headings, tags FROM fts_chunks WHERE rowid = 2").fetchone() == (
            "Proxmox networking",
            "Storage Pools & vdevs",
            "homelab Café",
        )
        assert_index_is_a_rebuild(conn)


def test_triggers_keep_the_fields_equal_to_a_rebuild(tmp_path):
    """Chunks inserted, updated and deleted; a document retitled and retagged (as sync_contents
    does); and, by a writer without foreign keys, a document deleted and inserted under its
    chunks: after each, the index is what a rebuild from the view makes."""
    path = tmp_path / "s.db"
    store.replace_contents(
        path, [make_collection("posts", ["alpha words", "beta words"])], model="m", dimension=8, built_at="1"
    )
    edited = make_collection("posts", ["alpha words", "beta changed", "gamma"])
    edited.documents[0] = replace(edited.documents[0], title="Renamed page", tags=["fresh", "tags"])
    store.sync_contents(path, [edited], model="m", dimension=8, built_at="2")
    assert field_ids(path, "title", "renamed") == ["posts/doc/chunk-0", "posts/doc/chunk-1", "posts/doc/chunk-2"]
    assert field_ids(path, "title", "doc") == [] and field_ids(path, "tags", "t") == []
    conn = store.connect(path)
    try:
        assert_index_is_a_rebuild(conn)
        steps = [
            "UPDATE chunks SET heading_path = '[\"New heading\"]', text = 'delta' WHERE id = 'posts/doc/chunk-0'",
            "UPDATE documents SET title = NULL, tags = 'not json' WHERE id = 'posts/doc'",
            "UPDATE documents SET chunk_count = 7 WHERE id = 'posts/doc'",  # neither title nor tags
            "DELETE FROM chunks WHERE id = 'posts/doc/chunk-2'",
            "PRAGMA foreign_keys = OFF",
            "UPDATE documents SET title = 'Gone soon' WHERE id = 'posts/doc'",
            "DELETE FROM documents WHERE id = 'posts/doc'",
            "INSERT INTO documents(id, collection, slug, title, tags) VALUES ('posts/doc', 'posts', 'doc', 'Back', '[\"again\"]')",
        ]
        for step in steps:
            conn.execute(step)
            assert_index_is_a_rebuild(conn)
        assert conn.execute("SELECT count(*) FROM fts_chunks WHERE fts_chunks MATCH 'title : back'").fetchone()[0] == 2
    finally:
        conn.close()


# The store as schema version 2 wrote it: fts_chunks over chunks.text alone.
_VERSION_2_FTS = """
CREATE VIRTUAL TABLE fts_chunks USING fts5(text, content='chunks', content_rowid='rowid', tokenize='porter unicode61');
CREATE TRIGGER chunks_ai AFTER INSERT ON chunks BEGIN
    INSERT INTO fts_chunks(rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO fts_chunks(fts_chunks, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
CREATE TRIGGER chunks_au AFTER UPDATE ON chunks BEGIN
    INSERT INTO fts_chunks(fts_chunks, rowid, text) VALUES ('delete', old.rowid, old.text);
    INSERT INTO fts_chunks(rowid, text) VALUES (new.rowid, new.text);
END;
"""


def _version_2_store(path) -> None:
    conn = store.connect(path)
    tables = store.SCHEMA[: store.SCHEMA.index("CREATE VIEW")]  # documents, chunks, ... without the fields
    conn.executescript(tables + _VERSION_2_FTS + "PRAGMA user_version = 2;")
    conn.execute(
        "INSERT INTO documents(id, collection, slug, title, tags) VALUES ('p/d', 'p', 'd', 'Proxmox VLANs', '[\"net\"]')"
    )
    for i, text in enumerate(["trunk ports and bridges", "zfs snapshots"]):
        conn.execute(
            "INSERT INTO chunks(id, document_id, chunk_index, text, heading_path) VALUES (?, 'p/d', ?, ?, '[\"Setup\"]')",
            (f"p/d/chunk-{i}", i, text),
        )
    conn.close()


def test_a_version_2_store_is_migrated_to_the_fields(tmp_path):
    path = tmp_path / "old.db"
    _version_2_store(path)
    assert fts_ids(path, "proxmox") == [] and fts_ids(path, "trunk") == ["p/d/chunk-0"]
    conn = store.connect(path)
    try:
        store.ensure_schema(conn)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION == 5
        assert fts.has_fields(conn)
        assert_index_is_a_rebuild(conn)
        store.ensure_schema(conn)  # a second time: nothing to do
        assert fts.migrate(conn) is False
    finally:
        conn.close()
    assert fts_ids(path, "proxmox") == ["p/d/chunk-0", "p/d/chunk-1"] and fts_ids(path, "trunk") == ["p/d/chunk-0"]
    store.sync_contents(path, [make_collection("p", ["after the migration"])], model="m", dimension=8, built_at="3")
    assert fts_ids(path, "migration") == ["p/doc/chunk-0"] and store.orphan_counts(path)["fts_rows_without_chunk"] == 0


def test_a_failed_migration_leaves_the_old_store(tmp_path, monkeypatch):
    path = tmp_path / "old.db"
    _version_2_store(path)
    monkeypatch.setattr(fts, "SCHEMA", fts.SCHEMA + "\nCREATE TABLE broken (;")
    conn = store.connect(path)
    try:
        with pytest.raises(sqlite3.OperationalError):
            fts.migrate(conn)
        assert not conn.in_transaction and not fts.has_fields(conn)
    finally:
        conn.close()
    assert fts_ids(path, "trunk") == ["p/d/chunk-0"]  # the old table and triggers are intact


def trigger_names(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}


def test_chunks_written_in_bulk_are_indexed_as_the_trigger_would_and_the_trigger_stays(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(
        path,
        [make_collection("posts", ["alpha words", "beta words", "gamma words"])],
        model="m",
        dimension=8,
        built_at="1",
    )
    second = make_collection("posts", ["alpha words", "beta changed", "epsilon"])
    store.sync_contents(path, [second, make_collection("docs", ["delta zeta"])], model="m", dimension=8, built_at="2")
    with sqlite3.connect(path) as conn:
        assert_index_is_a_rebuild(conn)
        assert trigger_names(conn) >= {"chunks_ai", "chunks_ad", "chunks_au"}
    assert fts_ids(path, "zeta") == ["docs/doc/chunk-0"] and fts_ids(path, "changed") == ["posts/doc/chunk-1"]
    # A chunk inserted by another writer, after the bulk writes, is still indexed by the trigger.
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(
            "INSERT INTO chunks(id, document_id, chunk_index, text, heading_path, word_count) VALUES ('docs/doc/chunk-9', 'docs/doc', 9, 'omega', '[]', 1)"
        )
    assert fts_ids(path, "omega") == ["docs/doc/chunk-9"]


def test_a_failed_bulk_write_keeps_the_trigger_and_the_index(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(path, [make_collection("posts", ["kept text"])], model="m", dimension=8, built_at="1")
    broken = make_collection("posts", ["kept text", "a", "b"])
    broken.chunks[2].slug = "missing"  # a chunk of no document: the foreign key fails inside the bulk insert
    with pytest.raises(sqlite3.IntegrityError):
        store.sync_contents(path, [broken], model="m", dimension=8, built_at="2")
    with sqlite3.connect(path) as conn:
        assert "chunks_ai" in trigger_names(conn)
        assert_index_is_a_rebuild(conn)
    assert store.chunk_ids(path) == {"posts/doc/chunk-0"}


def test_bulk_indexing_refuses_to_run_outside_a_transaction(tmp_path):
    path = tmp_path / "s.db"
    store.replace_contents(path, [make_collection("posts", ["x"])], model="m", dimension=8, built_at="1")
    conn = store.connect(path)
    with pytest.raises(RuntimeError, match="transaction"):
        with fts.chunks_indexed_at_end(conn):
            pass
    conn.close()
