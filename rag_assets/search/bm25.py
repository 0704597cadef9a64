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
count from ``fts_chunks_docsize`` and avgdl = the table's total tokens / N, both as FTS5
keeps them. Like FTS5, a query holding two words with the same stem ("run", "running")
counts that term once per word.

**Build.** One ``SELECT term, count(*), group_concat(doc) ... GROUP BY term`` over that
instance table (it lists a term's rows in rowid order, so SQLite does not sort), parsed
by numpy in batches; runs of equal (term, row) give tf. At 100,000 chunks of 200 words
(20 M tokens) that took about 3.5 s (2.5 s of it in SQLite), and 0.13 s from the cache.
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
beside the store (``<store>.bm25.npz``), keyed by the store's content stamp, its FTS5
totals and its chunk rowids, and written by temp file + rename, so a restarted server
does not rebuild. The file holds the store's whole vocabulary (every term of every
chunk, and which chunks hold it): it is as sensitive as the store itself, is written
into the store's folder with the store's file permissions, and must not be published.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import sqlite3
import stat
import tempfile
import threading
import time
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


def _varint(blob: bytes, i: int = 0) -> tuple[int, int]:
    """SQLite's varint (what FTS5 writes in its records): (value, offset after it)."""
    value = 0
    for k in range(8):
        byte = blob[i + k]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, i + k + 1
    return (value << 8) | blob[i + 8], i + 9


def fts_totals(conn: sqlite3.Connection, table: str = "fts_chunks") -> tuple[int, int]:
    """(rows, tokens) as FTS5 keeps them for bm25(): its 'averages' record (id 1 of %_data)."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    n_rows, i = _varint(row[0])
    tokens = 0
    while i < len(row[0]):  # one total per column; fts_chunks has one
        size, i = _varint(row[0], i)
        tokens += size
    return n_rows, tokens


def store_key(conn: sqlite3.Connection, rowids: np.ndarray, stamp: tuple | list, table: str = "fts_chunks") -> dict:
    """What the postings of a store depend on: its content stamp, its FTS5 totals, its rows."""
    return {
        "format": FORMAT,
        "tokenize": TOKENIZE,
        "stamp": json.loads(json.dumps(list(stamp), default=str)),
        "fts_totals": list(fts_totals(conn, table)),
        "rowids": hashlib.sha256(np.ascontiguousarray(rowids, dtype=np.int64).tobytes()).hexdigest(),
    }


# ------------------------------------------------------------------------------ the index


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
    ) -> "MemoryBm25":
        """Read the postings from the store's FTS5 index. Run it inside a read transaction
        when the store may change meanwhile (``SearchIndex`` does)."""
        t0 = time.perf_counter()
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        if sql is None or TOKENIZE not in sql[0].replace('"', "'"):
            raise ValueError(f"{table} is not an FTS5 table with tokenize='{TOKENIZE}'")
        rowids = np.asarray(rowids, dtype=np.int64)
        n_total, n_tokens = fts_totals(conn, table)
        avgdl = n_tokens / n_total if n_total else 1.0
        # Token count of every FTS row (what bm25() calls D), by FTS rowid.
        sizes = conn.execute(f"SELECT id, sz FROM {table}_docsize ORDER BY id").fetchall()
        fts_ids = np.fromiter((r[0] for r in sizes), dtype=np.int64, count=len(sizes))
        doc_len = np.fromiter(
            (sz[0] if len(sz) == 1 else _varint(sz)[0] for _, sz in sizes), dtype=np.float64, count=len(sizes)
        )
        del sizes
        fts_row = _positions(rowids, fts_ids)  # FTS row -> matrix row (-1: a chunk without an embedding)
        # FTS rowid -> its index in fts_ids: a table look-up when rowids are dense (they are
        # after a full rebuild), a binary search otherwise.
        top = int(fts_ids[-1]) if len(fts_ids) else 0
        lookup = None
        if len(fts_ids) and fts_ids[0] >= 0 and top <= 4 * len(fts_ids) + 1024:
            lookup = np.full(top + 1, -1, dtype=np.int32)
            lookup[fts_ids] = np.arange(len(fts_ids), dtype=np.int32)
        length_norm = K1 * (1 - B + B * doc_len / avgdl)  # per FTS row
        t1 = time.perf_counter()

        vocab = f"temp.bm25_vocab_{os.getpid()}_{threading.get_ident()}"
        conn.execute(f"DROP TABLE IF EXISTS {vocab}")
        conn.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab(main, {table}, 'instance')")
        terms: list[str] = []
        counts: list[np.ndarray] = []  # postings kept per term
        row_parts: list[np.ndarray] = []
        weight_parts: list[np.ndarray] = []
        timing = {"sql": 0.0, "numpy": 0.0}

        def flush(batch_terms: list[str], batch_counts: list[int], texts: list[str]) -> None:
            t = time.perf_counter()
            docs = np.fromstring(",".join(texts), dtype=np.int64, sep=",")  # text mode: not the deprecated one
            n_inst = np.asarray(batch_counts, dtype=np.int64)
            if len(docs) != int(n_inst.sum()):
                raise ValueError("could not read the FTS5 index's instances")
            term = np.repeat(np.arange(len(batch_terms), dtype=np.int32), n_inst)
            if len(docs) > 1 and np.any((docs[1:] < docs[:-1]) & (term[1:] == term[:-1])):
                order = np.lexsort((docs, term))  # never seen: fts5vocab lists a term's rows in order
                docs, term = docs[order], term[order]
            new = np.ones(len(docs), dtype=bool)  # one posting per run of (term, doc)
            new[1:] = (docs[1:] != docs[:-1]) | (term[1:] != term[:-1])
            starts = np.flatnonzero(new)
            tf = np.diff(np.append(starts, len(docs))).astype(np.float64)
            doc, term = docs[starts], term[starts]
            df = np.bincount(term, minlength=len(batch_terms)).astype(np.float64)  # over every FTS row
            idf = np.log((n_total - df + 0.5) / (df + 0.5))
            idf[idf <= 0] = MIN_IDF
            if lookup is not None and (not len(doc) or (doc.min() >= 0 and doc.max() <= top)):
                at = lookup[doc]
            else:
                at = _positions(fts_ids, doc)
            if np.any(at < 0):
                raise ValueError("the FTS5 index holds a row that fts_chunks_docsize does not")
            row = fts_row[at]
            keep = row >= 0
            weight = idf[term] * tf * (K1 + 1) / (tf + length_norm[at])
            terms.extend(batch_terms)
            counts.append(np.bincount(term[keep], minlength=len(batch_terms)))
            row_parts.append(row[keep])
            weight_parts.append(weight[keep].astype(np.float32))
            timing["numpy"] += time.perf_counter() - t

        try:
            batch_terms: list[str] = []
            batch_counts: list[int] = []
            texts: list[str] = []
            size = 0
            t = time.perf_counter()
            for term, n, text in conn.execute(f"SELECT term, count(*), group_concat(doc) FROM {vocab} GROUP BY term"):
                batch_terms.append(term)
                batch_counts.append(n)
                texts.append(text)
                size += len(text)
                if size >= _BATCH_CHARS:
                    timing["sql"] += time.perf_counter() - t
                    flush(batch_terms, batch_counts, texts)
                    batch_terms, batch_counts, texts, size = [], [], [], 0
                    if should_stop is not None and should_stop():
                        raise StoreChanged("the build was abandoned: a newer load replaced it")
                    t = time.perf_counter()
            timing["sql"] += time.perf_counter() - t
            if batch_terms:
                flush(batch_terms, batch_counts, texts)
        finally:
            conn.execute(f"DROP TABLE IF EXISTS {vocab}")
        indptr = np.zeros(len(terms) + 1, dtype=np.int64)
        if counts:
            np.cumsum(np.concatenate(counts), out=indptr[1:])
        rows = np.concatenate(row_parts) if row_parts else np.zeros(0, dtype=np.int32)
        weights = np.concatenate(weight_parts) if weight_parts else np.zeros(0, dtype=np.float32)
        timing = {
            "docsize": t1 - t0,
            "instances (SQL)": timing["sql"],
            "postings (numpy)": timing["numpy"],
            "total": time.perf_counter() - t0,
        }
        return cls(
            terms=terms, indptr=indptr, rows=rows, weights=weights, rowids=rowids, key=key, connect=connect,
            table=table, timing=timing,
        )

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
                    key=key, connect=connect, table=table,
                )
        except (OSError, ValueError, KeyError, json.JSONDecodeError, UnicodeDecodeError):
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
