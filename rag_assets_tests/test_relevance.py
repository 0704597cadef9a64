"""Trustworthy search on the sample content (hashing embedder, real Dagster build, real SQLite):
calibrated relevance, abstention, page-level results, the store's search profile, the log."""

from __future__ import annotations

import json
import re
import sqlite3
from contextlib import closing

import pytest
from starlette.testclient import TestClient

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.index import tier_logs
from rag_assets.index.params import SearchParams
from rag_assets.index.profiles import PROFILES, read_profile
from rag_assets.search.retrieval import SearchIndex, tier_embedder
from rag_assets.search.search_log import read_log
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .conftest import SAMPLE_CONTENT, instance_for_test

OFF_TOPIC = ["zzzzqqq", "qwxv plorkt", "what is the offside rule in football", "how long should I knead bread dough"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("relevance")
    cfg = load_config(
        None, content_dir=SAMPLE_CONTENT, output_dir=out, embedder="hashing", private_embedder="hashing", environ={}
    )
    with instance_for_test() as instance:
        assert run_build(cfg, instance, vaults=[]).success
    return cfg


def search(cfg, query, **params):
    index = SearchIndex(cfg.public_store_path, cfg.collection_weights)
    try:
        return index.search(query, tier_embedder(cfg, "public", index), SearchParams(**params))
    finally:
        index.close()


def test_relevance_is_in_unit_range_and_gibberish_and_off_topic_find_nothing(built):
    answered = search(built, "how do I set up vlans on proxmox", min_score=0.0, k=20)
    assert answered.hits and all(0.0 <= h.relevance <= 1.0 for h in answered.hits)
    assert answered.hits[0].relevance >= search(built, "proxmox").params.min_score
    for query in OFF_TOPIC:
        result = search(built, query)
        assert result.hits == [], (query, [(h.slug, h.relevance) for h in result.hits])
        assert 0 < result.params.min_score < 1, "the default floor is the model's threshold"
        assert result.best_relevance < result.params.min_score
        # Without the floor the same search still ranks candidates: the floor is what abstains.
        assert search(built, query, min_score=0.0).hits or query.startswith(("zzzz", "qwxv"))


def test_relevance_means_the_same_across_queries(built):
    """The raw fused score is 1.0 for every query's best candidate; relevance is not."""
    good = search(built, "how do I set up vlans on proxmox", min_score=0.0)
    bad = search(built, "what is the offside rule in football", min_score=0.0)
    assert good.hits[0].score == pytest.approx(bad.hits[0].score, rel=0.5)  # both near the top of their own scale
    assert good.hits[0].relevance > 3 * bad.hits[0].relevance


def test_min_score_filters_on_relevance(built):
    every = search(built, "proxmox backup restore", min_score=0.0, view="chunks", k=50).hits
    floor = sorted(h.relevance for h in every)[len(every) // 2]
    kept = search(built, "proxmox backup restore", min_score=floor, view="chunks", k=50).hits
    assert kept and all(h.relevance >= floor for h in kept)
    assert len(kept) < len(every)


def test_results_are_pages_with_their_sections(built):
    pages = search(built, "proxmox", k=10, min_score=0.0).hits
    keys = [(h.collection, h.slug) for h in pages]
    assert len(keys) == len(set(keys)), "a page appears once"
    many = [h for h in pages if len(h.sections) > 1]
    assert many, "some page matches in more than one section"
    for hit in pages:
        assert hit.sections[0].id == hit.id
        assert len(hit.sections) <= 3
        assert all(s.document_id == hit.document_id for s in hit.sections)
        assert [s.relevance for s in hit.sections] == sorted((s.relevance for s in hit.sections), reverse=True)
        assert hit.relevance == hit.sections[0].relevance
    assert [h.relevance for h in pages] == sorted((h.relevance for h in pages), reverse=True), (
        "ranked by the figure shown"
    )
    chunks = search(built, "proxmox", k=10, min_score=0.0, view="chunks").hits
    assert len({(h.collection, h.slug) for h in chunks}) < len(chunks), "the chunk view repeats pages"
    assert all(len(h.sections) == 1 for h in chunks)
    assert all(set(h.to_json()) >= {"id", "relevance", "sections", "headingPath"} for h in pages + chunks)


def test_the_store_records_its_profile_and_search_uses_it(built):
    with closing(sqlite3.connect(built.public_store_path)) as conn:
        profile = read_profile(conn, None)
        assert profile == PROFILES["hashing"]
        # A store keeps its recorded fusion: rewrite it and searches follow.
        conn.execute("UPDATE search_profile SET profile = json_set(profile, '$.fusion', 'rrf')")
        conn.commit()
    try:
        index = SearchIndex(built.public_store_path)
        assert index.loaded().profile.fusion == "rrf"
        embedder = tier_embedder(built, "public", index)

        def scores(**params):
            return [
                h.score
                for h in index.search(
                    "proxmox vlan", embedder, SearchParams(min_score=0.0, view="chunks", **params)
                ).hits
            ]

        weights = {"vector_weight": PROFILES["hashing"].vector_weight, "bm25_weight": PROFILES["hashing"].bm25_weight}
        assert scores() == scores(fusion="rrf", **weights)
        assert scores() != scores(fusion="zscore", **weights)
        index.close()
    finally:
        with closing(sqlite3.connect(built.public_store_path)) as conn:
            conn.execute("UPDATE search_profile SET profile = ?", (PROFILES["hashing"].to_json(),))
            conn.commit()


def test_cli_says_nothing_answers_and_context_abstains(built, capsys):
    args = ["--content-dir", str(SAMPLE_CONTENT), "--output-dir", str(built.output_dir)]
    assert rag(["search", "zzzzqqq", *args]) == 0
    assert "No result reaches the relevance threshold" in capsys.readouterr().out
    assert rag(["context", "what is the offside rule in football", "--json", *args]) == 0
    packed = json.loads(capsys.readouterr().out)
    assert packed["text"] == "" and packed["citations"] == [] and "threshold" in packed["message"]
    assert rag(["context", "how do I set up vlans on proxmox", "--json", *args]) == 0
    assert json.loads(capsys.readouterr().out)["citations"]
    # A budget under the best passage: not an empty line, but the budget it needs.
    assert rag(["context", "how do I set up vlans on proxmox", "--budget", "5", *args]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and "smaller than the best passage" in printed.err
    needed = int(re.search(r"at least (\d+)", printed.err).group(1))
    assert rag(["context", "how do I set up vlans on proxmox", "--budget", str(needed), *args]) == 0
    assert capsys.readouterr().out.startswith("[")
    assert rag(["search", "proxmox", "--chunks", "--json", *args]) == 0
    assert json.loads(capsys.readouterr().out)["view"] == "chunks"


def test_log_ranks_the_weakest_searches_by_relevance(built):
    with closing(sqlite3.connect(tier_logs.log_path(built.public_store_path))) as conn:
        conn.execute("DELETE FROM search_log")  # other tests searched this store too
        conn.commit()
    index = SearchIndex(built.public_store_path, log_searches=True)
    embedder = tier_embedder(built, "public", index)
    for query in ("how do I set up vlans on proxmox", "what is the offside rule in football", "zfs snapshots"):
        index.search(query, embedder, SearchParams())
    index.close()
    recent, weakest, total = read_log(built.public_store_path, 3)
    assert total >= 3
    assert weakest[0]["query"] == "what is the offside rule in football"
    relevances = [r["topRelevance"] for r in weakest]
    assert relevances == sorted(relevances)


def test_http_pages_chunks_and_empty_answers(built):
    with TestClient(create_app(built, preload=False, log_searches=False), base_url="http://127.0.0.1") as client:
        pages = client.get("/search", params={"q": "proxmox", "min_score": 0}).json()
        assert pages["view"] == "pages" and all("sections" in h for h in pages["hits"])
        chunks = client.get("/search", params={"q": "proxmox", "mode": "chunks", "min_score": 0}).json()
        assert chunks["view"] == "chunks" and chunks["mode"] == "hybrid"
        assert len(chunks["hits"]) > len({(h["collection"], h["slug"]) for h in chunks["hits"]}) - 1
        empty = client.get("/search", params={"q": "zzzzqqq"}).json()
        assert empty["hits"] == [] and "threshold" in empty["message"]
        assert client.get("/search", params={"q": "x", "view": "bogus"}).status_code == 400
        context = client.get("/context", params={"q": "what is the offside rule in football"}).json()
        assert context["citations"] == [] and "message" in context
