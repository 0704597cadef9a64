"""The store's vector blocks: every vector of the chunks, in rowid order, whatever wrote the
chunks (a build, a sync, a plain SQL write that never refreshes them, a store written before
blocks existed), and a damaged block is an error, never a wrong vector."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import numpy as np
import pytest

from rag_assets.index import generations, store, vector_blocks
from rag_assets.index.consistency import check_public_outputs
from rag_assets.records import Chunk, Document, EmbeddedCollection
from rag_assets.search import loaded

from .conftest import build_files_once, copy_built

DIMENSION = 8
BLOCK = 1 << vector_blocks.BLOCK_BITS


def collection(name: str, documents: int, chunks_each: int, seed: int = 0) -> EmbeddedCollection:
    """``documents`` documents of ``chunks_each`` chunks, with random vectors (the same for a seed)."""
    docs, chunks = [], []
    for d in range(documents):
        slug = f"doc{d:03d}"
        docs.append(Document(name, slug, f"{name}/{slug}.md", slug, "", [], {}, "", "2026-01-01", "sha"))
        chunks += [
            Chunk(f"{name}/{slug}/chunk-{i}", f"text {d} {i} {seed}", name, slug, slug, i, chunks_each, [], 3, [])
            for i in range(chunks_each)
        ]
    vectors = np.random.default_rng(seed).standard_normal((len(chunks), DIMENSION)).astype(np.float32)
    return EmbeddedCollection(name, f"h{seed}", docs, chunks, vectors, "m", DIMENSION)


def write(path, *collections: EmbeddedCollection, sync: bool = False) -> None:
    writer = store.sync_contents if sync else store.replace_contents
    writer(path, list(collections), model="m", dimension=DIMENSION, built_at="t")


def row_by_row(path) -> tuple[list[int], list[str], np.ndarray]:
    """The chunks' vectors read and decoded one row at a time (what the blocks must equal)."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT rowid, document_id, embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY rowid"
        ).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows], np.array([np.frombuffer(r[2], dtype=np.float32) for r in rows])


def read(path, readonly: bool = False) -> vector_blocks.Vectors:
    with closing(store.connect(path, readonly=readonly)) as conn:
        return vector_blocks.read_vectors(conn, DIMENSION)


def assert_reads_as_rows(path) -> None:
    rowids, document_ids, matrix = row_by_row(path)
    got = read(path)
    assert got.rowids.tolist() == rowids and got.document_ids == document_ids
    assert got.matrix.dtype == np.float32 and np.array_equal(got.matrix, matrix)


def blocks(path) -> dict[int, int]:
    """Block number -> its row count."""
    with closing(sqlite3.connect(path)) as conn:
        return dict(conn.execute("SELECT block, rows FROM vector_blocks ORDER BY block"))


def test_a_build_writes_blocks_that_hold_every_vector(tmp_path):
    path = tmp_path / "s.db"
    write(path, collection("a", 100, 5), collection("b", 60, 3, seed=1))  # 680 chunks, rowids 1..680
    assert blocks(path) == {0: BLOCK - 1, 1: BLOCK, 2: 680 - 2 * BLOCK + 1}
    assert_reads_as_rows(path)
    with closing(store.connect(path, readonly=True)) as conn:
        assert vector_blocks.problems(conn, DIMENSION, 680) == []


def test_a_sync_rewrites_only_the_blocks_of_the_rows_it_changed(tmp_path, monkeypatch):
    path = tmp_path / "s.db"
    first = collection("a", 200, 5)  # 1,000 chunks: blocks 0-3
    write(path, first)
    edited = collection("a", 200, 5)
    edited.chunks[600].text = "an edited paragraph"  # document 120's chunks: rowids 601..605, block 2
    written = []
    real = vector_blocks.refresh
    monkeypatch.setattr(vector_blocks, "refresh", lambda conn: written.append(real(conn)) or written[-1])
    write(path, edited, sync=True)
    # the edited document's chunks go (block 2) and come back as rowids 1001..1005 (block 3)
    assert written == [2] and sorted(blocks(path)) == [0, 1, 2, 3]
    assert_reads_as_rows(path)


def test_writes_that_never_refresh_the_blocks_still_read_every_vector(tmp_path):
    path = tmp_path / "s.db"
    write(path, collection("a", 150, 4))  # 600 chunks: blocks 0-2
    with closing(store.connect(path)) as conn:  # what another tool, or an older version, may do
        conn.execute("UPDATE chunks SET embedding = ? WHERE rowid = 10", (np.ones(DIMENSION, np.float32).tobytes(),))
        conn.execute("DELETE FROM chunks WHERE rowid = 300")
        conn.execute(
            "INSERT INTO chunks(id, document_id, chunk_index, text, embedding) VALUES ('x', 'a/doc000', 9, 'x', ?)",
            (np.full(DIMENSION, 2, np.float32).tobytes(),),
        )
        conn.execute("UPDATE chunks SET embedding = NULL WHERE rowid = 550")
    assert blocks(path) == {}  # each block lost to a write: read from the chunks, never stale
    assert_reads_as_rows(path)
    write(path, collection("a", 150, 4), sync=True)
    # the sync compares texts, not vectors: the row whose vector went keeps none (599 of 600)
    assert sorted(blocks(path)) == [0, 1, 2] and sum(blocks(path).values()) == 599
    assert_reads_as_rows(path)


def test_a_store_written_before_blocks_reads_the_same_and_gains_them_at_its_next_write(tmp_path):
    path = tmp_path / "s.db"
    write(path, collection("a", 150, 4), collection("b", 20, 2, seed=3))
    expected = read(path)
    with closing(store.connect(path)) as conn:  # the previous version's schema: no table, no triggers
        for trigger in ("chunks_ai_blocks", "chunks_ad_blocks", "chunks_au_blocks"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE vector_blocks")
    old = read(path, readonly=True)  # a search opens it read-only: nothing to migrate
    assert old.document_ids == expected.document_ids and np.array_equal(old.matrix, expected.matrix)
    assert np.array_equal(old.rowids, expected.rowids)
    with closing(store.connect(path, readonly=True)) as conn:
        assert vector_blocks.problems(conn, DIMENSION, 640) == []
    write(path, collection("a", 150, 4), collection("b", 20, 2, seed=3), sync=True)  # nothing changed
    assert sum(blocks(path).values()) == 640
    assert_reads_as_rows(path)


def test_a_range_without_a_block_is_read_from_the_chunks(tmp_path):
    path = tmp_path / "s.db"
    write(path, collection("a", 250, 4))  # 1,000 chunks: blocks 0-3
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM vector_blocks WHERE block IN (0, 2)")  # a leading gap and one between blocks
    assert_reads_as_rows(path)


@pytest.mark.parametrize(
    "damage, message",
    [
        ("UPDATE vector_blocks SET rows = rows - 1 WHERE block = 1", "bytes of vectors"),  # a count of another size
        ("UPDATE vector_blocks SET vectors = substr(vectors, 1, 40) WHERE block = 1", "bytes of vectors"),
        ("UPDATE vector_blocks SET block = 5 WHERE block = 1", "outside its range"),  # the right sizes, wrong rows
    ],
)
def test_a_damaged_block_is_an_error_and_a_problem_of_the_store(tmp_path, damage, message):
    path = tmp_path / "s.db"
    write(path, collection("a", 150, 4))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(damage)
    with pytest.raises(sqlite3.DatabaseError, match="vector block [15] "):
        read(path)
    with closing(store.connect(path, readonly=True)) as conn:
        found = vector_blocks.problems(conn, DIMENSION, 600)
    assert found and message in found[0]


def test_the_count_of_vectors_is_checked_against_the_chunks(tmp_path):
    path = tmp_path / "s.db"
    write(path, collection("a", 150, 4))
    with closing(store.connect(path, readonly=True)) as conn:
        assert vector_blocks.problems(conn, DIMENSION, 600) == []
        assert vector_blocks.problems(conn, DIMENSION, 601) == [
            "vector blocks hold 600 vectors and 0 are outside them, for 601 chunks"
        ]


def test_rag_check_reports_a_block_that_disagrees_with_the_chunks(tmp_path_factory, tmp_path, make_config):
    files = {f"notes/page-{i}.md": f"# Page {i}\n\nzfs pool {i} and a snapshot of dataset {i}.\n" for i in range(12)}
    cfg = copy_built(build_files_once(tmp_path_factory, "blocks-check", files), tmp_path, make_config)
    assert check_public_outputs(cfg).ok
    path = generations.published(cfg).store_path
    with closing(sqlite3.connect(path)) as conn, conn:  # a block one vector short of the chunks
        conn.execute(
            "UPDATE vector_blocks SET rows = rows - 1, rowids = substr(rowids, 1, length(rowids) - 8),"
            f" vectors = substr(vectors, 1, length(vectors) - {4 * 384})"
        )
    problems = check_public_outputs(cfg).problems
    assert problems == ["vector blocks hold 11 vectors and 0 are outside them, for 12 chunks"]


def test_a_search_load_gives_each_row_its_document_and_collection(tmp_path):
    """read_loaded's per-row arrays, made by map and indexing, as a join of the tables gives them."""
    path = tmp_path / "s.db"
    write(path, collection("a", 100, 2), collection("b", 90, 3, seed=1))
    with closing(store.connect(path)) as conn:  # a chunk whose document is gone: no index, no collection
        conn.execute("PRAGMA foreign_keys=OFF")
        conn.execute(
            "INSERT INTO chunks(id, document_id, chunk_index, text, embedding) VALUES ('o', 'gone', 0, 'o', ?)",
            (np.ones(DIMENSION, np.float32).tobytes(),),
        )
        expected = conn.execute(
            "SELECT c.rowid, coalesce(d.collection, ''),"
            " CASE WHEN d.id IS NULL THEN 190 ELSE (SELECT count(*) FROM documents e WHERE e.rowid < d.rowid) END"
            " FROM chunks c LEFT JOIN documents d ON d.id = c.document_id ORDER BY c.rowid"
        ).fetchall()
        data = loaded.read_loaded(conn, (), lambda: conn, "on_demand")
    assert data.rowids.tolist() == [r for r, _, _ in expected]
    assert data.collections.tolist() == [c for _, c, _ in expected]
    assert data.doc_index.tolist() == [i for _, _, i in expected]
    assert data.row_of == {r: i for i, (r, _, _) in enumerate(expected)}


def test_a_vector_of_another_length_keeps_its_range_out_of_the_blocks(tmp_path):
    """A damaged row (a vector of 4 bytes) is never folded into a block: its range stays with
    the chunks, whose read reports it as before blocks existed."""
    path = tmp_path / "s.db"
    write(path, collection("a", 150, 4))
    with closing(store.connect(path)) as conn:
        conn.execute("UPDATE chunks SET embedding = x'00000000' WHERE rowid = 300")
        with store.transaction(conn):
            assert vector_blocks.refresh(conn) == 0
    assert sorted(blocks(path)) == [0, 2]
    with pytest.raises(sqlite3.DatabaseError, match="stored vectors of"):
        read(path)
