"""BM25 from postings held in memory: the scores FTS5's ``bm25()`` gives, without FTS5.

FTS5 answers ``ORDER BY bm25(fts_chunks) LIMIT n`` by scoring every row that matches any
query word, and a question's content words often match most of the store. Here the
per-(term, chunk) BM25 weights are computed once, when a store is (re)loaded, and a query
is a few numpy gathers plus one ``bincount``: 1-2 ms at 100,000 chunks, where FTS5 takes
60 ms or more (bench/search.py).

**Same numbers as FTS5.** The postings are read from the store's own FTS5 index (an
``fts5vocab`` table of type ``instance`` over ``fts_chunks``: every token of every row,
as FTS5's ``porter unicode61`` tokenizer made it), so the terms and their counts are
FTS5's by construction; nothing is re-tokenized in Python. The formula is FTS5's
(``fts5_aux.c``)::

    score(row) = sum over query phrases p of  idf(p) * tf*(k1+1) / (tf + k1*(1 - b + b*D/avgdl))
    idf(p)     = log((N - n(p) + 0.5) / (n(p) + 0.5)), clamped to 1e-6 when <= 0

with k1 = 1.2, b = 0.75, N = every row of the FTS table (chunks without an embedding
count too, though they are never returned), n(p) = rows holding p, D = the row's token
count and avgdl = the table's total tokens / N. Like FTS5, a query holding two words with
the same stem ("run", "running") counts that term once per word.

**Statistics through public interfaces only.** FTS5 keeps N, the total and every D in
its shadow tables (``%_data`` record 1, ``%_docsize``) in a private format that a SQLite
upgrade may change; they are not read. The same numbers come from the instance scan
and the content table instead:

- D: the instances of the row in the ``instance`` table. FTS5 counts a row's size as its
  tokens (colocated synonyms aside, which ``porter unicode61`` never makes), and every
  token is one instance, so the counts are FTS5's own.
- the total: the sum of the D (every instance once).
- N: the rows of the content table ``chunks`` (the triggers put every one of them in the
  index, a row with no token too, as a D of 0), plus any row the instances show that
  ``chunks`` no longer holds (an orphan of a damaged store, which FTS5 still counts).

``test_bm25.py`` checks the result against FTS5's ``bm25()`` to 1e-9 on a store with
deletions, updates, an empty row and an orphan, and checks that a total off by one fails.

**Build.** One ``SELECT term, count(*), group_concat(doc) ... GROUP BY term`` over that
instance table (it lists a term's rows in rowid order, so SQLite does not sort), parsed
by numpy in batches; runs of equal (term, row) give tf. The weights need every row's D,
known only at the end of the scan, so (term, row, tf) are kept until then. At 100,000
chunks of 200 words (20 M tokens) that took about 3.5-4 s (2.5-3 s of it in SQLite), and
0.04-0.13 s from the cache.
Tokenizing the chunk texts in Python instead (regex, a dict of words, ``np.unique`` over
(term, chunk) pairs) measured 6.5 s or more, and could only imitate unicode61's rules.

**Query handling** is :func:`rag_assets.search.query.fts_match_query`'s, taken from its output:
the same words, the same stop words dropped. Each word becomes terms through a scratch
in-memory FTS5 table with the same tokenizer, so stems are FTS5's exactly. A word that
FTS5 splits into several tokens (``k3s_cert``) is a phrase to FTS5; its part of the score
is asked of FTS5 for that phrase alone (exact: a phrase's contribution does not depend on
the other phrases), or, without a connection, approximated by its tokens as separate
words. CJK text is not handled here (``fts_cjk`` stays on FTS5).

**Disk cache.** :meth:`MemoryBm25.load_or_build` keeps the arrays in an ``.npz`` file
beside the store (``<store>.bm25.npz``), keyed by the store's content stamp, its number
of chunks and the rowids of the chunks it scores, and written by temp file + rename, so a
restarted server does not rebuild. The file holds the store's whole vocabulary (every term of every
chunk, and which chunks hold it): it is as sensitive as the store itself, is written
into the store's folder with the store's file permissions, and must not be published.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import stat
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from rag_assets.index.atomic import _remove_abandoned_temp_files

log = logging.getLogger(__name__)

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6  # FTS5 replaces an idf <= 0 (a term in more than half of the rows) by this
TOKENIZE = "porter unicode61"  # fts_chunks's tokenizer (store.SCHEMA)
FORMAT = 1  # bump when the cached arrays change meaning
_BATCH_CHARS = 16_000_000  # group_concat text parsed per step while building


class StoreChanged(RuntimeError):
    """The store changed under a build; the postings would not match the loaded rows."""


# ------------------------------------------------------------------------------ tokenizing


class _Tokenizer:
    """Word -> the terms FTS5's ``porter unicode61`` makes of it, via a scratch FTS5 table.

    One in-memory connection shared by all threads (behind a lock), with a bounded cache:
    after warm-up a query's words are dictionary look-ups."""

    MAX_CACHED = 200_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._cache: dict[str, tuple[str, ...]] = {}

    def terms(self, words: list[str]) -> list[tuple[str, ...]]:
        cache = self._cache
        known = {w: cache[w] for w in words if w in cache}
        missing = [w for w in dict.fromkeys(words) if w not in known]
        if missing:
            found = self._tokenize(missing)
            if len(cache) + len(found) > self.MAX_CACHED:
                cache.clear()
            cache.update(found)
            known.update(found)
        return [known[w] for w in words]

    def _tokenize(self, words: list[str]) -> dict[str, tuple[str, ...]]:
        out: dict[int, list[str]] = {i: [] for i in range(len(words))}
        with self._lock:
            if self._conn is None:
                conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
                conn.execute(f"CREATE VIRTUAL TABLE words USING fts5(w, tokenize='{TOKENIZE}')")
                conn.execute("CREATE VIRTUAL TABLE tokens USING fts5vocab(words, 'instance')")
                self._conn = conn
            conn = self._conn
            conn.executemany("INSERT INTO words(rowid, w) VALUES (?, ?)", enumerate(words))
            try:
                for doc, term in conn.execute("SELECT doc, term FROM tokens ORDER BY doc, offset"):
                    out[doc].append(term)
            finally:
                conn.execute("DELETE FROM words")
        return {w: tuple(out[i]) for i, w in enumerate(words)}


_TOKENIZER = _Tokenizer()


def query_words(query: str) -> list[str]:
    """The words :func:`rag_assets.search.query.fts_match_query` would search for, in its order."""
    from rag_assets.search.query import fts_match_query

    match = fts_match_query(query)
    # Its output is '"w1" OR "w2" ...' with every word a run of \\w (no quote, no space).
    return [part[1:-1] for part in match.split(" OR ")] if match else []


# ------------------------------------------------------------------------------ store facts


def _positions(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Index of each of ``ids`` in the ascending ``sorted_ids`` (int32), -1 where absent."""
    if not len(sorted_ids):
        return np.full(len(ids), -1, dtype=np.int32)
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return np.where(sorted_ids[at] == ids, at, -1).astype(np.int32)


class _RowPositions:
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
        return _positions(self.ids, docs)


def content_table(conn: sqlite3.Connection, table: str = "fts_chunks") -> str:
    """The external-content table of FTS5 table ``table`` (``chunks`` for ``fts_chunks``),
    read from its CREATE statement; ValueError when it is not an FTS5 table over one with
    ``tokenize='porter unicode61'``."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    sql = row[0].replace('"', "'") if row and row[0] else ""
    if TOKENIZE not in sql:
        raise ValueError(f"{table} is not an FTS5 table with tokenize='{TOKENIZE}'")
    found = re.search(r"content\s*=\s*'([^']+)'", sql)
    if found is None:
        raise ValueError(f"{table} is not an external-content FTS5 table")
    return found.group(1)


def content_rowids(conn: sqlite3.Connection, content: str = "chunks") -> np.ndarray:
    """Rowids of the content table, ascending: the rows FTS5 indexes (its triggers add each)."""
    # No ORDER BY: SQLite may then read the rowids from a small index instead of the whole
    # table (text and vectors); numpy sorts them faster than SQLite would.
    rows = conn.execute(f"SELECT rowid FROM {content}").fetchall()
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
    """FTS5's BM25 weight (idf included, float64) of postings given by their tf, their
    term (an index into ``df``: rows holding each term) and their row (an index into
    ``doc_len``: tokens of each FTS row). idf and the length norm are computed once per
    term and per row, then gathered: a log per posting would cost more than the rest."""
    idf = np.log((stats.rows - df + 0.5) / (df + 0.5))
    idf[idf <= 0] = MIN_IDF
    length_norm = K1 * (1 - B + B * doc_len / stats.avgdl)
    return idf[term] * tf * (K1 + 1) / (tf + length_norm[row])


def _statistics_tuple(stats: Bm25Statistics | None) -> tuple[int, int]:
    """How the cache file holds the statistics; (-1, -1): not known."""
    return (stats.rows, stats.tokens) if stats is not None else (-1, -1)


def _statistics_from(saved: np.ndarray) -> Bm25Statistics | None:
    rows, tokens = (int(x) for x in saved)  # ValueError when damaged: the cache is not used
    return Bm25Statistics(rows, tokens) if rows >= 0 else None


def store_key(conn: sqlite3.Connection, rowids: np.ndarray, stamp: tuple | list, table: str = "fts_chunks") -> dict:
    """What the postings of a store depend on: its content stamp, its rows, the rows it scores.

    Cheap on purpose (it is checked at every load): the number of content rows comes from
    the smallest index; the FTS5 totals are not in it, as no public interface gives them
    without scanning the whole index. Every write of ``rag_assets.index.store`` moves the stamp
    or the number of chunks."""
    content = content_table(conn, table)
    return {
        "format": FORMAT,
        "tokenize": TOKENIZE,
        "stamp": json.loads(json.dumps(list(stamp), default=str)),
        "content_rows": conn.execute(f"SELECT count(*) FROM {content}").fetchone()[0],
        "rowids": hashlib.sha256(np.ascontiguousarray(rowids, dtype=np.int64).tobytes()).hexdigest(),
    }


# ------------------------------------------------------------------------------ the index


class _InstanceScan:
    """Every (term, row, tf) of an FTS5 table, read through an ``fts5vocab`` 'instance'
    table, and from them the BM25 statistics and weights (see the module docstring)."""

    def __init__(self, conn: sqlite3.Connection, table: str, positions: _RowPositions) -> None:
        self.conn = conn
        self.table = table
        self.positions = positions  # FTS rowid -> index among the content rows
        self.terms: list[str] = []
        # Per batch: rows holding each of its terms (every FTS row counts), and per posting
        # the term (index in the batch), the row and tf.
        self.df: list[np.ndarray] = []
        self.term: list[np.ndarray] = []
        self.at: list[np.ndarray] = []  # the row as an index among the content rows; -1: orphan
        self.orphans: list[np.ndarray] = []  # FTS rowids of the postings with an ``at`` of -1
        self.tf: list[np.ndarray] = []
        self.timing = {"sql": 0.0, "numpy": 0.0}

    def run(self, should_stop: Callable[[], bool] | None = None) -> None:
        """Read the instances, term by term, in batches of about ``_BATCH_CHARS``."""
        vocab = f"temp.bm25_vocab_{os.getpid()}_{threading.get_ident()}"
        conn = self.conn
        conn.execute(f"DROP TABLE IF EXISTS {vocab}")
        conn.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab(main, {self.table}, 'instance')")
        try:
            batch: tuple[list[str], list[int], list[str]] = ([], [], [])
            size = 0
            t = time.perf_counter()
            for term, n, text in conn.execute(f"SELECT term, count(*), group_concat(doc) FROM {vocab} GROUP BY term"):
                batch[0].append(term)
                batch[1].append(n)
                batch[2].append(text)
                size += len(text)
                if size >= _BATCH_CHARS:
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
        """One posting per run of equal (term, row) in the batch's instances; tf = run length."""
        t = time.perf_counter()
        docs = np.fromstring(",".join(texts), dtype=np.int64, sep=",")  # text mode: not the deprecated one
        n_inst = np.asarray(batch_counts, dtype=np.int64)
        if len(docs) != int(n_inst.sum()):
            raise ValueError("could not read the FTS5 index's instances")
        term = np.repeat(np.arange(len(batch_terms), dtype=np.int32), n_inst)
        if len(docs) > 1 and np.any((docs[1:] < docs[:-1]) & (term[1:] == term[:-1])):
            order = np.lexsort((docs, term))  # never seen: fts5vocab lists a term's rows in order
            docs, term = docs[order], term[order]
        new = np.ones(len(docs), dtype=bool)
        new[1:] = (docs[1:] != docs[:-1]) | (term[1:] != term[:-1])
        starts = np.flatnonzero(new)
        tf = np.diff(np.append(starts, len(docs))).astype(np.int32)
        term, docs = term[starts], docs[starts]
        self.df.append(np.bincount(term, minlength=len(batch_terms)))
        self.term.append(term)  # the batch's own term index (into its df)
        at = self.positions(docs)
        self.at.append(at)
        self.orphans.append(docs[at < 0])
        self.tf.append(tf)
        self.terms.extend(batch_terms)
        self.timing["numpy"] += time.perf_counter() - t

    def _row_indexes(self) -> np.ndarray:
        """Make every posting's ``at`` an index among all FTS rows, and return their rowids
        in that order: the content rows, then any orphan (a row the index still holds that
        the content table does not: a damaged store, but FTS5 counts it)."""
        ids = self.positions.ids
        if not any(len(x) for x in self.orphans):
            return ids
        extra = np.unique(np.concatenate(self.orphans))
        for at, orphans in zip(self.at, self.orphans):
            at[at < 0] = len(ids) + np.searchsorted(extra, orphans)
        log.warning("%s holds %d rows that its content table does not (orphans)", self.table, len(extra))
        return np.concatenate([ids, extra])

    def postings(self, rowids: np.ndarray, dtype: type) -> dict:
        """The term-major arrays of :class:`MemoryBm25` for the rows ``rowids`` (ascending),
        with the statistics of every FTS row. Weights are computed batch by batch, for the
        kept postings only, so the float64 temporaries stay small."""
        ids = self._row_indexes()
        doc_len = np.zeros(len(ids), dtype=np.float64)  # D of every FTS row (0: no token)
        for at, tf in zip(self.at, self.tf):
            doc_len += np.bincount(at, weights=tf, minlength=len(ids))
        stats = _statistics(doc_len)
        matrix_row = _positions(rowids, ids)  # -1: a chunk without an embedding, or an orphan
        counts, row_parts, weight_parts = [], [], []
        for term, at, tf, df in zip(self.term, self.at, self.tf, self.df):
            row = matrix_row[at]
            keep = row >= 0
            term, at, tf = term[keep], at[keep], tf[keep]
            weight = bm25_weights(tf.astype(np.float64), term, at, df.astype(np.float64), doc_len, stats)
            counts.append(np.bincount(term, minlength=len(df)))
            row_parts.append(row[keep])
            weight_parts.append(weight.astype(dtype))
        self.term, self.at, self.tf, self.orphans = [], [], [], []  # not needed any more
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


class MemoryBm25:
    """FTS5's bm25() over one store's ``fts_chunks``, from postings in memory.

    Rows are the SearchIndex matrix rows: ``rowids[row]`` is the chunk rowid of a row (the
    rowids of the chunks that have an embedding, ascending, as ``SearchIndex`` loads them).
    Postings are term-major: term ``t``'s rows are ``rows[indptr[t]:indptr[t+1]]`` with
    their BM25 weights (idf included) in ``weights`` at the same positions.
    """

    def __init__(
        self,
        *,
        terms: list[str],
        indptr: np.ndarray,
        rows: np.ndarray,
        weights: np.ndarray,
        rowids: np.ndarray,
        key: dict | None = None,
        connect: Callable[[], sqlite3.Connection] | None = None,
        table: str = "fts_chunks",
        timing: dict[str, float] | None = None,
        statistics: Bm25Statistics | None = None,
    ) -> None:
        self.terms = terms
        self.term_id = {t: i for i, t in enumerate(terms)}
        self.indptr = indptr
        self.rows = rows
        self.weights = weights
        self.rowids = np.asarray(rowids, dtype=np.int64)
        self.n_rows = len(self.rowids)
        self.key = key or {}
        self.connect = connect  # for phrases (see the module docstring); None: approximate them
        self.table = table
        self.timing = timing or {}
        self.statistics = statistics  # N and total tokens the weights were made with

    @property
    def postings(self) -> int:
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.rows.nbytes + self.weights.nbytes

    # -------------------------------------------------------------- building
    @classmethod
    def build(
        cls,
        conn: sqlite3.Connection,
        rowids: np.ndarray,
        *,
        key: dict | None = None,
        connect: Callable[[], sqlite3.Connection] | None = None,
        table: str = "fts_chunks",
        should_stop: Callable[[], bool] | None = None,
        dtype: type = np.float32,
    ) -> "MemoryBm25":
        """Read the postings from the store's FTS5 index. Run it inside a read transaction
        when the store may change meanwhile (``SearchIndex`` does). ``dtype``: of the kept
        weights; float32 halves their memory at ~1e-7 relative (tests ask for float64)."""
        t0 = time.perf_counter()
        rowids = np.asarray(rowids, dtype=np.int64)
        fts_ids = content_rowids(conn, content_table(conn, table))
        t1 = time.perf_counter()
        scan = _InstanceScan(conn, table, _RowPositions(fts_ids))
        scan.run(should_stop)
        t2 = time.perf_counter()
        built = scan.postings(rowids, dtype)
        timing = {
            "content rowids": t1 - t0,
            "instances (SQL)": scan.timing["sql"],
            "postings (numpy)": scan.timing["numpy"] + time.perf_counter() - t2,
            "total": time.perf_counter() - t0,
        }
        return cls(**built, rowids=rowids, key=key, connect=connect, table=table, timing=timing)

    # -------------------------------------------------------------- cache
    def save(self, path: Path, *, like: Path | None = None) -> None:
        """Write the arrays to ``path`` (temp file + rename); ``like``: copy its permissions
        (the store's: the file holds the store's vocabulary)."""
        path = Path(path)
        meta = json.dumps(self.key, sort_keys=True).encode()
        terms = "\n".join(self.terms).encode("utf-8")  # a term never holds a newline (a separator)
        _remove_abandoned_temp_files(path)  # left by a killed writer
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            mode = stat.S_IMODE(like.stat().st_mode) if like is not None and like.exists() else 0o600
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as handle:
                np.savez(
                    handle, meta=np.frombuffer(meta, dtype=np.uint8), terms=np.frombuffer(terms, dtype=np.uint8),
                    indptr=self.indptr, rows=self.rows, weights=self.weights, rowids=self.rowids,
                    statistics=np.asarray(_statistics_tuple(self.statistics), dtype=np.int64),
                )
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise

    @classmethod
    def load(
        cls, path: Path, key: dict, *, connect: Callable[[], sqlite3.Connection] | None = None, table: str = "fts_chunks"
    ) -> "MemoryBm25 | None":
        """The cached postings at ``path`` if they were made for ``key``; None otherwise."""
        try:
            with np.load(path, allow_pickle=False) as z:
                if json.loads(z["meta"].tobytes()) != json.loads(json.dumps(key, sort_keys=True)):
                    return None
                raw = z["terms"].tobytes().decode("utf-8")
                terms = raw.split("\n") if raw else []
                out = cls(
                    terms=terms, indptr=z["indptr"], rows=z["rows"], weights=z["weights"], rowids=z["rowids"],
                    key=key, connect=connect, table=table, statistics=_statistics_from(z["statistics"]),
                )
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
            return None
        if len(out.indptr) != len(terms) + 1 or out.indptr[-1] != len(out.rows) or len(out.rows) != len(out.weights):
            return None
        return out

    @classmethod
    def load_or_build(
        cls,
        conn: sqlite3.Connection,
        rowids: np.ndarray,
        stamp: tuple | list,
        *,
        cache: Path | None = None,
        like: Path | None = None,
        connect: Callable[[], sqlite3.Connection] | None = None,
        table: str = "fts_chunks",
        should_stop: Callable[[], bool] | None = None,
    ) -> "MemoryBm25":
        """The cached postings when ``cache`` holds this store's, else build (and cache) them.
        A cache that cannot be written (read-only folder) is only logged."""
        t0 = time.perf_counter()
        key = store_key(conn, rowids, stamp, table)
        if cache is not None and cache.is_file():
            found = cls.load(cache, key, connect=connect, table=table)
            if found is not None:
                found.timing = {"loaded from cache": time.perf_counter() - t0, "total": time.perf_counter() - t0}
                return found
        built = cls.build(conn, rowids, key=key, connect=connect, table=table, should_stop=should_stop)
        if cache is not None:
            t1 = time.perf_counter()
            try:
                built.save(cache, like=like)
                built.timing["cache written"] = time.perf_counter() - t1
            except OSError as exc:
                log.warning("could not cache the BM25 postings at %s: %s", cache, exc)
        return built

    # -------------------------------------------------------------- search
    def query_terms(self, query: str) -> tuple[list[int], list[str]]:
        """(term ids, one per query word that is one known token; duplicates kept as FTS5
        counts them) and (the words FTS5 reads as multi-token phrases)."""
        words = query_words(query)
        if not words:
            return [], []
        ids: list[int] = []
        phrases: list[str] = []
        for word, tokens in zip(words, _TOKENIZER.terms(words)):
            if len(tokens) > 1 and self.connect is not None:
                phrases.append(word)
                continue
            for token in tokens:  # one token; or a phrase's tokens as words (no connection)
                term = self.term_id.get(token)
                if term is not None:
                    ids.append(term)
        return ids, phrases

    def scores(self, query: str) -> np.ndarray | None:
        """BM25 score of every row (0: no match); None when the query has no usable word."""
        ids, phrases = self.query_terms(query)
        if not ids and not phrases:
            return None
        if len(ids) == 1 and not phrases:
            start, end = self.indptr[ids[0]], self.indptr[ids[0] + 1]
            scores = np.zeros(self.n_rows, dtype=np.float64)
            scores[self.rows[start:end]] = self.weights[start:end]
            return scores
        if ids:
            spans = [(self.indptr[t], self.indptr[t + 1]) for t in ids]
            rows = np.concatenate([self.rows[s:e] for s, e in spans])
            weights = np.concatenate([self.weights[s:e] for s, e in spans])
            scores = np.bincount(rows, weights=weights, minlength=self.n_rows)
        else:
            scores = np.zeros(self.n_rows, dtype=np.float64)
        for phrase in phrases:
            self._add_phrase(scores, phrase)
        return scores

    def _add_phrase(self, scores: np.ndarray, phrase: str) -> None:
        """FTS5's own bm25() for one phrase: its contribution to every row it matches."""
        found = self.connect().execute(
            f"SELECT rowid, -bm25({self.table}) FROM {self.table} WHERE {self.table} MATCH ?", (f'"{phrase}"',)
        ).fetchall()
        if not found or not self.n_rows:
            return
        rowids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        values = np.fromiter((r[1] for r in found), dtype=np.float64, count=len(found))
        at = _positions(self.rowids, rowids)
        known = at >= 0
        np.add.at(scores, at[known], values[known])

    def ranks(self, query: str, depth: int, mask: np.ndarray | None = None) -> dict[int, tuple[int, float]]:
        """Row -> (rank from 1, score) of the ``depth`` best rows among those ``mask`` allows,
        as ``SearchIndex._bm25_ranks`` returns them from FTS5 (ties: lower row first)."""
        scores = self.scores(query)
        if scores is None or depth <= 0:
            return {}
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        matched = np.flatnonzero(scores)
        n = min(depth, len(matched))
        if n == 0:
            return {}
        values = scores[matched]
        if n < len(matched):
            part = np.argpartition(-values, n - 1)[:n]
            matched, values = matched[part], values[part]
        order = np.lexsort((matched, -values))
        return {int(matched[i]): (rank, float(values[i])) for rank, i in enumerate(order, start=1)}


def describe(index: MemoryBm25) -> str:
    """One line for logs: size and how long it took."""
    took = index.timing.get("total", math.nan)
    how = "loaded from cache" if "loaded from cache" in index.timing else "built"
    return (
        f"BM25 postings {how} in {took:.2f} s: {len(index.terms):,} terms, {index.postings:,} postings, "
        f"{index.nbytes / 2**20:.0f} MiB"
    )


def query_stems(query: str) -> list[str]:
    """The FTS5 terms (stems) of the query's words, one per token, repeats kept as FTS5 counts them."""
    words = query_words(query)
    return [token for tokens in _TOKENIZER.terms(words) for token in tokens] if words else []
