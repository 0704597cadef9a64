"""``embeddings-bm25.json``: what a browser needs to rank the public index as the server does.

The server's BM25 is FTS5's (``porter unicode61``, column-weighted tf, FTS5's idf and length
norm; :mod:`rag_assets.search.bm25_scan` states the formula). Re-tokenizing every chunk in
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
import sqlite3
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import orjson

from rag_assets.index import store
from rag_assets.search.bm25_scan import (
    B,
    K1,
    MIN_IDF,
    InstanceScan,
    RowPositions,
    content_rowids,
    fts_table,
    positions,
)
from rag_assets.search.fields import FieldWeights
from rag_assets.search.params import SearchParams
from rag_assets.search.profiles import read_profile
from rag_assets.search.query import LONG_QUERY_WORDS, MAX_REPEATS, STOP_WORDS

LEXICAL_NAME = "embeddings-bm25.json"
LEXICAL_FORMAT_VERSION = 1


def _b64(array: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def render_lexical(
    store_path: Path,
    chunk_ids: Sequence[str],
    collection_weights: Mapping[str, float],
    provider: str | None,
    fields: FieldWeights = FieldWeights(),
    generation: str | None = None,
) -> bytes:
    """The BM25 postings and search settings of the store at ``store_path``, with chunks
    numbered by their position in ``chunk_ids`` (the index's order). ``generation``: the
    published generation, as the index names it, so a reader can tell the two files of one build."""
    conn = store.connect(store_path)
    try:
        conn.execute("BEGIN")
        fts = fts_table(conn)
        scan = InstanceScan(conn, fts, RowPositions(content_rowids(conn, fts)), fields.for_columns(fts.columns))
        scan.run()
        raw = scan.tf_postings()
        rowid_of = dict(conn.execute("SELECT id, rowid FROM chunks").fetchall())
        profile = read_profile(conn, provider)
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.close()
        raise
    conn.close()
    chunk_rowids = np.array([rowid_of[c] for c in chunk_ids], dtype=np.int64)
    order = np.argsort(chunk_rowids, kind="stable")
    # Each posting's FTS rowid -> the chunk's position in the index (-1: not in it, an orphan).
    at = positions(chunk_rowids[order], raw["rowid"])
    keep = at >= 0
    term, position, tf = raw["term"][keep], order[at[keep]], raw["tf"][keep]
    by_term = np.lexsort((position, term))  # term-major, chunks ascending within a term
    counts = np.bincount(term, minlength=len(raw["terms"]))
    fts_row = {int(r): i for i, r in enumerate(raw["rowids"])}  # content rows, then any orphan
    doc_len = np.array([raw["doc_len"][fts_row[r]] if r in fts_row else 0 for r in chunk_rowids.tolist()])
    rank = np.empty(len(chunk_ids), dtype=np.int64)
    rank[order] = np.arange(len(chunk_ids))  # the store's row order (rowid ascending)
    defaults = SearchParams()
    payload = {
        "version": LEXICAL_FORMAT_VERSION,
        "generation": generation,
        "tokenize": "porter unicode61",
        "k1": K1,
        "b": B,
        "minIdf": MIN_IDF,
        "fieldWeights": dict(zip(fts.columns, fields.for_columns(fts.columns))),
        "rows": raw["statistics"].rows,
        "tokens": raw["statistics"].tokens,
        "chunks": len(chunk_ids),
        "terms": raw["terms"],
        "df": raw["df"].astype(int).tolist(),
        "counts": counts.astype(int).tolist(),
        "postingChunks": _b64(position[by_term], "<u4"),
        "postingTf": _b64(tf[by_term], "<f4"),  # sums of column weights: exact in float32
        "docLength": _b64(doc_len, "<u4"),
        "rowOrder": _b64(rank, "<u4"),
        "search": {
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
            "stopWords": sorted(STOP_WORDS),
            "longQueryWords": LONG_QUERY_WORDS,
            "maxRepeats": MAX_REPEATS,
        },
    }
    return orjson.dumps(payload)
