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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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


def rowids_digest(pairs: Iterable[tuple[str, int]]) -> str:
    """A digest of a collection's (chunk ID, store rowid) pairs, given in chunk ID order: its
    BM25 files hold those rowids (the tie order), so they are named again only with the same."""
    return hashlib.sha256("".join(f"{chunk_id}\t{rowid}\n" for chunk_id, rowid in pairs).encode()).hexdigest()


def lexical_key(chunks_key: str, rowids: np.ndarray, fields: FieldWeights) -> str:
    """The name stem of a segment's BM25 file: its chunks' inputs, their rowids and the weights."""
    digest = hashlib.sha256(f"bm25|{SEGMENT_LEXICAL_VERSION}|{chunks_key}|{fields}|".encode())
    digest.update(np.ascontiguousarray(rowids, dtype="<i8").tobytes())
    return digest.hexdigest()[:40]


@dataclass
class Postings:
    """A segment's postings: per posting its term (an index into ``terms``), its chunk's
    position in the segment and its column-weighted tf; per chunk position its token count."""

    terms: list[str]
    term: np.ndarray
    position: np.ndarray
    tf: np.ndarray  # float32: the file's precision
    doc_len: np.ndarray


def segment_rows(conn: sqlite3.Connection, rowids: np.ndarray) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The store's FTS5 columns and each of the segment's rows of ``chunk_fields`` (the text
    FTS5 indexed), ``(rowid, *columns)`` in the segment's order, read in one query (the rowids
    as one JSON array, as :func:`segment_rowids` does: a query per chunk cost a tenth of the file)."""
    columns = fts_table(conn).columns
    select = (
        f"SELECT chunk_rowid, {', '.join(columns)} FROM chunk_fields"
        " WHERE chunk_rowid IN (SELECT value FROM json_each(?))"
    )
    by_rowid = {row[0]: row for row in conn.execute(select, (orjson.dumps(rowids.tolist()).decode(),))}
    return columns, [by_rowid[rowid] for rowid in rowids.tolist()]


def scan_rows(
    columns: Sequence[str], rows: Sequence[tuple[Any, ...]], positions: np.ndarray, fields: FieldWeights, n: int
) -> Postings:
    """The postings of ``rows`` (``(rowid, *columns)``), indexed in an in-memory FTS5 table
    declared like the store's (same columns, same tokenizer, the store's rowids), their chunks
    at ``positions`` (one per row) of a segment of ``n`` chunks."""
    memory = sqlite3.connect(":memory:")
    try:
        raw = _scan(memory, columns, rows, fields)
    finally:
        memory.close()
    rowids = np.array([row[0] for row in rows], dtype=np.int64)
    order = np.argsort(rowids, kind="stable")  # a posting's row indexes the rowids ascending
    at = np.asarray(positions, dtype=np.int64)[order]
    doc_len = np.zeros(n, dtype=np.int64)
    if len(order):
        doc_len[at] = raw["doc_len"]
    position = at[raw["row"]] if len(order) else np.zeros(0, np.int64)
    return Postings(raw["terms"], raw["term"], position, raw["tf"], doc_len)


def render_postings(postings: Postings, rowids: np.ndarray) -> bytes:
    """The BM25 file of postings of the segment whose chunks have the store rowids ``rowids``:
    term-major, chunk positions ascending; a term no posting holds is left out."""
    term, position, tf = postings.term, postings.position, postings.tf
    by_term = np.lexsort((position, term))
    term, position, tf = term[by_term], position[by_term], tf[by_term]
    df = np.bincount(term, minlength=len(postings.terms))
    terms = postings.terms
    if len(df) and not df.all():  # terms that only left chunks held
        held = df > 0
        term = (np.cumsum(held) - 1)[term]
        terms = [t for t, keep in zip(terms, held.tolist()) if keep]
        df = df[held]
    payload: dict[str, Any] = {
        "version": SEGMENT_LEXICAL_VERSION,
        "chunks": len(rowids),
        "terms": terms,
        "df": df.astype(int).tolist(),
        "postingChunks": _b64(position, "<u4"),
        "postingTf": _b64(tf, "<f4"),
        "docLength": _b64(postings.doc_len, "<u4"),
        "rowids": _b64(rowids, "<f8"),
    }
    return orjson.dumps(payload)


def render_segment_lexical(conn: sqlite3.Connection, rowids: np.ndarray, fields: FieldWeights) -> bytes:
    """The BM25 file of the segment whose chunks have the store rowids ``rowids`` (in its order),
    every chunk indexed (rag_assets.index.lexical_reuse indexes only the changed ones)."""
    columns, rows = segment_rows(conn, rowids)
    return render_postings(scan_rows(columns, rows, np.arange(len(rows)), fields, len(rows)), rowids)


def _scan(
    memory: sqlite3.Connection, columns: Sequence[str], rows: Sequence[tuple[Any, ...]], fields: FieldWeights
) -> dict[str, Any]:
    """``rows`` indexed in ``memory`` like the store's FTS5 table, and scanned."""
    listed = ", ".join(columns)
    memory.execute(f"CREATE TABLE seg_fields(chunk_rowid INTEGER PRIMARY KEY, {listed})")
    memory.execute(
        f"CREATE VIRTUAL TABLE fts_chunks USING fts5({listed}, content='seg_fields', "
        f"content_rowid='chunk_rowid', tokenize='{TOKENIZE}')"
    )
    marks = ", ".join("?" * (len(columns) + 1))
    memory.executemany(f"INSERT INTO seg_fields(chunk_rowid, {listed}) VALUES ({marks})", rows)
    memory.execute("INSERT INTO fts_chunks(fts_chunks) VALUES('rebuild')")
    table = fts_table(memory)
    scan = InstanceScan(memory, table, RowPositions(content_rowids(memory, table)), fields.for_columns(columns))
    scan.run()
    return scan.tf_postings()
