"""Hybrid search on real stores built by the real pipeline (hashing embedder, real SQLite)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rag_assets.config import RagConfig, load_config
from rag_assets.defs.runner import run_build
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.index.params import SearchError, SearchParams
from rag_assets.index.query import fts_match_query
from rag_assets.index.tier_logs import log_path
from rag_assets.search.fusion import fuse
from rag_assets.search.retrieval import SearchIndex, tier_embedder
from rag_assets.serve.cli import main as rag

from .conftest import PROXMOX_POST, SAMPLE_CONTENT, instance_for_test, isolate

NASTY = [
    '"',
    '""',
    "'",
    "-",
    "--force",
    ":",
    "a:b",
    "*",
    "prox*",
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "NEAR(a b)",
    "a AND OR b",
    "(",
    ")",
    "((vlan",
    "vlan))",
    "^",
    "{col}: x",
    "col : x",
    "+-*/",
    "\\",
    "%",
    "_",
    "😀",
    "\x00",
    " ",
    "a" * 5000,
    "proxmox -vlan",
    'bridge "vlan-aware',
    "vlan OR",
    "NEAR/3",
    "[x]",
    "'; DROP TABLE chunks; --",
]


def build(tmp_path, make_config, files):
    root = tmp_path / "content"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    cfg = make_config(root)
    with instance_for_test() as instance:
        assert run_build(cfg, instance).success
    return cfg


TREE = {
    "posts/proxmox.md": PROXMOX_POST,
    "posts/zfs.md": "---\ntitle: ZFS snapshots\ntags: [zfs, storage]\nstatus: active\n---\n# ZFS snapshots\n\n"
    "Take hourly snapshots of every dataset with sanoid and prune them after two weeks.\n",
    "docs/wireguard.md": "---\ntitle: WireGuard\ntags: [vpn]\nstatus: archived\n---\n# WireGuard\n\n"
    "Peers exchange public keys; the handshake fails when the clocks drift.\n",
    "docs/cjk.md": "---\ntitle: 东京旅行\n---\n# 东京旅行\n\n我们在东京塔附近住了三天，每天坐地铁去浅草寺。\n",
}


def tree_config(content_dir: Path, output_dir: Path) -> RagConfig:
    """What ``make_config`` makes, for a module-scoped fixture (which cannot use it)."""
    return load_config(
        None, content_dir=content_dir, output_dir=output_dir, embedder="hashing", private_embedder="hashing", environ={}
    )


@pytest.fixture(scope="module")
def built_tree(tmp_path_factory) -> RagConfig:
    """TREE built once for the module (a Dagster build per test was most of this file's time)."""
    tmp = tmp_path_factory.mktemp("search")
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, tmp)  # as each test would have built it: no sample vaults under the working folder
        return build(tmp, lambda root: tree_config(root, tmp / "out"), TREE)


@pytest.fixture
def cfg(built_tree: RagConfig, tmp_path: Path) -> RagConfig:
    """A copy of the built TREE for each test: searches write the store's search log, and
    test_cli_search_context_and_log reads that log back, so no test sees another's searches."""
    shutil.copytree(built_tree.content_dir, tmp_path / "content")
    shutil.copytree(built_tree.output_dir, tmp_path / "out", symlinks=True)  # the published links are relative
    return tree_config(tmp_path / "content", tmp_path / "out")


def test_the_right_section_ranks_first_with_path_heading_and_scores(cfg):
    index = SearchIndex(cfg.public_store_path, cfg.collection_weights)
    # Four pages: too few for relevance (test_relevance.py); this checks the ranking, no floor.
    result = index.search(
        "how do I set up vlans on proxmox", tier_embedder(cfg, "public", index), SearchParams(k=3, min_score=0)
    )
    top = result.hits[0]
    assert (top.collection, top.slug) == ("posts", "proxmox")
    assert top.heading_path[-1] == "Network configuration" or "vlan" in top.text.lower()
    assert top.vector_score is not None and top.bm25_score is not None
    assert result.latency_ms > 0  # reported; how fast is bench/search.py's business, not a test's


@pytest.mark.parametrize("query", NASTY)
def test_user_text_never_breaks_bm25(cfg, query):
    index = SearchIndex(cfg.public_store_path)
    embedder = tier_embedder(cfg, "public", index)
    try:
        index.search(query, embedder, SearchParams(mode="bm25"))
        index.search(query, embedder, SearchParams())
    except SearchError as exc:
        assert "empty" in str(exc)  # only a blank query is refused, with a message
    match = fts_match_query(query)
    if match:
        with closing(sqlite3.connect(cfg.public_store_path)) as conn:
            conn.execute("SELECT COUNT(*) FROM fts_chunks WHERE fts_chunks MATCH ?", (match,)).fetchone()


def test_cjk_words_inside_a_run_are_found(cfg):
    index = SearchIndex(cfg.public_store_path)
    for word in ("东京", "浅草寺", "地铁"):
        hits = index.search(word, None, SearchParams(mode="bm25", min_score=0)).hits
        assert hits and hits[0].slug == "cjk", word
    assert not index.search("大阪", None, SearchParams(mode="bm25", min_score=0)).hits


def test_filters_apply_before_ranking(cfg):
    index = SearchIndex(cfg.public_store_path)
    embedder = tier_embedder(cfg, "public", index)

    def slugs(**params):
        return {
            h.slug for h in index.search("snapshots handshake vlan", embedder, SearchParams(min_score=0, **params)).hits
        }

    assert slugs(collections=("docs",)) <= {"wireguard", "cjk"}
    assert slugs(tags=("zfs",)) == {"zfs"}
    assert slugs(filters=(("status", "archived"),)) == {"wireguard"}
    assert slugs(filters=(("tags", "vpn"),)) == {"wireguard"}
    assert slugs(slug_prefix="posts/prox") == {"proxmox"}
    assert slugs(filters=(("status", "nope"),)) == set()


def test_rrf_is_normalised_so_first_in_both_lists_is_one():
    params = SearchParams(fusion="rrf", vector_weight=0.7, bm25_weight=0.3, rrf_k=60)
    scores = fuse({1: (1, 0.9), 2: (2, 0.5)}, {1: (1, 12.0), 3: (2, 3.0)}, params, "hybrid")
    assert scores[1] == pytest.approx(1.0)
    assert scores[2] == pytest.approx((0.7 / 62) / (1.0 / 61))
    assert scores[3] == pytest.approx((0.3 / 62) / (1.0 / 61))
    convex = fuse({1: (1, 0.9), 2: (2, 0.5)}, {1: (1, 12.0), 3: (2, 3.0)}, SearchParams(fusion="convex"), "hybrid")
    assert convex[1] == pytest.approx(1.0) and convex[2] == pytest.approx(0.0) and convex[3] == pytest.approx(0.0)


def test_collection_weight_then_min_score(cfg):
    """The weight multiplies the odds of relevance (the figure ranked by and shown), and
    min_score filters on the weighted figure."""
    plain_index = SearchIndex(cfg.public_store_path)
    index = SearchIndex(cfg.public_store_path, {"docs": 2.0})
    embedder = tier_embedder(cfg, "public", index)
    plain = plain_index.search("handshake", embedder, SearchParams(min_score=0)).hits[0]
    weighted = index.search("handshake", embedder, SearchParams(min_score=0))
    top = weighted.hits[0]
    assert top.slug == "wireguard" and top.collection == "docs"
    odds = plain.relevance / (1 - plain.relevance)
    assert top.relevance == pytest.approx(2 * odds / (1 + 2 * odds)) and top.relevance > plain.relevance
    assert top.score == pytest.approx(plain.score), "the fused score is a signal, not weighted"
    floor = (top.relevance + plain.relevance) / 2
    assert [h.slug for h in index.search("handshake", embedder, SearchParams(min_score=floor)).hits] == ["wireguard"]
    assert plain_index.search("handshake", embedder, SearchParams(min_score=floor)).hits == []


def test_diversity_caps_chunks_per_document_and_mmr_reorders(tmp_path, make_config):
    long_post = "# Long\n\n" + "\n\n".join(f"## Part {i}\n\n" + ("vlan bridge trunk port " * 120) for i in range(4))
    cfg = build(tmp_path, make_config, {"posts/long.md": long_post, "posts/other.md": "# Other\n\nvlan trunk notes\n"})
    index = SearchIndex(cfg.public_store_path)
    embedder = tier_embedder(cfg, "public", index)
    plain = index.search("vlan trunk", embedder, SearchParams(min_score=0, view="chunks"))
    assert sum(h.slug == "long" for h in plain.hits) > 1
    capped = index.search("vlan trunk", embedder, SearchParams(min_score=0, max_per_document=1, view="chunks"))
    assert sorted(h.slug for h in capped.hits) == ["long", "other"]
    diverse = index.search("vlan trunk", embedder, SearchParams(min_score=0, mmr_lambda=0.3, view="chunks"))
    assert diverse.hits[1].slug == "other"  # the near-duplicate chunks of `long` are pushed down


def test_index_reloads_when_the_store_changes(tmp_path, make_config):
    cfg = build(tmp_path, make_config, TREE)
    index = SearchIndex(cfg.public_store_path)
    embedder = HashingEmbedder(384)
    assert not index.search("quokka", embedder, SearchParams(mode="bm25")).hits
    (cfg.content_dir / "posts" / "quokka.md").write_text("# Quokka\n\nThe quokka lives on Rottnest island.\n")
    with instance_for_test() as instance:
        assert run_build(cfg, instance).success
    hits = index.search("quokka island", embedder, SearchParams())
    assert hits.hits[0].slug == "quokka" and hits.hits[0].vector_score is not None


def test_wrong_model_and_bad_parameters_are_clear_errors(cfg):
    index = SearchIndex(cfg.public_store_path)
    with pytest.raises(SearchError, match="embedded with"):
        index.search("vlan", _OtherModel(), SearchParams())
    for bad in (
        dict(k=0),
        dict(mode="magic"),
        dict(fusion="max"),
        dict(vector_weight=0, bm25_weight=0),
        dict(mmr_lambda=2),
    ):
        with pytest.raises(SearchError):
            index.search("vlan", None, SearchParams(**bad))
    with pytest.raises(SearchError, match="no store"):
        SearchIndex(cfg.data_dir / "missing.db").search("vlan", None, SearchParams(mode="bm25"))


class _OtherModel(HashingEmbedder):
    @property
    def model(self) -> str:
        return "another/model"


def test_cli_search_context_and_log(cfg, capsys):
    args = ["--content-dir", str(cfg.content_dir), "--output-dir", str(cfg.output_dir)]
    assert rag(["search", "how do I set up vlans on proxmox", "-k", "3", "--min-score", "0", *args]) == 0
    printed = capsys.readouterr()
    first = printed.out.splitlines()[0]
    assert first.startswith("posts/proxmox ::") and first.rsplit(" ", 1)[1].replace(".", "").isdigit()
    # The count on stderr is the pages printed (a page's other sections are indented beneath it).
    pages = [line for line in printed.out.splitlines() if not line.startswith(" ")]
    assert len(pages) == 3 and printed.err.startswith("(3 results in "), printed
    # One page (the only one tagged zfs): "1 result", not "1 results".
    assert rag(["search", "snapshots", "--tag", "zfs", "--min-score", "0", *args]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("posts/zfs ::") and printed.err.startswith("(1 result in "), printed
    assert rag(["search", "vlan", "--json", "--collections", "posts", "--min-score", "0", *args]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["query"] == "vlan"
    assert set(payload["hits"][0]) == {
        "id",
        "collection",
        "slug",
        "title",
        "headingPath",
        "text",
        "score",
        "relevance",
        "vectorScore",
        "bm25Score",
        "sections",
    }
    assert rag(["search", "zzzqqq nothing", "--min-score", "0.99", *args]) == 0
    assert rag(["search", "vlan", "--filter", "oops", *args]) == 2
    assert "key=value" in capsys.readouterr().err
    assert rag(["context", "how do I set up vlans on proxmox", "--budget", "200", "--min-score", "0", *args]) == 0
    out = capsys.readouterr().out
    assert "[posts:proxmox" in out
    assert rag(["log", "-n", "3", *args]) == 0
    out = capsys.readouterr().out
    assert "searches logged" in out and "Weakest" in out and "zzzqqq nothing" in out
    # It names the file that holds them: the log file beside the store, not the store.
    assert out.splitlines()[0].endswith(f" searches logged in {log_path(cfg.public_store_path)}"), out
    # Each table has column headers, and each row's figures sit under them.
    lines = out.splitlines()
    header = lines[lines.index("Recent") + 1]
    assert header.split() == ["When", "Best", "relevance", "Latency", "Hits", "Query"], header
    row = lines[lines.index("Recent") + 2]
    relevance_end = header.index("relevance") + len("relevance")
    assert re.fullmatch(r"(\d\.\d\d|--)", row[relevance_end - 4 : relevance_end].strip()), (header, row)
    assert row[header.index("Hits") : header.index("Hits") + 4].strip().isdigit(), (header, row)
    assert rag(["search", "vlan", "--tier", "private", *args]) == 2
    assert "rag build" in capsys.readouterr().err


def test_sample_content_proxmox_vlan_query(tmp_path, make_config):
    cfg = make_config(SAMPLE_CONTENT)
    with instance_for_test() as instance:
        assert run_build(cfg, instance, vaults=[]).success
    index = SearchIndex(cfg.public_store_path, cfg.collection_weights)
    hits = index.search(
        "how do I set up vlans on proxmox", tier_embedder(cfg, "public", index), SearchParams(k=10)
    ).hits
    # Page view: the post is one hit, its network-configuration section among its sections.
    assert [h.slug for h in hits].count("homelab-proxmox-setup") == 1
    post = next(h for h in hits if h.slug == "homelab-proxmox-setup")
    assert any("Network configuration" in s.heading_path for s in post.sections)
