"""In-memory BM25 (rag_assets.search.bm25) against FTS5's bm25(), on stores built by the real pipeline."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import threading
from contextlib import closing
from dataclasses import replace

import numpy as np
import pytest

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.index import bm25_scan
from rag_assets.index.fields import FieldWeights, bm25_call
from rag_assets.index.params import SearchParams
from rag_assets.index.query import fts_match_query
from rag_assets.search import bm25_terms
from rag_assets.search.bm25 import MemoryBm25, query_words
from rag_assets.search.retrieval import SearchIndex, tier_embedder

from .conftest import SAMPLE_CONTENT, build_files_once, copy_built, instance_for_test
from .test_search import NASTY, TREE

REL = 1e-6  # float32 weights: ~1e-7 relative
WEIGHTS = FieldWeights().as_tuple()  # the defaults, which SearchIndex uses


def fts5_scores(conn, query: str, fields: FieldWeights = FieldWeights()) -> dict[int, float]:
    """FTS5's own bm25() of every row matching ``query`` (fts_match_query's), with these field weights."""
    sql = f"SELECT rowid, -{bm25_call()} FROM fts_chunks WHERE fts_chunks MATCH ?"
    return dict(conn.execute(sql, (*fields.as_tuple(), fts_match_query(query))))


# Pages that exercise the tokenizer: stems shared by several query words, a word FTS5
# reads as a phrase (k3s_cert), diacritics, numbers, CJK.
EXTRA = {
    "posts/tokens.md": "---\ntitle: Tokenizer corner cases\ntags: [tokens]\nstatus: draft\n---\n# Tokenizer corner cases\n\n"
    "The k3s_cert rotation runs monthly; running it by hand also runs the k3s cert check. "
    "Café, CAFE and cafe are one term to unicode61; ǅemal and İstanbul fold too. x² and 10GbE ports. "
    "Run, runs, running, runner: the runner runs the run.\n\n## Repeated\n\n" + "vlan " * 40 + "trunk bridge\n",
    "docs/cjk-mixed.md": "---\ntitle: 東京 notes\n---\n# 東京 notes\n\nProxmox 在东京的机房 with VLAN trunk ports.\n",
}
EXTRA.update(TREE)

QUERIES = [
    "how do I set up vlans on proxmox",
    "zfs snapshots",
    "snapshots handshake vlan",
    "vlan",
    "vlan vlan vlan",
    "run running runs runner",
    "k3s_cert",
    "k3s_cert rotation",
    "k3s cert",
    "café",
    "CAFE cafe",
    "x² 10gbe",
    "the",
    "how to",
    "what is the",
    "backup restore",
    "docker compose network",
    "wireguard peers keys",
    "zzqqxv",
    "zzqqxv vlan",
    "東京 proxmox",
    "东京",
    "home assistant automation",
    "kubernetes k3s cluster",
    # Long enough (LONG_QUERY_WORDS) for repeats to count: FTS5 scores each repeated phrase.
    "vlan trunk vlan bridge vlan proxmox zfs snapshots backup restore docker compose network wireguard peers "
    "keys kubernetes cluster node runner k3s_cert vlan k3s_cert rotation café cafe tokens corner cases",
]


def _copy_sample(root):
    shutil.copytree(SAMPLE_CONTENT, root, ignore=shutil.ignore_patterns("vaults"))
    for rel, text in EXTRA.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _build(cfg):
    with instance_for_test() as instance:
        assert run_build(cfg, instance, vaults=[]).success


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    """One store for the read-only tests: the sample content plus EXTRA (the real pipeline)."""
    base = tmp_path_factory.mktemp("bm25")
    _copy_sample(base / "content")
    cfg = load_config(
        None,
        content_dir=base / "content",
        output_dir=base / "out",
        embedder="hashing",
        private_embedder="hashing",
        environ={},
    )
    _build(cfg)
    return cfg


@pytest.fixture(scope="module")
def indexes(cfg):
    fts = SearchIndex(cfg.public_store_path, cfg.collection_weights, log_searches=False)
    memory = SearchIndex(cfg.public_store_path, cfg.collection_weights, log_searches=False, lexical="memory")
    assert memory.loaded().bm25 is not None
    return fts, memory


def _vocabulary_queries(path, n=40, seed=5):
    """Queries made of the store's own terms, common and rare, so most of them match a lot."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, fts_chunks, 'row')")
        terms = [t for (t,) in conn.execute("SELECT term FROM temp.v WHERE term GLOB '[a-z]*' ORDER BY doc DESC")]
    rng = np.random.default_rng(seed)
    common, rare = terms[:200], terms[200:]
    return [
        " ".join([*rng.choice(common, size=int(rng.integers(1, 4))), *rng.choice(rare, size=int(rng.integers(0, 3)))])
        for _ in range(n)
    ]


def assert_same_ranking(fts: dict, mem: dict, k: int = 10, context: str = "") -> None:
    """Same rows and scores (1e-4 relative); a row may differ only where scores tie."""
    assert len(fts) == len(mem), context
    for row in fts.keys() & mem.keys():
        assert mem[row][1] == pytest.approx(fts[row][1], rel=REL), context
    a = sorted((s for _, s in fts.values()), reverse=True)
    b = sorted((s for _, s in mem.values()), reverse=True)
    assert b == pytest.approx(a, rel=REL), context
    top_f = {r for r, (rank, _) in fts.items() if rank <= k}
    top_m = {r for r, (rank, _) in mem.items() if rank <= k}
    if top_f != top_m:
        cut = a[min(k, len(a)) - 1]  # only rows scoring as the last one kept may swap
        for row in top_f ^ top_m:
            score = fts[row][1] if row in fts else mem[row][1]
            assert score == pytest.approx(cut, rel=REL), context


# ------------------------------------------------------------------------------ agreement


def test_scores_and_top10_agree_with_fts5(cfg, indexes):
    fts, memory = indexes
    data_f, data_m = fts.loaded(), memory.loaded()
    assert data_m.bm25.postings > 0 and len(data_m.bm25.terms) > 100
    matched = 0
    for query in QUERIES + _vocabulary_queries(cfg.public_store_path):
        for depth in (10, 100):
            a = fts._bm25_ranks(data_f, query, None, depth)
            b = memory._bm25_ranks(data_m, query, None, depth)
            assert_same_ranking(a, b, context=query)
        matched += bool(a)
    assert matched > 40


def test_memory_scores_are_fts5_bm25_for_every_matching_row(cfg, indexes):
    """Not only the top: every row FTS5 matches, with FTS5's own number (no stop-word query)."""
    _, memory = indexes
    data = memory.loaded()
    conn = memory._connection()
    for query in ("vlan trunk bridge", "run running", "proxmox backup zfs", "k3s_cert runs"):
        scores = data.bm25.scores(query)
        expected = fts5_scores(conn, query)
        got = {int(data.rowids[r]): float(scores[r]) for r in np.flatnonzero(scores)}
        assert got.keys() == {r for r in expected if r in data.row_of}, query
        for rowid, score in got.items():
            assert score == pytest.approx(expected[rowid], rel=REL), query


def test_rows_without_an_embedding_count_for_fts5_but_are_never_returned(indexes):
    """N, document frequencies and avgdl cover every FTS row, as in FTS5; only loaded rows score."""
    fts, _ = indexes
    data = fts.loaded()
    conn = fts._connection()
    some = data.rowids[::3]  # as if the other chunks had no embedding
    bm25 = MemoryBm25.build(conn, some, connect=fts._connection)
    for query in ("vlan trunk bridge", "run running k3s_cert", "proxmox zfs backup"):
        expected = fts5_scores(conn, query)
        ranks = bm25.ranks(query, 1000)
        assert {int(some[r]) for r in ranks} == {r for r in expected if r in set(some.tolist())}
        for row, (_, score) in ranks.items():
            assert score == pytest.approx(expected[int(some[row])], rel=REL)


def test_full_searches_are_the_same_in_both_modes(cfg, indexes):
    fts, memory = indexes
    embedder = tier_embedder(cfg, "public", fts)
    for query in QUERIES[:12]:
        for params in (
            SearchParams(min_score=0),
            SearchParams(mode="bm25", min_score=0),
            SearchParams(k=5, fusion="convex"),
        ):
            a = fts.search(query, embedder, params).hits
            b = memory.search(query, embedder, params).hits
            assert [h.score for h in b] == pytest.approx([h.score for h in a], rel=REL), query
            assert [h.id for h in b if h.bm25_score is None] == [h.id for h in a if h.bm25_score is None], query
            assert [h.bm25_score or 0.0 for h in b] == pytest.approx([h.bm25_score or 0.0 for h in a], rel=REL), query


def test_query_handling_is_fts_match_querys(indexes):
    _, memory = indexes
    bm25 = memory.loaded().bm25
    assert query_words("How do I set up VLANs on Proxmox?") == ["set", "vlans", "proxmox"]
    assert query_words("how to") == ["how", "to"]  # nothing but stop words: all of them
    assert query_words('"; DROP --') == ["drop"]
    ids, phrases = bm25.query_terms("running runs k3s_cert")
    assert len(ids) == 2 and ids[0] == ids[1]  # one stem, counted once per word as FTS5 does
    assert phrases == ["k3s_cert"]


def test_phrases_without_a_connection_are_approximated_by_their_tokens(indexes):
    _, memory = indexes
    bm25 = memory.loaded().bm25
    loose = MemoryBm25(terms=bm25.terms, indptr=bm25.indptr, rows=bm25.rows, weights=bm25.weights, rowids=bm25.rowids)
    ids, phrases = loose.query_terms("k3s_cert")
    assert phrases == [] and [loose.terms[i] for i in ids] == ["k3", "cert"]
    assert loose.ranks("k3s_cert", 10)


def test_unseen_words_match_nothing(indexes):
    fts, memory = indexes
    data = memory.loaded()
    assert memory._bm25_ranks(data, "zzqqxv qqzzvv", None, 10) == {}
    assert data.bm25.ranks("zzqqxv", 10) == {}
    assert_same_ranking(
        fts._bm25_ranks(fts.loaded(), "zzqqxv vlan", None, 100), memory._bm25_ranks(data, "zzqqxv vlan", None, 100)
    )


@pytest.mark.parametrize("query", NASTY)
def test_nasty_input_agrees_and_never_breaks(indexes, query):
    fts, memory = indexes
    a = fts._bm25_ranks(fts.loaded(), query, None, 100)
    b = memory._bm25_ranks(memory.loaded(), query, None, 100)
    assert_same_ranking(a, b, context=repr(query))
    if query.strip():
        memory.search(query, None, SearchParams(mode="bm25"))


def test_filters_apply_before_ranking_in_memory_too(cfg, indexes):
    fts, memory = indexes
    data = memory.loaded()
    docs = data.documents
    cases = [
        dict(collections=("docs",)),
        dict(collections=("posts", "learn")),
        dict(tags=("tokens",)),
        dict(filters=(("status", "draft"),)),
        dict(slug_prefix="posts/"),
        dict(filters=(("status", "nope"),)),
    ]
    for case in cases:
        params = SearchParams(**case)
        mask_f = fts._filter_mask(fts.loaded(), params)
        mask_m = memory._filter_mask(data, params)
        assert np.array_equal(mask_f, mask_m)
        expected_docs = {
            d
            for d, doc in docs.items()
            if (not params.collections or doc["collection"] in params.collections)
            and all(t in doc["tags"] for t in params.tags)
            and (
                not params.slug_prefix or d.startswith(params.slug_prefix) or doc["slug"].startswith(params.slug_prefix)
            )
            and all(str(doc["frontmatter"].get(k, "")).lower() == v for k, v in params.filters)
        }
        assert {data.document_ids[r] for r in np.flatnonzero(mask_m)} == {
            d for d in data.document_ids if d in expected_docs
        }, case
        for query in ("vlan trunk", "run running proxmox", "snapshots handshake vlan", "k3s_cert"):
            a = fts._bm25_ranks(fts.loaded(), query, mask_f, 10)
            b = memory._bm25_ranks(data, query, mask_m, 10)
            assert_same_ranking(a, b, context=f"{case} {query}")
            assert all(mask_m[r] for r in b)
    assert fts._filter_mask(data, SearchParams()) is None


# ------------------------------------------------------------------------------ cache, reloads, auto


def test_the_cache_is_reused_and_keeps_the_stores_permissions(cfg, indexes):
    _, memory = indexes
    cache = cfg.public_store_path.with_name(cfg.public_store_path.name + ".bm25.npz")
    assert cache.is_file()
    assert stat.S_IMODE(cache.stat().st_mode) == stat.S_IMODE(cfg.public_store_path.stat().st_mode)
    again = SearchIndex(cfg.public_store_path, log_searches=False, lexical="memory").loaded().bm25
    assert "loaded from cache" in again.timing
    first = memory.loaded().bm25
    assert again.terms == first.terms and np.array_equal(again.weights, first.weights)
    assert np.array_equal(again.rows, first.rows) and np.array_equal(again.indptr, first.indptr)
    other_key = dict(again.key, content_rows=again.key["content_rows"] + 1)
    assert MemoryBm25.load(cache, other_key) is None  # made for another store: not used


@pytest.fixture(scope="module")
def tree_build(tmp_path_factory):
    """TREE built once through the real pipeline; the tests that load, damage, rebuild or
    cache-index it each get a copy (tree_cfg)."""
    return build_files_once(tmp_path_factory, "bm25-tree", TREE)


@pytest.fixture
def tree_cfg(tree_build, tmp_path, make_config):
    """A fresh copy of tree_build's content and store, as the test's own (make_config's) folders."""
    return copy_built(tree_build, tmp_path, make_config)


def test_a_damaged_cache_is_rebuilt(tree_cfg):
    cfg = tree_cfg
    cache = cfg.public_store_path.with_name(cfg.public_store_path.name + ".bm25.npz")
    cache.write_bytes(b"not an npz")
    bm25 = SearchIndex(cfg.public_store_path, log_searches=False, lexical="memory").loaded().bm25
    assert bm25 is not None and "loaded from cache" not in bm25.timing
    assert MemoryBm25.load(cache, bm25.key) is not None  # rewritten


def test_reload_after_a_rebuild(tree_cfg):
    cfg = tree_cfg
    index = SearchIndex(cfg.public_store_path, log_searches=False, lexical="memory")
    fts = SearchIndex(cfg.public_store_path, log_searches=False)
    embedder = HashingEmbedder(384)
    before = index.loaded()
    assert before.bm25 is not None
    assert not index.search("quokka", embedder, SearchParams(mode="bm25")).hits
    (cfg.content_dir / "posts" / "quokka.md").write_text(
        "# Quokka\n\nThe quokka lives on Rottnest island; quokkas smile.\n"
    )
    _build(cfg)
    hits = index.search("quokka island", embedder, SearchParams())
    after = index.loaded()
    assert after is not before and after.bm25 is not None and after.bm25.key != before.bm25.key
    assert "loaded from cache" not in after.bm25.timing  # the old cache was for the old store
    assert hits.hits[0].slug == "quokka" and hits.hits[0].bm25_score is not None
    for query in ("quokka island", "vlan proxmox", "snapshots"):
        assert_same_ranking(fts._bm25_ranks(fts.loaded(), query, None, 100), index._bm25_ranks(after, query, None, 100))
    with closing(sqlite3.connect(cfg.public_store_path)) as conn:
        assert after.bm25.key["content_rows"] == conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def test_auto_uses_fts5_until_the_postings_are_ready(tree_cfg, monkeypatch):
    cfg = tree_cfg
    release = threading.Event()
    real = MemoryBm25.load_or_build.__func__

    def slow(cls, *args, **kwargs):
        assert release.wait(30)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(MemoryBm25, "load_or_build", classmethod(slow))
    index = SearchIndex(cfg.public_store_path, log_searches=False, lexical="auto")
    fts = SearchIndex(cfg.public_store_path, log_searches=False)
    data = index.loaded()  # returns at once: the postings are built in the background
    assert data.bm25 is None and not data.bm25_done.is_set()
    waiting = index._bm25_ranks(data, "vlan snapshots", None, 100)
    assert waiting and waiting == fts._bm25_ranks(fts.loaded(), "vlan snapshots", None, 100)
    release.set()
    assert data.bm25_done.wait(30) and data.bm25 is not None
    assert_same_ranking(waiting, index._bm25_ranks(data, "vlan snapshots", None, 100))


def test_a_failed_build_leaves_fts5_in_charge(tree_cfg, monkeypatch, caplog):
    cfg = tree_cfg

    def broken(*args, **kwargs):
        raise sqlite3.OperationalError("no such module: fts5vocab")

    monkeypatch.setattr(MemoryBm25, "build", broken)
    for lexical in ("memory", "auto"):
        index = SearchIndex(cfg.public_store_path, log_searches=False, lexical=lexical)
        data = index.loaded()
        assert data.bm25_done.wait(30) and data.bm25 is None
        assert index.search("vlan", None, SearchParams(mode="bm25")).hits
    assert "using FTS5" in caplog.text
    with pytest.raises(ValueError, match="lexical"):
        SearchIndex(cfg.public_store_path, lexical="lucene")


def test_a_store_changed_since_the_load_is_not_indexed(tree_cfg):
    cfg = tree_cfg
    index = SearchIndex(cfg.public_store_path, log_searches=False)
    data = replace(index.loaded(), stamp=("another build",), bm25=None)
    index._build_bm25(data, None, index._generation)
    assert data.bm25 is None  # its rows might not be the loaded ones: FTS5 stays


def test_tokenizer_cache_survives_being_cleared(monkeypatch):
    tokenizer = bm25_terms._Tokenizer()
    monkeypatch.setattr(bm25_terms._Tokenizer, "MAX_CACHED", 3)
    assert tokenizer.terms(["running", "cafés"]) == [("run",), ("cafe",)]
    assert tokenizer.terms(["running", "k3s_cert", "x²", "_"]) == [("run",), ("k3", "cert"), ("x²",), ()]


# ------------------------------------------------------------------------------ exact statistics

# Words with shared porter stems, a diacritic that unicode61 folds, numbers, a CJK run.
_WORDS = (
    "vlan vlans trunk bridge proxmox zfs snapshot snapshots snapshotting backup backups restore run runs running "
    "runner connect connected connection connections café cafe wireguard peer peers key keys docker compose "
    "network networking k3s cluster node nodes 10gbe x² 東京 the and of to"
).split()


def _generated_store(path, seed: int = 3):
    """A store written through the real schema and triggers, with words in every field (text,
    document titles and tags, heading paths), then changed the ways that move FTS5's
    statistics: rows deleted, rows updated (longer and shorter), documents retitled and
    retagged, a row with no token, rows without an embedding, and an orphan FTS row whose
    chunk is gone (a damaged store)."""
    from rag_assets.index import store

    rng = np.random.default_rng(seed)
    probs = 1.0 / np.arange(1, len(_WORDS) + 1)  # Zipf-like: a few words in most rows
    probs /= probs.sum()

    def text(n_words: int) -> str:
        return " ".join(rng.choice(_WORDS, size=n_words, p=probs))

    def words(low: int, high: int) -> list[str]:
        return [str(w) for w in rng.choice(_WORDS, size=int(rng.integers(low, high)))]

    conn = store.connect(path)
    store.ensure_schema(conn)
    with conn:
        conn.execute("BEGIN")
        for d in range(12):  # d0 has no title, tags or headings: the text alone
            title, tags = (None, None) if d == 0 else (text(int(rng.integers(1, 6))), json.dumps(words(0, 4)))
            conn.execute(
                "INSERT INTO documents(id, collection, slug, title, tags) VALUES (?, 'docs', ?, ?, ?)",
                (f"d{d}", f"d{d}", title, tags),
            )
        for i in range(300):
            embedding = None if i % 17 == 0 else np.ones(4, dtype=np.float32).tobytes()
            headings = (
                None if i % 25 == 0 else json.dumps([" ".join(words(1, 4)) for _ in range(int(rng.integers(0, 4)))])
            )
            conn.execute(
                "INSERT INTO chunks(id, document_id, chunk_index, text, heading_path, embedding) VALUES (?, ?, ?, ?, ?, ?)",
                (f"c{i}", f"d{i % 12}", i, text(int(rng.integers(3, 120))), headings, embedding),
            )
        conn.execute(
            "INSERT INTO chunks(id, document_id, chunk_index, text, embedding) VALUES ('empty', 'd0', 300, '— … !!', ?)",
            (np.ones(4, dtype=np.float32).tobytes(),),
        )
    with conn:  # a later build: deletions and updates, so N, the total and some D change
        conn.execute("BEGIN")
        conn.execute("DELETE FROM chunks WHERE chunk_index % 7 = 3")
        for i in range(0, 300, 11):
            conn.execute("UPDATE chunks SET text = ? WHERE id = ?", (text(int(rng.integers(1, 200))), f"c{i}"))
        conn.execute("UPDATE documents SET title = ? WHERE id = 'd3'", (text(8),))
        conn.execute("UPDATE documents SET tags = ? WHERE id = 'd4'", (json.dumps(words(3, 6)),))
        conn.execute("UPDATE documents SET title = 'Quokka ' || title WHERE id = 'd5'")  # a word of no other field
        conn.execute(
            "INSERT INTO fts_chunks(rowid, text, title) VALUES (100000, 'vlan trunk orphan row', 'orphan vlan')"
        )
    return conn


def _score_mismatches(
    bm25: MemoryBm25,
    conn,
    queries: list[str],
    rel: float,
    ranking: bool = True,
    fields: FieldWeights = FieldWeights(),
    first: bool = False,
) -> list[str]:
    """Every row where the postings' score and FTS5's own bm25() (with ``fields``' weights)
    differ by more than ``rel``, and (``ranking``) every query whose order of rows (ties
    broken by rowid) differs; with ``first``, those of the first query that has any (the tests
    that a wrong index is caught need one, not the full list)."""
    loaded = set(bm25.rowids.tolist())
    problems = []
    for query in queries:
        if first and problems:
            break
        match = fts_match_query(query)
        if match is None:  # CJK only: fts_cjk's business, not these postings'
            if bm25.scores(query) is not None:
                problems.append(f"{query!r}: scored without a word FTS5 would search")
            continue
        expected = [
            (rowid, score)
            for rowid, score in conn.execute(
                f"SELECT rowid, -{bm25_call()} AS score FROM fts_chunks WHERE fts_chunks MATCH ? ORDER BY score DESC, rowid",
                (*fields.as_tuple(), match),
            )
            if rowid in loaded
        ]
        scores = bm25.scores(query)
        got = {int(bm25.rowids[r]): float(scores[r]) for r in np.flatnonzero(scores)} if scores is not None else {}
        if got.keys() != {r for r, _ in expected}:
            problems.append(f"{query!r}: other rows match")
            continue
        problems += [f"{query!r} row {r}: {got[r]!r} != {s!r}" for r, s in expected if abs(got[r] - s) > rel * abs(s)]
        if not ranking:
            continue
        ranks = bm25.ranks(query, len(got))
        ranked = [int(bm25.rowids[row]) for row, _ in sorted(ranks.items(), key=lambda kv: kv[1][0])]
        # FTS5's order: its scores never rise down the list (rows that tie to within ``rel``,
        # whose sums may round apart by an ulp, may come in either order).
        along = [dict(expected)[r] for r in ranked]
        if any(b > a + rel * abs(a) for a, b in zip(along, along[1:])):
            problems.append(f"{query!r}: another ranking")
    return problems


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    conn = _generated_store(tmp_path_factory.mktemp("bm25-generated") / "store.db")
    rowids = np.array(
        [r for (r,) in conn.execute("SELECT rowid FROM chunks WHERE embedding IS NOT NULL ORDER BY rowid")]
    )
    rng = np.random.default_rng(8)
    queries = [" ".join(rng.choice(_WORDS, size=int(rng.integers(1, 5)))) for _ in range(150)]
    queries += ["running runs", "café CAFE", "snapshotting snapshot", "vlan vlan", "東京 vlan", "10gbe x²", "the"]
    # Long queries, whose repeated words FTS5 scores once per repeat (up to MAX_REPEATS).
    queries += [" ".join(rng.choice(_WORDS[:12], size=int(rng.integers(20, 40)))) for _ in range(10)]
    yield conn, rowids, queries
    conn.close()


def test_postings_score_exactly_as_fts5_after_deletions_and_updates(generated):
    """Every matching row of every query to 1e-9 (float64 weights; the float32 ones that are
    kept by default to ~1e-7), and the same ranking, with the statistics read publicly."""
    conn, rowids, queries = generated
    exact = MemoryBm25.build(conn, rowids, dtype=np.float64)
    assert 250 < exact.statistics.rows < 300 and exact.statistics.tokens > 10_000
    assert exact.statistics.rows == conn.execute("SELECT count(*) FROM chunks").fetchone()[0] + 1  # + the orphan
    assert _score_mismatches(exact, conn, queries, rel=1e-9) == []
    # float32 weights: the same scores to 1e-6; rows within that of each other may swap.
    assert _score_mismatches(MemoryBm25.build(conn, rowids), conn, queries, rel=1e-6, ranking=False) == []


@pytest.mark.parametrize(
    "fields", [FieldWeights.unweighted(), FieldWeights(1.0, 3.7, 0.4, 2.2), FieldWeights(0.5, 1.0, 7.0, 0.1)], ids=str
)
def test_field_weights_score_exactly_as_fts5s_column_weights(generated, fields):
    """Any field weights: the postings' column-weighted tf gives bm25(fts_chunks, w...)'s
    numbers (to 1e-9), and the weights change the scores (they are not ignored by both)."""
    conn, rowids, queries = generated
    weighted = MemoryBm25.build(conn, rowids, dtype=np.float64, fields=fields)
    assert weighted.column_weights == fields.as_tuple()
    assert _score_mismatches(weighted, conn, queries, rel=1e-9, fields=fields) == []
    other = MemoryBm25.build(conn, rowids, dtype=np.float64, fields=FieldWeights(1.0, 2.0, 3.0, 4.0))
    changed = [
        q for q in queries[:40] if other.scores(q) is not None and not np.allclose(other.scores(q), weighted.scores(q))
    ]
    assert len(changed) > 20
    # A word in one document's title alone: its chunks match, by the title's weight.
    assert _score_mismatches(weighted, conn, ["quokka", "quokka vlan"], rel=1e-9, fields=fields) == []
    assert len(np.flatnonzero(weighted.scores("quokka"))) == len(
        conn.execute("SELECT 1 FROM chunks WHERE document_id = 'd5' AND embedding IS NOT NULL").fetchall()
    )


def test_postings_with_other_weights_than_fts5s_are_caught(generated):
    """The comparison is sharp enough to notice the postings made with other field weights."""
    conn, rowids, queries = generated
    wrong = MemoryBm25.build(conn, rowids, dtype=np.float64, fields=FieldWeights(1.0, 2.0, 2.0, 2.5))
    assert _score_mismatches(wrong, conn, queries, rel=1e-9, fields=FieldWeights(1.0, 2.0, 2.0, 2.0), first=True)


@pytest.mark.parametrize("wrong", [(0, 1), (0, -1), (1, 0), (-1, 0)], ids=["tokens+1", "tokens-1", "rows+1", "rows-1"])
def test_a_statistic_off_by_one_is_caught(generated, monkeypatch, wrong):
    """The comparison above is sharp enough to notice N or the total token count off by one."""
    conn, rowids, queries = generated
    right = bm25_scan._statistics

    def off_by_one(doc_len):
        stats = right(doc_len)
        return bm25_scan.Bm25Statistics(stats.rows + wrong[0], stats.tokens + wrong[1])

    monkeypatch.setattr(bm25_scan, "_statistics", off_by_one)
    assert _score_mismatches(MemoryBm25.build(conn, rowids, dtype=np.float64), conn, queries, rel=1e-9, first=True)
    assert _score_mismatches(MemoryBm25.build(conn, rowids), conn, queries, rel=1e-6, ranking=False, first=True)


# ------------------------------------------------------------------------------ fields and repeats


def _fielded_store(path):
    """Three one-chunk pages: 'quokka' in a title, in a heading path, in body text (each once)."""
    from rag_assets.index import store
    from rag_assets.records import Chunk, Document, EmbeddedCollection

    pages = [  # (slug, title, heading path, text): texts of equal length
        ("titled", "Quokka habitats", ["Islands"], "small animals live on the island near the coast"),
        ("headed", "Island fauna", ["Quokka"], "small animals live on the island near the coast"),
        ("plain", "Island fauna", ["Islands"], "a quokka lives on the island near the coast"),
    ]
    docs = [
        Document("posts", slug, f"posts/{slug}.md", title, "", [], {}, "", "2026-01-01", slug)
        for slug, title, _, _ in pages
    ]
    chunks = [
        Chunk(f"posts/{slug}/chunk-0", text, "posts", slug, title, 0, 1, headings, len(text.split()), [])
        for slug, title, headings, text in pages
    ]
    collection = EmbeddedCollection("posts", "h", docs, chunks, np.eye(3, 8, dtype=np.float32), "m", 8)
    store.replace_contents(path, [collection], model="m", dimension=8, built_at="t")


@pytest.mark.parametrize("lexical", ["fts5", "memory"])
def test_field_weights_decide_where_a_match_counts_most(tmp_path, lexical):
    path = tmp_path / "s.db"
    _fielded_store(path)

    def order(fields: FieldWeights) -> list[str]:
        index = SearchIndex(path, log_searches=False, lexical=lexical, fields=fields)
        try:
            # By BM25 score: hits are ranked by relevance, whose title feature also favours "titled".
            hits = index.search("quokka", None, SearchParams(mode="bm25", min_score=0)).hits
            return [h.slug for h in sorted(hits, key=lambda h: -h.bm25_score)]
        finally:
            index.close()

    assert order(FieldWeights())[-1] == "plain"  # a title or heading match beats the body's
    assert order(FieldWeights(1.0, 3.0, 2.0, 1.0)) == ["titled", "headed", "plain"]
    assert order(FieldWeights(1.0, 0.5, 0.7, 1.0)) == ["plain", "headed", "titled"]


def test_field_weights_are_positive_numbers_per_column():
    assert FieldWeights(1.0, 2.0, 3.0, 4.0).as_tuple() == (1.0, 2.0, 3.0, 4.0)
    assert FieldWeights().for_columns(("tags", "text")) == (FieldWeights().tags, 1.0)
    for bad in (0.0, -1.0, float("nan"), float("inf"), "2"):
        with pytest.raises(ValueError, match="title weight"):
            FieldWeights(title=bad)
    with pytest.raises(ValueError, match="summary"):
        FieldWeights().for_columns(("text", "summary"))
    assert bm25_call("t", 2) == "bm25(t, ?, ?)"


def test_a_long_query_counts_its_repeated_words(monkeypatch):
    from rag_assets.index import query as query_module

    monkeypatch.setattr(query_module, "MAX_REPEATS", 3)
    monkeypatch.setattr(query_module, "LONG_QUERY_WORDS", 20)
    assert fts_match_query("vlan vlan VLAN trunk vlan") == '"vlan" OR "trunk"'  # short: each word once
    filler = " ".join(f"word{i}" for i in range(16))
    long = f"vlan trunk the vlan {filler} vlan of vlan vlan"  # 20 words once stop words are dropped
    match = fts_match_query(long)
    assert match.split(" OR ").count('"vlan"') == 3 and match.split(" OR ").count('"trunk"') == 1
    assert query_words(long).count("vlan") == 3
    assert fts_match_query(f"vlan trunk vlan {filler[: filler.rindex(' ')]}").count('"vlan"') == 1  # 19 words


def test_repeats_weigh_a_term_in_both_paths(generated, monkeypatch):
    """A long query's repeated word is scored once per repeat by FTS5 and by the postings, so
    the scores differ from the same query with the word once, and agree with each other."""
    from rag_assets.index import query as query_module

    monkeypatch.setattr(query_module, "MAX_REPEATS", 3)
    monkeypatch.setattr(query_module, "LONG_QUERY_WORDS", 20)
    conn, rowids, _ = generated
    bm25 = MemoryBm25.build(conn, rowids, dtype=np.float64)
    rest = "trunk bridge proxmox zfs snapshot backup restore wireguard peer key docker compose network k3s cluster node 10gbe"
    repeated, once = f"vlan {rest} vlan vlan", f"vlan {rest} cafe connect"
    assert _score_mismatches(bm25, conn, [repeated, once], rel=1e-9) == []
    vlan = bm25.scores("vlan")
    assert np.allclose(bm25.scores(repeated) - bm25.scores(f"vlan {rest}"), 2 * vlan)
