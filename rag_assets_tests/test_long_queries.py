"""Long queries (pasted paragraphs) are capped at MAX_QUERY_TERMS distinct words, in FTS5 and in memory alike.

On a store built by the real pipeline: a paragraph query gets the same top hits through
FTS5 and through the in-memory BM25, while FTS5 is handed the capped words only; and a
query of thousands of words hands each path a bounded number of terms (counted: the
phrases in the MATCH expression FTS5 receives, the postings lists the memory path reads).
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing

import numpy as np
import pytest

from rag_assets.index import query as query_module
from rag_assets.index.params import SearchParams
from rag_assets.search.bm25 import MemoryBm25, query_words
from rag_assets.search.retrieval import SearchIndex, tier_embedder

from .test_bm25 import cfg  # noqa: F401  (the module's store: sample content, real pipeline)

CAP = query_module.MAX_QUERY_TERMS
BM25 = SearchParams(mode="bm25", k=10, view="chunks", min_score=0.0)


@pytest.fixture(scope="module")
def indexes(cfg):  # noqa: F811
    fts = SearchIndex(cfg.public_store_path, cfg.collection_weights, log_searches=False)
    memory = SearchIndex(cfg.public_store_path, cfg.collection_weights, log_searches=False, lexical="memory")
    assert memory.loaded().bm25 is not None
    return fts, memory


def _paragraph(path) -> str:
    """A real paragraph of the store: the text of the longest chunk of the content."""
    with closing(sqlite3.connect(path)) as conn:
        (text,) = conn.execute("SELECT text FROM chunks ORDER BY length(text) DESC LIMIT 1").fetchone()
    return text


def _matches_sent_to_fts5(index: SearchIndex, run) -> list[str]:
    """The MATCH expressions on fts_chunks that FTS5 received while ``run()`` ran."""
    statements: list[str] = []
    conn = index._connection()
    conn.set_trace_callback(statements.append)
    try:
        run()
    finally:
        conn.set_trace_callback(None)
    found = [re.search(r"fts_chunks MATCH '((?:[^']|'')*)'", s) for s in statements if "FROM fts_chunks WHERE" in s]
    return [m.group(1) for m in found if m]


def test_a_paragraph_gets_the_same_top_hits_through_fts5_capped_and_in_memory(cfg, indexes):  # noqa: F811
    fts, memory = indexes
    query = _paragraph(cfg.public_store_path)
    assert len(set(query_words(query))) > CAP  # long enough to be capped
    for mode in ("bm25", "hybrid"):
        params = SearchParams(mode=mode, k=10, view="chunks", min_score=0.0)
        embedder = tier_embedder(cfg, "public", fts) if mode == "hybrid" else None
        by_fts: list = []
        matches = _matches_sent_to_fts5(fts, lambda: by_fts.extend(fts.search(query, embedder, params).hits))
        by_memory = memory.search(query, embedder, params).hits
        assert [h.id for h in by_fts] == [h.id for h in by_memory], mode
        assert [h.score for h in by_memory] == pytest.approx([h.score for h in by_fts], rel=1e-6), mode
        assert [h.relevance for h in by_memory] == pytest.approx([h.relevance for h in by_fts], rel=1e-5), mode
        assert len(matches) == 1 and len(set(matches[0].split(" OR "))) == CAP, (mode, matches)
    # The paragraph finds its own chunk first, capped or not.
    assert by_fts[0].text == query


def test_the_words_kept_are_the_rarest_not_the_first(cfg, indexes):  # noqa: F811
    fts, _ = indexes
    data = fts.loaded()
    common = "proxmox " * 3
    filler = " ".join(f"zz{i}qq" for i in range(CAP))  # words no chunk holds come last
    searched, every = fts._query_words(data, f"{common} {filler} vlan wireguard restic")
    assert len(set(every)) == CAP + 4 and len(set(searched)) == CAP
    assert {"proxmox", "vlan", "wireguard", "restic"} <= set(searched)


def test_a_query_of_thousands_of_words_hands_each_path_a_bounded_number_of_terms(cfg, indexes, monkeypatch):  # noqa: F811
    fts, memory = indexes
    with closing(sqlite3.connect(cfg.public_store_path)) as conn:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, fts_chunks, 'row')")
        vocabulary = [t for (t,) in conn.execute("SELECT term FROM temp.v WHERE term GLOB '[a-z]*'")]
    rng = np.random.default_rng(7)
    words = [*vocabulary, *(f"qx{i}zz" for i in range(2000))]
    query = " ".join(rng.choice(words, size=6000))
    assert len(set(query_words(query))) > 1000

    read: list[int] = []
    original = MemoryBm25.query_terms

    def counted(self, *args):
        ids, phrases = original(self, *args)
        read.append(len(ids) + len(phrases))
        return ids, phrases

    monkeypatch.setattr(MemoryBm25, "query_terms", counted)
    most = CAP * query_module.MAX_REPEATS
    assert memory.search(query, None, BM25).hits
    assert read and max(read) <= most
    hits: list = []
    matches = _matches_sent_to_fts5(fts, lambda: hits.extend(fts.search(query, None, BM25).hits))
    assert hits and len(matches) == 1
    phrases = matches[0].split(" OR ")
    assert len(set(phrases)) == CAP and len(phrases) <= most
