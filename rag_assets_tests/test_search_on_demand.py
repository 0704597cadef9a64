"""A one-shot search (documents read on demand, as ``rag search`` opens a store) gives the same
hits, order and scores, to the last bit, as an index that read every document at load (as
``rag serve`` keeps it): on the sample (its site and both vault tiers, whose notes have links)
and on a generated tree, over several queries and every kind of parameter that reads a
document (filters, weights, the link signal, diversity, pages and chunks). It reads only the
documents it ranks."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from dataclasses import asdict, replace

import numpy as np
import pytest

from rag_assets.defs.runner import run_build
from rag_assets.index import vector_blocks
from rag_assets.index.params import SearchParams
from rag_assets.search.retrieval import SearchIndex, tier_embedder
from rag_assets.serve.cli import main as rag

from .conftest import build_files_once, copy_built, instance_for_test
from .test_tiers import sample_config

SAMPLE_QUERIES = {
    "public": ["how do I set up vlans on proxmox", "restic offsite backup prune", "nix flake", "zigbee"],
    "safe": ["k3s open webui", "proxmox node maintenance", "restic offsite backups", "gitea runner"],
    "private": ["budget", "doctor appointment", "password manager", "family"],
}
PARAMS = [
    SearchParams(),
    SearchParams(k=5, view="chunks", min_score=0.0),
    SearchParams(mode="bm25", k=5, min_score=0.0),
    SearchParams(mode="vector", k=5, min_score=0.0),
    SearchParams(k=5, min_score=0.0, link_boost=2.0),
    SearchParams(k=5, min_score=0.0, mmr_lambda=0.5, max_per_document=1),
    SearchParams(k=5, min_score=0.0, collection_weights=False, fusion="rrf"),
]


def outcome(index: SearchIndex, embedder, query: str, params: SearchParams) -> tuple:
    """Everything a search returns that a caller sees, with unrounded floats (not its latency)."""
    result = index.search(query, None if params.mode == "bm25" else embedder, params)
    return [asdict(hit) for hit in result.hits], result.best_relevance, result.dropped


def assert_same(path, weights, embedder, queries: list[str], params_list: list[SearchParams]) -> None:
    """Every (query, params) gives identical outcomes through both ways of reading documents."""
    loaded = SearchIndex(path, weights, log_searches=False)
    on_demand = SearchIndex(path, weights, log_searches=False, documents="on_demand")
    with_hits = 0
    for query in queries:
        for params in params_list:
            # a new on-demand index each time: a cold process's, with nothing read before
            cold = SearchIndex(path, weights, log_searches=False, documents="on_demand")
            expected = outcome(loaded, embedder, query, params)
            with_hits += bool(expected[0])
            assert outcome(cold, embedder, query, params) == expected, (query, params)
            assert outcome(on_demand, embedder, query, params) == expected, (query, params)  # one index, reused
    assert with_hits >= len(queries) * len(params_list) * 3 // 4  # the comparisons are of real hits


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample with its two vaults, built once for the module (the tests only read it)."""
    cfg = sample_config(tmp_path_factory.mktemp("on-demand-sample"))
    with instance_for_test() as instance:
        built = run_build(cfg, instance)
    assert built.success, built.error or built.failed_checks
    return cfg


@pytest.mark.parametrize("tier", ["public", "safe", "private"])
def test_the_sample_searches_the_same_with_documents_on_demand(sample, tier):
    path = sample.store_path(tier)
    embedder = tier_embedder(sample, tier, SearchIndex(path, log_searches=False))
    queries = SAMPLE_QUERIES[tier]
    collections = sorted({d["collection"] for d in SearchIndex(path).loaded().documents.values()})
    filtered = [
        SearchParams(k=5, min_score=0.0, collections=(collections[0],)),
        SearchParams(k=5, min_score=0.0, slug_prefix="s"),
    ]
    assert_same(path, sample.collection_weights, embedder, queries, PARAMS + filtered)


# ---------------------------------------------------------------------------- a generated tree

WORDS = (
    "proxmox vlan bridge zfs snapshot restic backup prune nix flake k3s ingress grafana alert "
    "postgres upgrade wireguard peer tailscale dns resolver caddy certificate renewal ups battery "
    "nvme wear smart disk pool dataset replication cron timer systemd unit journal log rotate"
).split()
TAGS = ("network", "storage", "backup", "cluster", "monitoring")
STATUSES = ("active", "archived", "draft")


def generated_tree(documents: int = 120, seed: int = 27) -> dict[str, str]:
    """``documents`` pages over three collections, with tags, a ``status`` field and a few
    paragraphs of words drawn from WORDS, the same for a seed."""
    rng = random.Random(seed)
    files = {}
    for i in range(documents):
        tags = sorted(rng.sample(TAGS, rng.randint(1, 3)))
        paragraphs = "\n\n".join(
            f"## Part {p}\n\n" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 90))) for p in range(3)
        )
        files[f"col{i % 3}/topic-{i:03d}.md"] = (
            f"---\ntitle: Note {i} on {rng.choice(WORDS)} and {rng.choice(WORDS)}\n"
            f"tags: [{', '.join(tags)}]\nstatus: {rng.choice(STATUSES)}\n---\n# Note {i}\n\n{paragraphs}\n"
        )
    return files


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return build_files_once(tmp_path_factory, "on-demand-tree", generated_tree())


def test_a_generated_tree_searches_the_same_with_documents_on_demand(tree, tmp_path, make_config):
    cfg = copy_built(tree, tmp_path, make_config)
    path = cfg.public_store_path
    embedder = tier_embedder(cfg, "public", SearchIndex(path, log_searches=False))
    filtered = [
        SearchParams(k=5, min_score=0.0, tags=("storage",)),
        SearchParams(k=5, min_score=0.0, tags=("network", "backup"), filters=(("status", "active"),)),
        SearchParams(k=5, min_score=0.0, slug_prefix="topic-0", collections=("col1", "col2")),
        SearchParams(k=5, min_score=0.0, filters=(("status", "draft"),), view="chunks"),
    ]
    queries = ["zfs snapshot replication", "wireguard peer dns", "grafana alert on ups battery", "nvme"]
    assert_same(path, cfg.collection_weights, embedder, queries, PARAMS + filtered)


def test_a_search_on_demand_reads_only_the_documents_it_ranks(tree, tmp_path, make_config, monkeypatch):
    monkeypatch.setattr(vector_blocks, "RANGE_BATCH", 7)  # rows not in a block read in many batches, the last one short
    cfg = copy_built(tree, tmp_path, make_config)
    index = SearchIndex(cfg.public_store_path, log_searches=False, documents="on_demand")
    embedder = tier_embedder(cfg, "public", index)
    params = SearchParams(k=3, candidates=10, min_score=0.0)
    hits = index.search("zfs snapshot replication", embedder, params).hits
    documents = index.loaded().documents
    assert len(documents) == 120 and hits
    with closing(sqlite3.connect(cfg.public_store_path)) as conn:  # the vectors, decoded row by row
        blobs = conn.execute("SELECT embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY rowid").fetchall()
    assert np.array_equal(index.loaded().matrix, np.array([np.frombuffer(b, dtype=np.float32) for (b,) in blobs]))
    # the candidates' documents (at most 10 from each list), not the store's 120
    assert {h.document_id for h in hits} <= set(documents) and 0 < documents.held <= 20
    everything = SearchIndex(cfg.public_store_path, log_searches=False)
    assert everything.loaded().documents.held == 120  # the loaded path reads them all at load
    # a filter on tags reads every record once, in one query, and gives the loaded path's hits
    tagged = replace(params, tags=("storage",))
    assert outcome(index, embedder, "zfs", tagged) == outcome(everything, embedder, "zfs", tagged)
    assert documents.held == 120


def test_rag_search_reads_documents_on_demand(tree, tmp_path, make_config, capsys, monkeypatch):
    """The one-shot commands open their index with documents on demand."""
    cfg = copy_built(tree, tmp_path, make_config)
    config = tmp_path / "rag.yaml"
    config.write_text(f"content_dir: {cfg.content_dir}\noutput_dir: {cfg.output_dir}\nembedder: hashing\nvaults: []\n")
    opened = []
    real = SearchIndex.__init__

    def spy(self, *args, **kwargs):
        opened.append(kwargs.get("documents", "all"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(SearchIndex, "__init__", spy)
    for command in ("search", "context"):
        assert rag([command, "zfs snapshot", "--json", "--config", str(config)]) == 0
    capsys.readouterr()
    assert opened == ["on_demand", "on_demand"]


def test_a_store_without_its_vector_blocks_searches_the_same(tree, tmp_path, make_config):
    """Ranges of the vectors not in a block (lost to a write that did not refresh them) and a
    store written before blocks existed are read from the chunks: the same hits and scores."""
    cfg = copy_built(tree, tmp_path, make_config)
    path = cfg.public_store_path
    embedder = tier_embedder(cfg, "public", SearchIndex(path, log_searches=False))
    queries = ["zfs snapshot replication", "wireguard peer dns"]
    params_list = [*PARAMS, SearchParams(k=5, min_score=0.0, tags=("storage",))]

    def outcomes() -> list:
        cold = [SearchIndex(path, cfg.collection_weights, log_searches=False, documents="on_demand") for _ in queries]
        return [outcome(index, embedder, q, p) for index, q in zip(cold, queries) for p in params_list]

    with closing(sqlite3.connect(path)) as conn:
        in_blocks = conn.execute("SELECT sum(rows) FROM vector_blocks").fetchone()[0]
        assert in_blocks == conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 120  # every vector
    with_blocks = outcomes()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM vector_blocks")
    assert outcomes() == with_blocks
    with closing(sqlite3.connect(path)) as conn:  # the previous version's schema
        for trigger in ("chunks_ai_blocks", "chunks_ad_blocks", "chunks_au_blocks"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE vector_blocks")
    assert outcomes() == with_blocks
    assert_same(path, cfg.collection_weights, embedder, queries, params_list)  # and the loaded path's
