"""A query's terms for the in-memory BM25, exactly as FTS5 would search them.

The words are :func:`rag_assets.index.query.fts_match_query`'s, taken from its output:
the same words, the same stop words dropped, the same repeats (a word said three times
is three OR'd phrases to FTS5, so three times its score; see that module). Each word
becomes terms through a scratch in-memory FTS5 table with the same tokenizer as
``fts_chunks`` (``porter unicode61``), so the stems are FTS5's exactly and nothing is
re-implemented in Python. A word FTS5 splits into several tokens (``k3s_cert``) is a
phrase to FTS5; :class:`rag_assets.search.bm25.MemoryBm25` asks FTS5 for that phrase's
part of the score.
"""

from __future__ import annotations

import sqlite3
import threading

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
    words = query_words(query)
    return [token for tokens in TOKENIZER.terms(words) for token in tokens] if words else []
