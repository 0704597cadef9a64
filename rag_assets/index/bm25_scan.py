"""Reading BM25 postings out of a store's FTS5 index, through public interfaces only.

**The postings.** Every token of every row, as FTS5's ``porter unicode61`` tokenizer made
it, is read through an ``fts5vocab`` table of type ``instance`` over ``fts_chunks`` (one
row per token: term, row, column, offset), so the terms and their counts are FTS5's by
construction; nothing is re-tokenized in Python. One ``SELECT term, count(*),
group_concat(doc * C + column) ... GROUP BY term`` lists each term's instances in row
order (SQLite does not sort), parsed by numpy in batches; a run of equal (term, row)
is one posting, whose tf is the sum of its instances' column weights, as FTS5's
``bm25(fts_chunks, w_text, w_title, ...)`` counts it (:mod:`rag_assets.index.fields`).

**Statistics.** FTS5's formula (``fts5_aux.c``)::

    score(row) = sum over query phrases p of  idf(p) * tf*(k1+1) / (tf + k1*(1 - b + b*D/avgdl))
    idf(p)     = log((N - n(p) + 0.5) / (n(p) + 0.5)), clamped to 1e-6 when <= 0

with k1 = 1.2, b = 0.75, tf the weighted count above, N = every row of the FTS table
(chunks without an embedding count too, though they are never returned), n(p) = rows
holding p in any column, D = the row's token count over all its columns (unweighted)
and avgdl = the table's total tokens / N. FTS5 keeps N, the total and every D in its
shadow tables (``%_data`` record 1, ``%_docsize``) in a private format that a SQLite
upgrade may change; they are not read. The same numbers come from the instance scan and
the content table instead:

- D: the instances of the row. FTS5 counts a row's size as its tokens (colocated
  synonyms aside, which ``porter unicode61`` never makes), and every token is one
  instance, so the counts are FTS5's own.
- the total: the sum of the D (every instance once).
- N: the rows of the content (the view ``chunk_fields``, one row per chunk: the triggers
  index every one of them, a row with no token too, as a D of 0), plus any row the
  instances show that the content no longer holds (an orphan of a damaged store, which
  FTS5 still counts).

The weights need every row's D, known only at the end of the scan, so (term, row, tf,
count) are kept until then. At 100,000 chunks of 200 words (20 M tokens) the scan took
about 3.5-4 s (2.5-3 s of it in SQLite). Tokenizing the chunk texts in Python instead
(regex, a dict of words, ``np.unique`` over (term, chunk) pairs) measured 6.5 s or more,
and could only imitate unicode61's rules.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from rag_assets.index.fts import TOKENIZE

log = logging.getLogger(__name__)

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6  # FTS5 replaces an idf <= 0 (a term in more than half of the rows) by this
_BATCH_CHARS = 16_000_000  # group_concat text parsed per step while building


class StoreChanged(RuntimeError):
    """The store changed under a build; the postings would not match the loaded rows."""


# ------------------------------------------------------------------------------ store facts


def positions(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Index of each of ``ids`` in the ascending ``sorted_ids`` (int32), -1 where absent."""
    if not len(sorted_ids):
        return np.full(len(ids), -1, dtype=np.int32)
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return np.where(sorted_ids[at] == ids, at, -1).astype(np.int32)


class RowPositions:
    """FTS rowid -> its index in an ascending array of rowids, -1 where absent.

    A table look-up when the rowids are dense (they are after a full rebuild), a binary
    search otherwise."""

    def __init__(self, sorted_ids: np.ndarray) -> None:
        self.ids = sorted_ids
        top = int(sorted_ids[-1]) if len(sorted_ids) else -1
        self._lookup = None
        if len(sorted_ids) and sorted_ids[0] >= 0 and top <= 4 * len(sorted_ids) + 1024:
            self._lookup = np.full(top + 1, -1, dtype=np.int32)
            self._lookup[sorted_ids] = np.arange(len(sorted_ids), dtype=np.int32)

    def __call__(self, docs: np.ndarray) -> np.ndarray:
        lookup = self._lookup
        if lookup is not None and (not len(docs) or (docs.min() >= 0 and docs.max() < len(lookup))):
            return lookup[docs]
        return positions(self.ids, docs)


@dataclass(frozen=True)
class FtsTable:
    """An external-content FTS5 table as its CREATE statement declares it."""

    name: str
    content: str  # the content table or view
    content_rowid: str  # its column holding the FTS rowid
    columns: tuple[str, ...]


def fts_table(conn: sqlite3.Connection, table: str = "fts_chunks") -> FtsTable:
    """How FTS5 table ``table`` is declared; ValueError when it is not an external-content
    FTS5 table with ``tokenize='porter unicode61'``."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    sql = row[0].replace('"', "'") if row and row[0] else ""
    if TOKENIZE not in sql:
        raise ValueError(f"{table} is not an FTS5 table with tokenize='{TOKENIZE}'")
    content = re.search(r"content\s*=\s*'([^']+)'", sql)
    if content is None:
        raise ValueError(f"{table} is not an external-content FTS5 table")
    rowid = re.search(r"content_rowid\s*=\s*'([^']+)'", sql)
    columns = tuple(r[1] for r in conn.execute(f"PRAGMA table_info({table})"))
    return FtsTable(table, content.group(1), rowid.group(1) if rowid else "rowid", columns)


def content_rowids(conn: sqlite3.Connection, table: FtsTable) -> np.ndarray:
    """Rowids of the content, ascending: the rows FTS5 indexes (its triggers add each)."""
    # No ORDER BY: SQLite may then read the rowids from a small index instead of the whole
    # table (text and vectors); numpy sorts them faster than SQLite would.
    rows = conn.execute(f"SELECT {table.content_rowid} FROM {table.content}").fetchall()
    return np.sort(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)))


@dataclass(frozen=True)
class Bm25Statistics:
    """The table-wide numbers of FTS5's bm25(): N (rows) and the total tokens of all rows."""

    rows: int
    tokens: int

    @property
    def avgdl(self) -> float:
        return self.tokens / self.rows if self.rows else 1.0


def _statistics(doc_len: np.ndarray) -> Bm25Statistics:
    """N and the total from the token count of every row FTS5 holds (zero-token rows too)."""
    return Bm25Statistics(rows=len(doc_len), tokens=int(doc_len.sum()))


def bm25_weights(
    tf: np.ndarray, term: np.ndarray, row: np.ndarray, df: np.ndarray, doc_len: np.ndarray, stats: Bm25Statistics
) -> np.ndarray:
    """FTS5's BM25 weight (idf included, float64) of postings given by their (column-weighted)
    tf, their term (an index into ``df``: rows holding each term) and their row (an index
    into ``doc_len``: tokens of each FTS row). idf and the length norm are computed once per
    term and per row, then gathered: a log per posting would cost more than the rest."""
    idf = np.log((stats.rows - df + 0.5) / (df + 0.5))
    idf[idf <= 0] = MIN_IDF
    length_norm = K1 * (1 - B + B * doc_len / stats.avgdl)
    return idf[term] * tf * (K1 + 1) / (tf + length_norm[row])


# ------------------------------------------------------------------------------ the scan


def _drain(parts: list[np.ndarray], dtype: type, offsets: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """``np.concatenate(parts)`` as ``dtype`` (plus ``offsets[i]`` on part i), emptying ``parts``
    as it goes: each part is let go once copied, so the parts and the whole are never all held."""
    out: np.ndarray = np.empty(sum(len(p) for p in parts), dtype=dtype)
    at = 0
    for i in range(len(parts)):
        part, parts[i] = parts[i], None  # type: ignore[call-overload]  # let go; cleared below
        out[at : at + len(part)] = part
        if offsets is not None:
            out[at : at + len(part)] += dtype(offsets[i])
        at += len(part)
        del part
    parts.clear()
    return out


class InstanceScan:
    """Every (term, row, weighted tf, count) of an FTS5 table, read through an ``fts5vocab``
    'instance' table, and from them the BM25 statistics and weights (see the module
    docstring). ``column_weights``: one per column of the table, in its order."""

    def __init__(
        self, conn: sqlite3.Connection, table: FtsTable, rows: RowPositions, column_weights: Sequence[float]
    ) -> None:
        if len(column_weights) != len(table.columns):
            raise ValueError(f"{table.name} has {len(table.columns)} columns; {len(column_weights)} weights were given")
        self.conn = conn
        self.table = table
        self.rows = rows  # FTS rowid -> index among the content rows
        self.column_weights = np.asarray(column_weights, dtype=np.float64)
        self.terms: list[str] = []
        # Per batch: rows holding each of its terms (every FTS row counts), and per posting
        # the term (index in the batch), the row, the weighted tf and the instance count.
        self.df: list[np.ndarray] = []
        self.term: list[np.ndarray] = []
        self.at: list[np.ndarray] = []  # the row as an index among the content rows; -1: orphan
        self.orphans: list[np.ndarray] = []  # FTS rowids of the postings with an ``at`` of -1
        self.tf: list[np.ndarray] = []
        self.count: list[np.ndarray] = []
        self.timing = {"sql": 0.0, "numpy": 0.0}

    def _select(self, vocab: str) -> str:
        """Each term's instances as ``doc * C + column index`` (C columns), in row order."""
        n = len(self.table.columns)
        if n == 1:
            return f"SELECT term, count(*), group_concat(doc) FROM {vocab} GROUP BY term"
        index = " ".join(f"WHEN '{name}' THEN {i}" for i, name in enumerate(self.table.columns))
        return f"SELECT term, count(*), group_concat(doc * {n} + CASE col {index} END) FROM {vocab} GROUP BY term"

    def run(self, should_stop: Callable[[], bool] | None = None, batch_chars: int = _BATCH_CHARS) -> None:
        """Read the instances, term by term, in batches of about ``batch_chars`` (the batching
        changes nothing in the postings, only the size of the temporaries)."""
        vocab = f"temp.bm25_vocab_{os.getpid()}_{threading.get_ident()}"
        conn = self.conn
        conn.execute(f"DROP TABLE IF EXISTS {vocab}")
        conn.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab(main, {self.table.name}, 'instance')")
        try:
            batch: tuple[list[str], list[int], list[str]] = ([], [], [])
            size = 0
            t = time.perf_counter()
            for term, n, text in conn.execute(self._select(vocab)):
                batch[0].append(term)
                batch[1].append(n)
                batch[2].append(text)
                size += len(text)
                if size >= batch_chars:
                    self.timing["sql"] += time.perf_counter() - t
                    self._add_batch(*batch)
                    batch, size = ([], [], []), 0
                    if should_stop is not None and should_stop():
                        raise StoreChanged("the build was abandoned: a newer load replaced it")
                    t = time.perf_counter()
            self.timing["sql"] += time.perf_counter() - t
            if batch[0]:
                self._add_batch(*batch)
        finally:
            conn.execute(f"DROP TABLE IF EXISTS {vocab}")

    def _add_batch(self, batch_terms: list[str], batch_counts: list[int], texts: list[str]) -> None:
        """One posting per run of equal (term, row) in the batch's instances: its count is
        the run's length, its tf the sum of the run's column weights."""
        t = time.perf_counter()
        values = np.fromstring(",".join(texts), dtype=np.int64, sep=",")  # text mode: not the deprecated one
        n_inst = np.asarray(batch_counts, dtype=np.int64)
        if len(values) != int(n_inst.sum()):
            raise ValueError("could not read the FTS5 index's instances")
        n_columns = len(self.column_weights)
        docs, column = np.divmod(values, n_columns) if n_columns > 1 else (values, None)
        term = np.repeat(np.arange(len(batch_terms), dtype=np.int32), n_inst)
        if len(docs) > 1 and np.any((docs[1:] < docs[:-1]) & (term[1:] == term[:-1])):
            order = np.lexsort((docs, term))  # never seen: fts5vocab lists a term's rows in order
            docs, term = docs[order], term[order]
            column = column[order] if column is not None else None
        new = np.ones(len(docs), dtype=bool)
        new[1:] = (docs[1:] != docs[:-1]) | (term[1:] != term[:-1])
        starts = np.flatnonzero(new)
        count = np.diff(np.append(starts, len(docs))).astype(np.int32)
        if column is None:
            tf = count * self.column_weights[0]
        else:
            tf = np.add.reduceat(self.column_weights[column], starts) if len(starts) else np.zeros(0)
        term, docs = term[starts], docs[starts]
        self.df.append(np.bincount(term, minlength=len(batch_terms)))
        self.term.append(term)  # the batch's own term index (into its df)
        at = self.rows(docs)
        self.at.append(at)
        self.orphans.append(docs[at < 0])
        self.tf.append(tf)
        self.count.append(count)
        self.terms.extend(batch_terms)
        self.timing["numpy"] += time.perf_counter() - t

    def _row_indexes(self) -> np.ndarray:
        """Make every posting's ``at`` an index among all FTS rows, and return their rowids
        in that order: the content rows, then any orphan (a row the index still holds that
        the content does not: a damaged store, but FTS5 counts it)."""
        ids = self.rows.ids
        if not any(len(x) for x in self.orphans):
            return ids
        extra = np.unique(np.concatenate(self.orphans))
        for at, orphans in zip(self.at, self.orphans):
            at[at < 0] = len(ids) + np.searchsorted(extra, orphans)
        log.warning("%s holds %d rows that its content does not (orphans)", self.table.name, len(extra))
        return np.concatenate([ids, extra])

    def tf_postings(self) -> dict:
        """The raw material of the weights, for a reader that computes them itself (the
        browser search, rag_assets.index.lexical_json): ``terms``, ``df`` (per term),
        ``term``, ``row`` and ``tf`` (per posting: its term's index, its FTS row as an index
        into ``rowids``, its column-weighted tf as float32, which holds the sums of column
        weights exactly), ``doc_len`` (per FTS row, by ``rowids``) and ``statistics``.

        Compact types, and the scan's per-batch arrays let go of as they are joined: this
        runs once per publish over every posting (about 150 per chunk), so each byte per
        posting is 15 MB at 100,000 chunks. The scan holds no postings afterwards."""
        ids = self._row_indexes()
        doc_len = np.zeros(len(ids), dtype=np.float64)
        offsets = np.cumsum([0] + [len(df) for df in self.df])
        for at, count in zip(self.at, self.count):
            doc_len += np.bincount(at, weights=count, minlength=len(ids))
        self.count, self.orphans = [], []
        term = _drain(self.term, np.int32, offsets)
        row = _drain(self.at, np.int32)
        tf = _drain(self.tf, np.float32)
        return {
            "terms": self.terms,
            "df": np.concatenate(self.df) if self.df else np.zeros(0, dtype=np.int64),
            "term": term,
            "row": row,
            "tf": tf,
            "rowids": ids,
            "doc_len": doc_len,
            "statistics": _statistics(doc_len),
        }

    def postings(self, rowids: np.ndarray, dtype: type) -> dict:
        """The term-major arrays of :class:`rag_assets.search.bm25.MemoryBm25` for the rows
        ``rowids`` (ascending), with the statistics of every FTS row. Weights are computed
        batch by batch, for the kept postings only, so the float64 temporaries stay small."""
        ids = self._row_indexes()
        doc_len = np.zeros(len(ids), dtype=np.float64)  # D of every FTS row (0: no token)
        for at, count in zip(self.at, self.count):
            doc_len += np.bincount(at, weights=count, minlength=len(ids))
        stats = _statistics(doc_len)
        matrix_row = positions(rowids, ids)  # -1: a chunk without an embedding, or an orphan
        counts, row_parts = [], []
        weight_parts: list[np.ndarray] = []
        for term, at, tf, df in zip(self.term, self.at, self.tf, self.df):
            row = matrix_row[at]
            keep = row >= 0
            term, at, tf = term[keep], at[keep], tf[keep]
            weight = bm25_weights(tf, term, at, df.astype(np.float64), doc_len, stats)
            counts.append(np.bincount(term, minlength=len(df)))
            row_parts.append(row[keep])
            weight_parts.append(weight.astype(dtype))
        self.term, self.at, self.tf, self.count, self.orphans = [], [], [], [], []  # not needed any more
        indptr = np.zeros(len(self.terms) + 1, dtype=np.int64)
        if counts:
            np.cumsum(np.concatenate(counts), out=indptr[1:])
        return {
            "terms": self.terms,
            "indptr": indptr,
            "rows": np.concatenate(row_parts) if row_parts else np.zeros(0, dtype=np.int32),
            "weights": np.concatenate(weight_parts) if weight_parts else np.zeros(0, dtype=dtype),
            "statistics": stats,
        }
