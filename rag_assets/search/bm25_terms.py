"""A query's terms for the in-memory BM25, exactly as FTS5 would search them.

The words are :func:`rag_assets.index.query.fts_match_query`'s, taken from its output:
the same words, the same stop words dropped, the same repeats (a word said three times
is three OR'd phrases to FTS5, so three times its score; see that module). Each word
becomes terms through a scratch in-memory FTS5 table with the same tokenizer as
``fts_chunks`` (``porter unicode61``), so the stems are FTS5's exactly and nothing is
re-implemented in Python. A word FTS5 splits into several tokens (``k3s_cert``) is a
phrase to FTS5; :class:`rag_assets.search.bm25.MemoryBm25` asks FTS5 for that phrase's
part of the score.

A long query is capped (:func:`capped_words`): past ``MAX_QUERY_TERMS`` distinct words
(:mod:`rag_assets.index.query`), only the words that weigh most are searched, by FTS5 and
by the in-memory BM25 alike.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Mapping

from rag_assets.index.fts import TOKENIZE


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


TOKENIZER = _Tokenizer()


def query_words(query: str) -> list[str]:
    """The words :func:`rag_assets.index.query.fts_match_query` would search for, in its
    order, repeats included."""
    from rag_assets.index.query import fts_match_query

    match = fts_match_query(query)
    # Its output is '"w1" OR "w2" ...' with every word a run of \\w (no quote, no space).
    return [part[1:-1] for part in match.split(" OR ")] if match else []


def query_stems(query: str) -> list[str]:
    """The FTS5 terms (stems) of the query's words, one per token, repeats kept as FTS5 counts them."""
    return stems_of(query_words(query))


def stems_of(words: list[str]) -> list[str]:
    """The FTS5 terms of ``words``, one per token, repeats kept."""
    return [token for tokens in TOKENIZER.terms(words) for token in tokens] if words else []


def capped_words(
    words: list[str], frequency: Callable[[list[str]], Mapping[str, int]], n_rows: int, limit: int | None = None
) -> list[str]:
    """``words`` (as :func:`query_words` gives them), or, when they hold more than ``limit``
    distinct words (default ``MAX_QUERY_TERMS``), only the ``limit`` that weigh most, in
    their places, repeats kept.

    A word weighs its repeats times its idf (from ``frequency``: term -> number of chunks
    holding it, over ``n_rows`` chunks; a multi-token word by its rarest token): the most a
    word can add to a chunk's score, so the words left out are those that move a ranking
    least (common words, whose long doclists are also what FTS5 spends its time on). Words
    no chunk holds match nothing and come last. Short queries are returned as they are,
    without a look-up."""
    from rag_assets.index import query as query_module

    limit = query_module.MAX_QUERY_TERMS if limit is None else limit
    counts = Counter(words)
    if len(counts) <= limit:
        return words
    distinct = list(counts)
    tokens = TOKENIZER.terms(distinct)
    df = frequency(sorted({t for found in tokens for t in found}))

    def weight(i: int) -> float:
        known = [df.get(t, 0) for t in tokens[i]]
        if not known or min(known) == 0:
            return -1.0
        rarest = min(known)
        return counts[distinct[i]] * max(math.log((n_rows - rarest + 0.5) / (rarest + 0.5)), 1e-6)

    kept = {distinct[i] for i in sorted(range(len(distinct)), key=lambda i: (-weight(i), i))[:limit]}
    return [w for w in words if w in kept]
