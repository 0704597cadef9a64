"""A segment's BM25 postings (``<key>.bm25.json``): FTS5's own, for that segment's chunks alone.

The single ``embeddings-bm25.json`` (:mod:`rag_assets.index.lexical_json`) scanned the whole
store's FTS5 index; a segment's file must cost what the segment does. Its chunks' fields are
read from the store's ``chunk_fields`` view (the text FTS5 indexed), indexed again in an
in-memory FTS5 table declared like the store's (same columns, same ``porter unicode61``
tokenizer, the store's rowids), and that table is scanned (:class:`InstanceScan`). A
tokenizer is a function of the text, so every posting, its column-weighted tf and every
chunk's token count are the store's.

Per segment, little-endian base64 arrays as in the single file::

    {"version": 2, "chunks": n, "terms": [...], "df": [...],     df: the segment's chunks holding each term
     "postingChunks": u32 (chunk position in the segment), "postingTf": f32,   term-major, chunks ascending
     "docLength": u32 per chunk, "rowids": f64 per chunk (the store's rowid: the server's tie order)}

A reader (``rag-search.js``) sums them into FTS5's statistics: N is the chunks of all segments,
the total tokens the sum of ``docLength``, a term's n(p) the sum of its ``df`` (exactly FTS5's
while the store holds the index's chunks, as a publish writes it), and a chunk's tie rank its
rowid's rank.
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from rag_assets.index.bm25_scan import InstanceScan, RowPositions, content_rowids, fts_table
from rag_assets.index.fields import FieldWeights
from rag_assets.index.fts import TOKENIZE

SEGMENT_LEXICAL_VERSION = 2


def _b64(array: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def segment_rowids(conn: sqlite3.Connection, chunk_ids: Sequence[str]) -> np.ndarray:
    """The store's rowid of each of ``chunk_ids`` (in their order); KeyError for one it lacks.

    The IDs go in as one JSON array (``json_each``), not into a temporary table: SQLite keeps
    temporary tables in a file, and a publish looks up every segment's IDs, so an edit wrote
    tens of megabytes there (72.6 of 83 MB at 10,000 chunks) for lookups that change nothing."""
    rows = conn.execute(
        "SELECT j.key, c.rowid FROM json_each(?) j LEFT JOIN chunks c ON c.id = j.value ORDER BY j.key",
        (orjson.dumps(list(chunk_ids)).decode(),),
    ).fetchall()
    missing = [chunk_ids[pos] for pos, rowid in rows if rowid is None]
    if missing:
        raise KeyError(f"the store lacks {len(missing)} chunk(s) of the segment, e.g. {missing[0]}")
    return np.array([rowid for _, rowid in rows], dtype=np.int64)


def lexical_key(chunks_key: str, rowids: np.ndarray, fields: FieldWeights) -> str:
    """The name stem of a segment's BM25 file: its chunks' inputs, their rowids and the weights."""
    digest = hashlib.sha256(f"bm25|{SEGMENT_LEXICAL_VERSION}|{chunks_key}|{fields}|".encode())
    digest.update(np.ascontiguousarray(rowids, dtype="<i8").tobytes())
    return digest.hexdigest()[:40]


def render_segment_lexical(conn: sqlite3.Connection, rowids: np.ndarray, fields: FieldWeights) -> bytes:
    """The BM25 file of the segment whose chunks have the store rowids ``rowids`` (in its order)."""
    columns = fts_table(conn).columns
    memory = sqlite3.connect(":memory:")
    try:
        raw = _scan(conn, memory, columns, rowids, fields)
    finally:
        memory.close()
    order = np.argsort(rowids, kind="stable")  # a posting's row indexes the rowids ascending
    position = order[raw["row"]].astype(np.int64) if len(order) else np.zeros(0, np.int64)
    term, tf = raw["term"], raw["tf"]
    by_term = np.lexsort((position, term))
    position, tf, term = position[by_term], tf[by_term], term[by_term]
    doc_len = np.zeros(len(rowids), dtype=np.int64)
    if len(order):
        doc_len[order] = raw["doc_len"]
    payload: dict[str, Any] = {
        "version": SEGMENT_LEXICAL_VERSION,
        "chunks": len(rowids),
        "terms": raw["terms"],
        "df": np.bincount(term, minlength=len(raw["terms"])).astype(int).tolist(),
        "postingChunks": _b64(position, "<u4"),
        "postingTf": _b64(tf, "<f4"),
        "docLength": _b64(doc_len, "<u4"),
        "rowids": _b64(rowids, "<f8"),
    }
    return orjson.dumps(payload)


def _scan(
    conn: sqlite3.Connection,
    memory: sqlite3.Connection,
    columns: Sequence[str],
    rowids: np.ndarray,
    fields: FieldWeights,
) -> dict[str, Any]:
    """The segment's rows indexed in ``memory`` like the store's FTS5 table, and scanned."""
    listed = ", ".join(columns)
    memory.execute(f"CREATE TABLE seg_fields(chunk_rowid INTEGER PRIMARY KEY, {listed})")
    memory.execute(
        f"CREATE VIRTUAL TABLE fts_chunks USING fts5({listed}, content='seg_fields', "
        f"content_rowid='chunk_rowid', tokenize='{TOKENIZE}')"
    )
    # One query for the segment's rows (the rowids as one JSON array, as segment_rowids does),
    # inserted in one call: a query and an insert per chunk cost a third of the file's time.
    select = (
        f"SELECT chunk_rowid, {listed} FROM chunk_fields"
        " WHERE chunk_rowid IN (SELECT value FROM json_each(?))"
    )
    marks = ", ".join("?" * (len(columns) + 1))
    insert = f"INSERT INTO seg_fields(chunk_rowid, {listed}) VALUES ({marks})"
    memory.executemany(insert, conn.execute(select, (orjson.dumps(rowids.tolist()).decode(),)))
    memory.execute("INSERT INTO fts_chunks(fts_chunks) VALUES('rebuild')")
    table = fts_table(memory)
    scan = InstanceScan(memory, table, RowPositions(content_rowids(memory, table)), fields.for_columns(columns))
    scan.run()
    return scan.tf_postings()
