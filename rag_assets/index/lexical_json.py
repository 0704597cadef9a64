"""``embeddings-bm25.json``: what a browser needs to rank the public index as the server does.

The server's BM25 is FTS5's (``porter unicode61``, column-weighted tf, FTS5's idf and length
norm; :mod:`rag_assets.index.bm25_scan` states the formula). Re-tokenizing every chunk in
JavaScript could only imitate unicode61, so the build publishes FTS5's own postings instead,
read from the public store it has just written: every term, its document frequency, and per
posting the chunk (its position in ``embeddings-index.json``) and its column-weighted tf; per
chunk its token count; the table's row and token totals. ``rag-search.js`` computes the
weights from them exactly as FTS5 does and only stems the query (a port of FTS5's porter).

With them the search settings of the store: its search profile (fusion and weights), the
collection weights, the candidate depth, the stop words and the long-query rule, and each
chunk's place in the store's row order (the server breaks score ties by it). Numeric arrays
are base64 of little-endian typed arrays, so the file stays small and decodes fast.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rag_assets.index import store
from rag_assets.index.bm25_scan import (
    K1,
    MIN_IDF,
    B,
    InstanceScan,
    RowPositions,
    content_rowids,
    fts_table,
    positions,
)
from rag_assets.index.fields import FieldWeights
from rag_assets.index.index_json import DigestingWriter, WrittenIndex
from rag_assets.index.params import DEFAULT_MIN_RELEVANCE, SearchParams
from rag_assets.index.profiles import SearchProfile, read_profile
from rag_assets.index.query import LONG_QUERY_WORDS, MAX_REPEATS, STOP_WORDS

LEXICAL_NAME = "embeddings-bm25.json"
LEXICAL_FORMAT_VERSION = 1


# Elements base64-encoded at a time: a multiple of 3, so that with 4-byte items every block
# but the last is a whole number of base64 quanta and the blocks' encodings concatenate.
_B64_ITEMS = 3 << 18
# The instance scan's batch for this file (rag_assets.index.bm25_scan): the parsing of one
# batch is the scan's largest temporary, and this one-off read needs no large batches.
_SCAN_BATCH_CHARS = 4_000_000


def _write_b64(out: DigestingWriter, array: np.ndarray, dtype: str) -> None:
    """Base64 of ``array`` as little-endian ``dtype`` (4-byte items), written block by block."""
    for start in range(0, len(array), _B64_ITEMS):
        out.write(base64.b64encode(np.ascontiguousarray(array[start : start + _B64_ITEMS], dtype=dtype).tobytes()))


def write_lexical(
    path: Path,
    store_path: Path,
    chunk_ids: Sequence[str],
    collection_weights: Mapping[str, float],
    provider: str | None,
    fields: FieldWeights = FieldWeights(),
    generation: str | None = None,
) -> WrittenIndex:
    """Write to ``path`` the BM25 postings and search settings of the store at ``store_path``,
    with chunks numbered by their position in ``chunk_ids`` (the index's order); return the
    file's size and SHA-256. ``generation``: the published generation, as the index names it,
    so a reader can tell the two files of one build."""
    conn = store.connect(store_path)
    try:
        conn.execute("BEGIN")
        fts = fts_table(conn)
        scan = InstanceScan(conn, fts, RowPositions(content_rowids(conn, fts)), fields.for_columns(fts.columns))
        scan.run(batch_chars=_SCAN_BATCH_CHARS)
        raw = scan.tf_postings()
        rowid_of = dict(conn.execute("SELECT id, rowid FROM chunks").fetchall())
        profile = read_profile(conn, provider)
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.close()
        raise
    conn.close()
    del scan  # tf_postings took its postings; what it still holds is in raw
    chunk_rowids = np.array([rowid_of[c] for c in chunk_ids], dtype=np.int64)
    order = np.argsort(chunk_rowids, kind="stable").astype(np.int32)
    # Each FTS row -> its chunk's position in the index (-1: not in it, an orphan), then each
    # posting's through its row: per row first, so no per-posting rowid array is made.
    rank = positions(chunk_rowids[order], raw["rowids"])
    if len(order):
        row_position = np.where(rank >= 0, order[np.maximum(rank, 0)], -1).astype(np.int32)
    else:
        row_position = np.full(len(rank), -1, dtype=np.int32)
    term, position, tf = raw.pop("term"), row_position[raw.pop("row")], raw.pop("tf")
    keep = position >= 0
    if not keep.all():
        term, position, tf = term[keep], position[keep], tf[keep]
    del keep
    counts = np.bincount(term, minlength=len(raw["terms"]))
    if not _term_major(term, position):
        by_term = np.lexsort((position, term))  # term-major, chunks ascending within a term
        position, tf = position[by_term], tf[by_term]
        del by_term
    del term
    fts_row = {int(r): i for i, r in enumerate(raw["rowids"])}  # content rows, then any orphan
    doc_len = np.array([raw["doc_len"][fts_row[r]] if r in fts_row else 0 for r in chunk_rowids.tolist()])
    rank = np.empty(len(chunk_ids), dtype=np.int64)
    rank[order] = np.arange(len(chunk_ids))  # the store's row order (rowid ascending)
    head = {
        "version": LEXICAL_FORMAT_VERSION,
        "generation": generation,
        **_constants(fts.columns, fields),
        "rows": raw["statistics"].rows,
        "tokens": raw["statistics"].tokens,
        "chunks": len(chunk_ids),
        "terms": raw["terms"],
        "df": raw["df"].astype(int).tolist(),
        "counts": counts.astype(int).tolist(),
    }
    tail = {"search": search_settings(profile, collection_weights)}
    # orjson.dumps of the whole object, written in parts: an object is its members joined by
    # commas, and base64 needs no escaping. orjson reserves several times a string's length
    # to escape it, and the posting arrays are tens of megabytes of base64 per 100,000
    # chunks, so they are kept out of it and written a block at a time.
    arrays = [
        ("postingChunks", position, "<u4"),
        ("postingTf", tf, "<f4"),  # sums of column weights: exact in float32
        ("docLength", doc_len, "<u4"),
        ("rowOrder", rank, "<u4"),
    ]
    with path.open("wb") as handle:
        out = DigestingWriter(handle)
        out.write(orjson.dumps(head)[:-1])
        for name, array, dtype in arrays:
            out.write(b',"' + name.encode("ascii") + b'":"')
            _write_b64(out, array, dtype)
            out.write(b'"')
        out.write(b"," + orjson.dumps(tail)[1:])
    return WrittenIndex(out.size, out.digest.hexdigest())


def _constants(columns: Sequence[str], fields: FieldWeights) -> dict[str, Any]:
    """The tokenizer and BM25 constants the browser computes the weights with."""
    return {
        "tokenize": "porter unicode61",
        "k1": K1,
        "b": B,
        "minIdf": MIN_IDF,
        "fieldWeights": dict(zip(columns, fields.for_columns(columns))),
    }


def lexical_header(
    conn: sqlite3.Connection, collection_weights: Mapping[str, float], provider: str | None, fields: FieldWeights
) -> dict[str, Any]:
    """What every segment's BM25 file shares (rag_assets.index.lexical_segments), for the
    segmented index's ``lexical``: the constants and the store's search settings."""
    columns = fts_table(conn).columns
    return {
        "version": LEXICAL_FORMAT_VERSION + 1,
        **_constants(columns, fields),
        "search": search_settings(read_profile(conn, provider), collection_weights),
    }


def search_settings(profile: SearchProfile, collection_weights: Mapping[str, float]) -> dict[str, Any]:
    """The store's search settings as the browser applies them (the file's ``search``)."""
    defaults = SearchParams()
    return {
        "profile": {
            "fusion": profile.fusion,
            "vectorWeight": profile.vector_weight,
            "bm25Weight": profile.bm25_weight,
            "rrfK": profile.rrf_k,
            "embedder": profile.embedder,
        },
        "collectionWeights": dict(sorted(collection_weights.items())),
        "candidates": defaults.candidates,
        "k": defaults.k,
        "minScore": DEFAULT_MIN_RELEVANCE,
        "sections": defaults.sections,
        "relevance": relevance_settings(profile.embedder),
        "stopWords": sorted(STOP_WORDS),
        "longQueryWords": LONG_QUERY_WORDS,
        "maxRepeats": MAX_REPEATS,
    }


def relevance_settings(embedder: str) -> dict:
    """The calibrated relevance models the server uses for a store of ``embedder``'s profile
    (one per mode, rag_assets/search/relevance_models.json, read as data: the search layer
    sits above this one), for the browser's port of rag_assets.search.relevance."""
    text = resources.files("rag_assets").joinpath("search", "relevance_models.json").read_text(encoding="utf-8")
    data = json.loads(text)
    return {"version": data["version"], "models": data["models"].get(embedder) or data["models"]["default"]}


def _term_major(term: np.ndarray, position: np.ndarray, block: int = 1 << 20) -> bool:
    """Whether the postings already run term by term, chunks ascending within a term (as
    the scan lists them when the store's rows are in the index's order: a full rebuild),
    so that sorting them would change nothing. Checked in blocks: no posting-sized temporaries."""
    pairs = len(term) - 1  # each posting against the next
    for start in range(0, max(pairs, 0), block):
        stop = min(start + block, pairs)
        t0, t1 = term[start:stop], term[start + 1 : stop + 1]
        p0, p1 = position[start:stop], position[start + 1 : stop + 1]
        if not np.all((t1 > t0) | ((t1 == t0) & (p1 > p0))):
            return False
    return True
