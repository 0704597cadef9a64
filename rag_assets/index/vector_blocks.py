"""The chunks' vectors kept a second time in blocks, so a search reads them in a few blob reads.

A search needs every chunk's vector (one matrix product over all of them). Read from the
``chunks`` table, that is a scan of every row (text and vector together: at 100,000 chunks
SQLite's scan alone took 0.9 CPU s of a 2 s cold search). ``vector_blocks`` holds the same
vectors by rowid range: block ``b`` holds the chunks with ``rowid >> BLOCK_BITS == b`` that have
a vector, as three columns (their rowids as int64, their documents' ids as a JSON list, their
vectors as one float32 matrix), so reading them all is one blob per BLOCK_ROWS chunks.

Blocks can never disagree with the chunks: triggers on ``chunks`` delete the block of every
row inserted, deleted or updated, in the writer's own transaction, and a missing block is read
from the chunks themselves (:func:`read_vectors`: the rowid range, an index seek). A writer
calls :func:`refresh` before it commits to write the blocks that went missing, so the next
search finds them; a writer that does not (an older version, another tool) leaves a range
that is read row by row until the next refresh, never a wrong vector. A store written before
blocks existed has none: it is read as before, and its first build writes them all.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where vectors are read or written: `rag status` opens the store without it
    import numpy as np

BLOCK_BITS = 8  # 256 rows a block: 384 KB of vectors at 384 dimensions, so an edit rewrites little
RANGE_BATCH = 4096  # chunk rows read at a time where no block covers them: 6 MB of vectors at 384 dimensions
ROWID_MIN, ROWID_MAX = -(2**63), 2**63 - 1

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS vector_blocks (
    block INTEGER PRIMARY KEY,
    rows INTEGER NOT NULL,
    rowids BLOB NOT NULL,
    document_ids TEXT NOT NULL,
    vectors BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS chunks_ai_blocks AFTER INSERT ON chunks BEGIN
    DELETE FROM vector_blocks WHERE block = new.rowid >> {BLOCK_BITS};
END;
CREATE TRIGGER IF NOT EXISTS chunks_ad_blocks AFTER DELETE ON chunks BEGIN
    DELETE FROM vector_blocks WHERE block = old.rowid >> {BLOCK_BITS};
END;
CREATE TRIGGER IF NOT EXISTS chunks_au_blocks AFTER UPDATE ON chunks BEGIN
    DELETE FROM vector_blocks WHERE block IN (old.rowid >> {BLOCK_BITS}, new.rowid >> {BLOCK_BITS});
END;
"""
_RANGE_ROWS = (
    "SELECT rowid, document_id, embedding FROM chunks"
    " WHERE rowid >= ? AND rowid <= ? AND embedding IS NOT NULL ORDER BY rowid"
)
_BLOCK_ROWS = "SELECT block, rows, rowids, document_ids, vectors FROM vector_blocks ORDER BY block"


@dataclass
class Vectors:
    """Every chunk with a vector, in rowid order: rowid, document id and vector per row."""

    rowids: np.ndarray  # int64
    document_ids: list[str]
    matrix: np.ndarray  # (rows, dimension) float32


def has_blocks(conn: sqlite3.Connection) -> bool:
    """True when the store has the blocks table (a store written before it has not)."""
    return (
        conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'vector_blocks'").fetchone()
        is not None
    )


def gaps(blocks: list[int]) -> list[tuple[int, int]]:
    """The rowid ranges (inclusive) that these blocks (ascending) do not cover."""
    ranges, low = [], ROWID_MIN
    for block in blocks:
        start = block << BLOCK_BITS
        if start > low:
            ranges.append((low, start - 1))
        low = (block + 1) << BLOCK_BITS
    ranges.append((low, ROWID_MAX))
    return ranges


def read_vectors(conn: sqlite3.Connection, dimension: int) -> Vectors:
    """Every chunk's vector, from the blocks where they are written and from the chunks rows
    for the ranges they do not cover, in one read transaction (so the two agree), into a
    matrix sized up front (the peak is the matrix and one block)."""
    import numpy as np

    own = not conn.in_transaction
    if own:
        conn.execute("BEGIN")
    try:
        listed = (
            conn.execute("SELECT block, rows FROM vector_blocks ORDER BY block").fetchall() if has_blocks(conn) else []
        )
        total = sum(n for _, n in listed) + _uncovered_rows(conn, [b for b, _ in listed])
        out = Vectors(np.empty(total, dtype=np.int64), [], np.empty((total, dimension), dtype=np.float32))
        filled = 0
        for rowids, document_ids, vectors in _in_order(conn, bool(listed), dimension):
            end = filled + len(rowids)
            out.rowids[filled:end] = rowids
            out.matrix[filled:end] = vectors
            out.document_ids.extend(document_ids)
            filled = end
    finally:
        if own:
            conn.execute("COMMIT")
    return Vectors(out.rowids[:filled], out.document_ids, out.matrix[:filled])


def _uncovered_rows(conn: sqlite3.Connection, blocks: list[int]) -> int:
    """An upper bound of the chunks with a vector outside these blocks: with no block, count(*)
    (which reads the smallest index, not the rows), else each range's rows by rowid (a seek)."""
    if not blocks:
        return conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return sum(
        conn.execute("SELECT count(*) FROM chunks WHERE rowid >= ? AND rowid <= ?", r).fetchone()[0]
        for r in gaps(blocks)
    )


def _in_order(conn: sqlite3.Connection, blocked: bool, dimension: int) -> Iterator[tuple]:
    """(rowids, document ids, vectors) of every block and of the chunks of the rowid ranges
    between them, in rowid order."""
    low = ROWID_MIN
    blocks = conn.execute(_BLOCK_ROWS) if blocked else ()
    for block, rows, rowids, document_ids, vectors in blocks:
        start = block << BLOCK_BITS
        if start > low:
            yield from _range_rows(conn, low, start - 1, dimension)
        yield _decoded(block, rows, rowids, document_ids, vectors, dimension)
        low = (block + 1) << BLOCK_BITS
    yield from _range_rows(conn, low, ROWID_MAX, dimension)


def _decoded(block: int, rows: int, rowids: bytes, document_ids: str, vectors: bytes, dimension: int) -> tuple:
    """A block's columns as arrays, checked against its row count, the dimension and its range."""
    import numpy as np

    if len(rowids) != rows * 8 or len(vectors) != rows * dimension * 4:
        raise sqlite3.DatabaseError(f"vector block {block} of {len(vectors)} bytes for {rows} rows of {dimension}")
    ids = np.frombuffer(rowids, dtype=np.int64)
    names = json.loads(document_ids)
    if len(names) != rows or (rows and (ids[0] >> BLOCK_BITS != block or ids[-1] >> BLOCK_BITS != block)):
        raise sqlite3.DatabaseError(f"vector block {block} does not hold its own rowid range")
    return ids, names, np.frombuffer(vectors, dtype=np.float32).reshape(rows, dimension)


def _range_rows(conn: sqlite3.Connection, low: int, high: int, dimension: int) -> Iterator[tuple]:
    """The chunks with a vector in rowids low..high, in batches, each batch's vectors joined
    into one buffer (no per-row decoding)."""
    import numpy as np

    cursor = conn.execute(_RANGE_ROWS, (low, high))
    while rows := cursor.fetchmany(RANGE_BATCH):
        blob = b"".join(r[2] for r in rows)
        if len(blob) != len(rows) * dimension * 4:
            raise sqlite3.DatabaseError(f"stored vectors of {len(blob)} bytes for {len(rows)} rows of {dimension}")
        vectors = np.frombuffer(blob, dtype=np.float32).reshape(len(rows), dimension)
        yield np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)), [r[1] for r in rows], vectors


def refresh(conn: sqlite3.Connection) -> int:
    """Inside a write transaction: write the blocks missing for the chunks with a vector (those
    the triggers deleted, or all of a store written before blocks); returns how many. A block
    whose vectors differ in length (a damaged row) is left out: its range is read row by row."""
    import numpy as np

    if not conn.in_transaction:
        raise RuntimeError("vector_blocks.refresh needs an open write transaction")
    listed = [b for (b,) in conn.execute("SELECT block FROM vector_blocks ORDER BY block")]
    written = 0
    for low, high in gaps(listed):
        for block, group in groupby(conn.execute(_RANGE_ROWS, (low, high)), key=lambda row: row[0] >> BLOCK_BITS):
            rows = list(group)  # one block's rows held at a time
            blobs = [r[2] for r in rows]
            if len({len(b) for b in blobs}) != 1:
                continue
            conn.execute(
                "INSERT INTO vector_blocks(block, rows, rowids, document_ids, vectors) VALUES (?, ?, ?, ?, ?)",
                (
                    block,
                    len(rows),
                    np.array([r[0] for r in rows], dtype=np.int64).tobytes(),
                    json.dumps([r[1] for r in rows], ensure_ascii=False),
                    b"".join(blobs),
                ),
            )
            written += 1
    return written


def problems(conn: sqlite3.Connection, dimension: int, embedded: int) -> list[str]:
    """What is wrong with the blocks (none in a store written before them): a block whose sizes
    disagree with its row count and the dimension or that holds rowids of another range, and
    a count of vectors (the blocks' and the uncovered chunks') other than ``embedded``, the
    chunks with a vector. Reads each block's rowids, not its vectors."""
    if not has_blocks(conn):
        return []
    import numpy as np

    found, held = [], 0
    for block, rows, rowids, size in conn.execute(
        "SELECT block, rows, rowids, length(vectors) FROM vector_blocks ORDER BY block"
    ):
        ids = np.frombuffer(rowids, dtype=np.int64) if len(rowids) % 8 == 0 else None
        if ids is None or len(ids) != rows or size != rows * dimension * 4:
            found.append(f"vector block {block} has {size} bytes of vectors for {rows} rows of {dimension}")
        elif rows and (np.any(ids >> BLOCK_BITS != block) or np.any(np.diff(ids) <= 0)):
            found.append(f"vector block {block} holds rowids outside its range or out of order")
        held += rows
    blocks = [b for (b,) in conn.execute("SELECT block FROM vector_blocks ORDER BY block")]
    uncovered = sum(
        conn.execute(
            "SELECT count(*) FROM chunks WHERE rowid >= ? AND rowid <= ? AND embedding IS NOT NULL", r
        ).fetchone()[0]
        for r in gaps(blocks)
    )
    if held + uncovered != embedded:
        found.append(f"vector blocks hold {held} vectors and {uncovered} are outside them, for {embedded} chunks")
    return found
