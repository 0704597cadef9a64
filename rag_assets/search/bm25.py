"""BM25 from postings held in memory: the scores FTS5's ``bm25()`` gives, without FTS5.

FTS5 answers ``ORDER BY bm25(fts_chunks, ...) LIMIT n`` by scoring every row that matches
any query word, and a question's content words often match most of the store. Here the
per-(term, chunk) BM25 weights are computed once, when a store is (re)loaded, and a query
is a few numpy gathers plus one ``bincount``: 1-2 ms at 100,000 chunks, where FTS5 takes
60 ms or more (bench/search.py).

**Same numbers as FTS5**, field weights included (:mod:`rag_assets.index.fields`): the
postings, their column-weighted tf and the statistics are read from the store's own FTS5
index (:mod:`rag_assets.index.bm25_scan`, which states the formula), and a query's terms
are FTS5's own (:mod:`rag_assets.search.bm25_terms`). Like FTS5, a query holding a word
twice, or two words with the same stem ("run", "running"), counts that term once per word.
``test_bm25.py`` checks the result against FTS5's ``bm25()`` to 1e-9 on a store with
deletions, updates, an empty row and an orphan, and checks that a total off by one fails.

**Phrases.** A word FTS5 splits into several tokens (``k3s_cert``) is a phrase to FTS5;
its part of the score is asked of FTS5 for that phrase alone (exact: a phrase's
contribution does not depend on the other phrases), or, without a connection,
approximated by its tokens as separate words. CJK text is not handled here (``fts_cjk``
stays on FTS5).

**Disk cache.** :meth:`MemoryBm25.load_or_build` keeps the arrays in an ``.npz`` file
beside the store (``<store>.bm25.npz``), keyed by the store's content stamp, its number
of chunks, the rowids of the chunks it scores and the field weights, and written by temp
file + rename, so a restarted server does not rebuild (0.04-0.13 s to load at 100,000
chunks). The file holds the store's whole vocabulary (every term of every chunk, and which
chunks hold it): it is as sensitive as the store itself, is written into the store's
folder with the store's file permissions, and must not be published.
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
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from rag_assets.base.atomic import remove_abandoned_temp_files
from rag_assets.index.bm25_scan import (
    Bm25Statistics,
    InstanceScan,
    RowPositions,
    StoreChanged,
    content_rowids,
    fts_table,
    positions,
)
from rag_assets.index.fields import FieldWeights, bm25_call
from rag_assets.index.fts import TOKENIZE
from rag_assets.search.bm25_terms import TOKENIZER, query_words

__all__ = ["Bm25Statistics", "MemoryBm25", "StoreChanged", "describe", "query_words", "store_key"]

log = logging.getLogger(__name__)

FORMAT = 2  # bump when the cached arrays change meaning (2: column-weighted tf)


def _statistics_tuple(stats: Bm25Statistics | None) -> tuple[int, int]:
    """How the cache file holds the statistics; (-1, -1): not known."""
    return (stats.rows, stats.tokens) if stats is not None else (-1, -1)


def _statistics_from(saved: np.ndarray) -> Bm25Statistics | None:
    rows, tokens = (int(x) for x in saved)  # ValueError when damaged: the cache is not used
    return Bm25Statistics(rows, tokens) if rows >= 0 else None


def store_key(
    conn: sqlite3.Connection,
    rowids: np.ndarray,
    stamp: tuple | list,
    table: str = "fts_chunks",
    fields: FieldWeights = FieldWeights(),
) -> dict:
    """What the postings of a store depend on: its content stamp, its rows, the rows it
    scores, and the weight of each column of its FTS table.

    Cheap on purpose (it is checked at every load): the number of content rows comes from
    the smallest index; the FTS5 totals are not in it, as no public interface gives them
    without scanning the whole index. Every write of ``rag_assets.index.store`` moves the stamp
    or the number of chunks."""
    fts = fts_table(conn, table)
    return {
        "format": FORMAT,
        "tokenize": TOKENIZE,
        "stamp": json.loads(json.dumps(list(stamp), default=str)),
        "content_rows": conn.execute(f"SELECT count(*) FROM {fts.content}").fetchone()[0],
        "rowids": hashlib.sha256(np.ascontiguousarray(rowids, dtype=np.int64).tobytes()).hexdigest(),
        "columns": list(fts.columns),
        "column_weights": list(fields.for_columns(fts.columns)),
    }


# ------------------------------------------------------------------------------ the index


class MemoryBm25:
    """FTS5's bm25() over one store's ``fts_chunks``, from postings in memory.

    Rows are the SearchIndex matrix rows: ``rowids[row]`` is the chunk rowid of a row (the
    rowids of the chunks that have an embedding, ascending, as ``SearchIndex`` loads them).
    Postings are term-major: term ``t``'s rows are ``rows[indptr[t]:indptr[t+1]]`` with
    their BM25 weights (idf included) in ``weights`` at the same positions, made with
    ``column_weights`` (one per column of the FTS table, in its order).
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
        column_weights: Sequence[float] | None = None,
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
        self.column_weights = tuple(column_weights) if column_weights is not None else FieldWeights().as_tuple()

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
        fields: FieldWeights = FieldWeights(),
    ) -> MemoryBm25:
        """Read the postings from the store's FTS5 index. Run it inside a read transaction
        when the store may change meanwhile (``SearchIndex`` does). ``dtype``: of the kept
        weights; float32 halves their memory at ~1e-7 relative (tests ask for float64).
        ``fields``: the weight of each column (ValueError for a column it has none for)."""
        t0 = time.perf_counter()
        rowids = np.asarray(rowids, dtype=np.int64)
        fts = fts_table(conn, table)
        column_weights = fields.for_columns(fts.columns)
        fts_ids = content_rowids(conn, fts)
        t1 = time.perf_counter()
        scan = InstanceScan(conn, fts, RowPositions(fts_ids), column_weights)
        scan.run(should_stop)
        t2 = time.perf_counter()
        built = scan.postings(rowids, dtype)
        timing = {
            "content rowids": t1 - t0,
            "instances (SQL)": scan.timing["sql"],
            "postings (numpy)": scan.timing["numpy"] + time.perf_counter() - t2,
            "total": time.perf_counter() - t0,
        }
        return cls(
            **built, rowids=rowids, key=key, connect=connect, table=table, timing=timing, column_weights=column_weights
        )

    # -------------------------------------------------------------- cache
    def save(self, path: Path, *, like: Path | None = None) -> None:
        """Write the arrays to ``path`` (temp file + rename); ``like``: copy its permissions
        (the store's: the file holds the store's vocabulary)."""
        path = Path(path)
        meta = json.dumps(self.key, sort_keys=True).encode()
        terms = "\n".join(self.terms).encode("utf-8")  # a term never holds a newline (a separator)
        remove_abandoned_temp_files(path)  # left by a killed writer
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            mode = stat.S_IMODE(like.stat().st_mode) if like is not None and like.exists() else 0o600
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as handle:
                np.savez(
                    handle,
                    meta=np.frombuffer(meta, dtype=np.uint8),
                    terms=np.frombuffer(terms, dtype=np.uint8),
                    indptr=self.indptr,
                    rows=self.rows,
                    weights=self.weights,
                    rowids=self.rowids,
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
        cls,
        path: Path,
        key: dict,
        *,
        connect: Callable[[], sqlite3.Connection] | None = None,
        table: str = "fts_chunks",
    ) -> MemoryBm25 | None:
        """The cached postings at ``path`` if they were made for ``key``; None otherwise."""
        try:
            with np.load(path, allow_pickle=False) as z:
                if json.loads(z["meta"].tobytes()) != json.loads(json.dumps(key, sort_keys=True)):
                    return None
                raw = z["terms"].tobytes().decode("utf-8")
                terms = raw.split("\n") if raw else []
                out = cls(
                    terms=terms,
                    indptr=z["indptr"],
                    rows=z["rows"],
                    weights=z["weights"],
                    rowids=z["rowids"],
                    key=key,
                    connect=connect,
                    table=table,
                    statistics=_statistics_from(z["statistics"]),
                    column_weights=key["column_weights"],
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
        fields: FieldWeights = FieldWeights(),
    ) -> MemoryBm25:
        """The cached postings when ``cache`` holds this store's (made with these field
        weights), else build (and cache) them. A cache that cannot be written (read-only
        folder) is only logged."""
        t0 = time.perf_counter()
        key = store_key(conn, rowids, stamp, table, fields)
        if cache is not None and cache.is_file():
            found = cls.load(cache, key, connect=connect, table=table)
            if found is not None:
                found.timing = {"loaded from cache": time.perf_counter() - t0, "total": time.perf_counter() - t0}
                return found
        built = cls.build(conn, rowids, key=key, connect=connect, table=table, should_stop=should_stop, fields=fields)
        if cache is not None:
            t1 = time.perf_counter()
            try:
                built.save(cache, like=like)
                built.timing["cache written"] = time.perf_counter() - t1
            except OSError as exc:
                log.warning("could not cache the BM25 postings at %s: %s", cache, exc)
        return built

    # -------------------------------------------------------------- search
    def query_terms(self, query: str, words: list[str] | None = None) -> tuple[list[int], list[str]]:
        """(term ids, one per query word that is one known token; repeats kept, as FTS5
        counts each) and (the words FTS5 reads as multi-token phrases, repeats kept).
        ``words``: the query's words already chosen (a capped long query); None: all of them."""
        words = query_words(query) if words is None else words
        if not words:
            return [], []
        ids: list[int] = []
        phrases: list[str] = []
        for word, tokens in zip(words, TOKENIZER.terms(words)):
            if len(tokens) > 1 and self.connect is not None:
                phrases.append(word)
                continue
            for token in tokens:  # one token; or a phrase's tokens as words (no connection)
                term = self.term_id.get(token)
                if term is not None:
                    ids.append(term)
        return ids, phrases

    def scores(self, query: str, words: list[str] | None = None) -> np.ndarray | None:
        """BM25 score of every row (0: no match); None when the query has no usable word.
        ``words``: as in :meth:`query_terms`."""
        ids, phrases = self.query_terms(query, words)
        if not ids and not phrases:
            return None
        times = Counter(ids)  # a term FTS5 scores n times (repeated words, shared stems) weighs n times
        if len(times) == 1 and not phrases:
            term, n = next(iter(times.items()))
            start, end = self.indptr[term], self.indptr[term + 1]
            scores: np.ndarray = np.zeros(self.n_rows, dtype=np.float64)
            scores[self.rows[start:end]] = self.weights[start:end] * np.float64(n)
            return scores
        if ids:
            spans = [(self.indptr[t], self.indptr[t + 1], n) for t, n in times.items()]
            rows = np.concatenate([self.rows[s:e] for s, e, _ in spans])
            weights = np.concatenate(
                [self.weights[s:e] if n == 1 else self.weights[s:e] * np.float64(n) for s, e, n in spans]
            )
            scores = np.bincount(rows, weights=weights, minlength=self.n_rows)
        else:
            scores = np.zeros(self.n_rows, dtype=np.float64)
        for phrase in phrases:
            self._add_phrase(scores, phrase)
        return scores

    def _add_phrase(self, scores: np.ndarray, phrase: str) -> None:
        """FTS5's own bm25() for one phrase: its contribution to every row it matches."""
        bm25 = bm25_call(self.table, len(self.column_weights))
        assert self.connect is not None  # query_terms makes phrases only when there is a connection
        found = (
            self.connect()
            .execute(
                f"SELECT rowid, -{bm25} FROM {self.table} WHERE {self.table} MATCH ?",
                (*self.column_weights, f'"{phrase}"'),
            )
            .fetchall()
        )
        if not found or not self.n_rows:
            return
        rowids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        values = np.fromiter((r[1] for r in found), dtype=np.float64, count=len(found))
        at = positions(self.rowids, rowids)
        known = at >= 0
        np.add.at(scores, at[known], values[known])

    def ranks(
        self, query: str, depth: int, mask: np.ndarray | None = None, words: list[str] | None = None
    ) -> dict[int, tuple[int, float]]:
        """Row -> (rank from 1, score) of the ``depth`` best rows among those ``mask`` allows,
        as ``SearchIndex._bm25_ranks`` returns them from FTS5 (ties: lower row first).
        ``words``: as in :meth:`query_terms`."""
        scores = self.scores(query, words)
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
