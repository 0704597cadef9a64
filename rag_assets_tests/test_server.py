"""`rag serve`: a real uvicorn server on 127.0.0.1 over a store built by the real Dagster build."""

from __future__ import annotations

import dataclasses
import importlib.util
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import httpx
import pytest
import uvicorn

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.embed.errors import ProviderUnavailable
from rag_assets.index import store, tier_logs
from rag_assets.serve import http as server_module
from rag_assets.serve.access import OWNER
from rag_assets.serve.http import MAX_QUERY_CHARS, create_app

from .conftest import PROXMOX_POST, instance_for_test
from .live_server import ServerThread

FILLER = (
    "This paragraph is ordinary prose about the homelab so that every document is long enough to be "
    "chunked like a real page, with enough words to keep the chunker happy and the ranking honest. "
)

ZIGBEE = f"""---
title: Zigbee coordinator
tags: [zigbee, homeassistant]
status: active
---
# Zigbee coordinator

{FILLER * 8}

## Flashing the coordinator firmware

The Sonoff dongle needs the zigbee2mqtt coordinator firmware flashed with cc2538-bsl before pairing.
Hold the boot button while plugging it in, then run the flasher against the serial port.
{FILLER * 6}
"""

BACKUPS = f"""---
title: Restic backups
tags: [backup]
status: draft
---
# Restic backups

{FILLER * 2}

## Offsite repository

Restic pushes encrypted snapshots to a Backblaze B2 bucket every night; prune keeps thirty daily copies.
{FILLER * 2}
"""

CJK_NOTE = f"""---
title: 日本語のメモ
tags: [notes]
---
# 日本語のメモ

家庭用サーバーの設定について。ネットワークの構成とバックアップの手順を書きます。
{FILLER * 2}
"""

CONTENT = {
    "docs/zigbee.md": ZIGBEE,
    "docs/backups.md": BACKUPS,
    "docs/cjk.md": CJK_NOTE,
    "posts/proxmox.md": PROXMOX_POST + "\n" + FILLER * 3,
}


def build_content(root: Path) -> object:
    content = root / "content"
    for rel, text in CONTENT.items():
        path = content / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # no rag.yaml of the developer's is read
        mp.delenv("RAG_CONFIG", raising=False)
        cfg = load_config(
            None,
            content_dir=content,
            output_dir=root / "out",
            embedder="hashing",
            private_embedder="hashing",
            environ={},
        )
        with instance_for_test() as instance:
            outcome = run_build(cfg, instance)
    assert outcome.success, outcome.error or outcome.failed_checks
    return cfg


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    return build_content(tmp_path_factory.mktemp("server"))


@pytest.fixture(scope="module")
def server(cfg):
    with ServerThread(create_app(cfg)) as running:
        yield running


# ------------------------------------------------------------------------------------ search


def test_search_returns_the_chunk_that_answers(server):
    r = server.get("/search", q="how do I flash the zigbee coordinator firmware", k=3)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["query"] == "how do I flash the zigbee coordinator firmware" and body["tier"] == "public"
    assert body["model"] == "rag-assets/feature-hash-v1" and body["latencyMs"] >= 0
    assert 1 <= len(body["hits"]) <= 3
    top = body["hits"][0]
    assert set(top) >= {"id", "collection", "slug", "title", "headingPath", "text", "score", "vectorScore", "bm25Score"}
    assert (top["collection"], top["slug"], top["title"]) == ("docs", "zigbee", "Zigbee coordinator")
    assert top["headingPath"][-1] == "Flashing the coordinator firmware"
    assert "cc2538-bsl" in top["text"]
    assert 0 < top["score"] <= 1.5 and top["vectorScore"] is not None and top["bm25Score"] is not None
    relevances = [h["relevance"] for h in body["hits"]]  # hits are ranked by the relevance they show
    assert relevances == sorted(relevances, reverse=True)


@pytest.mark.parametrize("mode", ["hybrid", "vector", "bm25"])
def test_every_mode_finds_it(server, mode):
    # A five-page corpus gives relevance little to go on (test_relevance.py covers it on the
    # sample); this checks each mode's ranking, so no floor.
    body = server.get("/search", q="restic backblaze snapshots", mode=mode, k=1, min_score=0).json()
    assert body["mode"] == mode
    assert body["hits"][0]["slug"] == "backups", body
    if mode == "bm25":
        assert body["hits"][0]["vectorScore"] is None
    if mode == "vector":
        assert body["hits"][0]["bm25Score"] is None


def test_fusion_weights_and_diversity_params_are_accepted(server):
    r = server.get(
        "/search",
        q="proxmox vlan bridge",
        fusion="convex",
        vector_weight="0.3",
        bm25_weight="0.7",
        min_score="0",
        mmr="0.5",
        per_doc=1,
        k=5,
        rrf_k=10,
    )
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    assert hits[0]["slug"] == "proxmox"
    assert len({h["slug"] for h in hits}) == len(hits)  # per_doc=1


def test_filters_restrict_the_results(server):
    def slugs(**params):
        r = server.get("/search", q="homelab prose chunk ranking", k=50, min_score=0, **params)
        assert r.status_code == 200, r.text
        return {f"{h['collection']}/{h['slug']}" for h in r.json()["hits"]}

    everything = slugs()
    assert {"docs/zigbee", "docs/backups", "posts/proxmox"} <= everything
    assert slugs(collections="posts") == {"posts/proxmox"}
    assert slugs(collections="posts,docs") == everything
    assert slugs(filter="status=active") == {"docs/zigbee"}
    assert slugs(filter="status=DRAFT") == {"docs/backups"}  # case-insensitive values
    assert slugs(tag="proxmox") == {"posts/proxmox"}
    assert slugs(tag="zigbee", collections="docs") == {"docs/zigbee"}
    assert slugs(prefix="back") == {"docs/backups"}
    assert slugs(prefix="posts/") == {"posts/proxmox"}
    assert slugs(collections="nothing-by-that-name") == set()


def test_repeated_filters_must_all_hold(server):
    r = server.client.get(
        "/search",
        params=[("q", "homelab"), ("filter", "status=active"), ("filter", "title=Restic backups"), ("min_score", "0")],
    )
    assert r.status_code == 200 and r.json()["hits"] == []


NASTY = [
    '"',
    '""',
    "'",
    "-",
    "--",
    "-proxmox",
    "NEAR(",
    "NEAR(proxmox vlan",
    "AND OR",
    "AND",
    "OR NOT",
    "*",
    "prox*",
    "(",
    ")",
    "((proxmox)",
    "proxmox)",
    "text:proxmox",
    "col : x",
    "^proxmox",
    "+",
    "a AND (b OR",
    "{x}",
    "[x]",
    "proxmox; DROP TABLE chunks; --",
    "%",
    "\\",
    "\x00",
    "😀 emoji",
    "家庭用サーバー",
    "サーバー",
    "家",
    "한국어 검색",
    "café résumé",
    "the of and",
    "a",
    "?",
    "...",
    "x" * 500,
    " ".join(["proxmox vlan zigbee"] * 300)[:MAX_QUERY_CHARS],
]


@pytest.mark.parametrize("query", NASTY, ids=range(len(NASTY)))
@pytest.mark.parametrize("mode", ["hybrid", "bm25"])
def test_odd_queries_never_fail(server, query, mode):
    r = server.get("/search", q=query, mode=mode)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["query"] == query and isinstance(body["hits"], list)


def test_cjk_query_finds_the_cjk_note(server):
    hits = server.get("/search", q="サーバー", mode="bm25", min_score=0).json()["hits"]
    assert hits and hits[0]["slug"] == "cjk"


@pytest.mark.parametrize(
    "params, message",
    [
        ({}, "q is required"),
        ({"q": ""}, "q is required"),
        ({"q": "   "}, "q is required"),
        ({"q": "x" * (MAX_QUERY_CHARS + 1)}, "too long"),
        ({"q": "x", "k": "ten"}, "k must be a whole number"),
        ({"q": "x", "k": "1.5"}, "k must be a whole number"),
        ({"q": "x", "k": "0"}, "k must be between 1 and 1000"),
        ({"q": "x", "k": "1001"}, "k must be between 1 and 1000"),
        ({"q": "x", "k": "-3"}, "k must be between 1 and 1000"),
        ({"q": "x", "tier": "secret"}, "unknown tier 'secret'; use one of public, safe, private"),
        ({"q": "x", "mode": "semantic"}, "unknown mode 'semantic'; use one of hybrid, vector, bm25"),
        ({"q": "x", "fusion": "max"}, "fusion must be one of rrf, convex"),
        ({"q": "x", "filter": "status"}, "must look like key=value"),
        ({"q": "x", "filter": "=active"}, "must look like key=value"),
        ({"q": "x", "vector_weight": "heavy"}, "vector_weight must be a number"),
        ({"q": "x", "vector_weight": "nan"}, "vector_weight must be a finite number"),
        ({"q": "x", "vector_weight": "0", "bm25_weight": "0"}, "not both 0"),
        ({"q": "x", "bm25_weight": "-1"}, "must be >= 0"),
        ({"q": "x", "mmr": "2"}, "mmr_lambda must be between 0 and 1"),
        ({"q": "x", "per_doc": "0"}, "per_doc must be at least 1"),
        ({"q": "x", "min_score": "inf"}, "min_score must be a finite number"),
        ({"q": "x", "k": "50", "candidates": "10"}, "candidates must be at least k"),
        ({"q": "x", "top_k": "5"}, "unknown parameter(s) top_k"),
        ({"q": "x", "tier": "private"}, "the private tier has no store yet"),
        ({"q": "x", "tier": "safe", "mode": "bm25"}, "the safe tier has no store yet"),
    ],
)
def test_bad_parameters_get_a_400_that_says_what_to_do(server, params, message):
    r = server.get("/search", **params)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert message in r.json()["error"]


def test_a_parameter_given_twice_is_refused(server):
    r = server.client.get("/search", params=[("q", "x"), ("k", "1"), ("k", "2")])
    assert r.status_code == 400 and "give k only once" in r.json()["error"]


def test_k_above_the_default_candidates_just_works(server):
    r = server.get("/search", q="homelab", k=500, min_score=0)
    assert r.status_code == 200, r.text


def test_unknown_routes_and_methods_answer_json(server):
    r = server.get("/nope")
    assert r.status_code == 404 and "/search" in r.json()["error"]
    r = server.client.post("/search", params={"q": "x"})
    assert r.status_code == 405 and "error" in r.json()


# ------------------------------------------------------------------------------------ status, health


def test_health(server):
    assert server.get("/health").json() == {"status": "ok"}


def test_status_reports_every_tier(server, cfg):
    server.get("/search", q="proxmox")  # loads the public tier
    r = server.get("/status")
    assert r.status_code == 200, r.text
    body = r.json()
    tiers = body["tiers"]
    assert set(tiers) == {"public", "safe", "private"}
    public = tiers["public"]
    assert public["exists"] is True and public["chunks"] > 0 and public["model"] == "rag-assets/feature-hash-v1"
    assert public["builtAt"] and public["freshness"] == "Fresh"
    assert tiers["private"]["exists"] is False and tiers["safe"]["exists"] is False
    assert body["server"]["privateTierServed"] is True
    assert body["server"]["loaded"]["public"]["chunksInMemory"] == public["chunks"]


# ------------------------------------------------------------------------------------ context


@pytest.mark.skipif(
    importlib.util.find_spec("rag_assets.search.context") is None, reason="rag_assets.search.context not written yet"
)
def test_context_packs_hits_under_the_budget(server):
    r = server.get("/context", q="flash the zigbee coordinator firmware", budget=1200, k=3)
    assert r.status_code == 200, r.text
    body = r.json()
    assert 0 < body["tokens"] <= 1200 and body["budget"] == 1200 and body["tokenizer"]
    assert body["query"] == "flash the zigbee coordinator firmware" and body["tier"] == "public"
    assert body["text"].startswith("[docs:zigbee#"), body["text"][:200]  # the best passage first
    assert "cc2538-bsl" in body["text"]
    assert body["citations"] and len(body["citations"]) <= 3
    tiny = server.get("/context", q="zigbee", budget=5).json()
    assert tiny["text"] == "" and tiny["tokens"] == 0 and tiny["dropped"]
    # The empty context says why, and the budget it names is enough for the best passage.
    assert tiny["neededBudget"] > 5 and f"at least {tiny['neededBudget']}." in tiny["message"]
    enough = server.get("/context", q="zigbee", budget=tiny["neededBudget"]).json()
    assert enough["text"] and "message" not in enough
    for bad, message in (({"budget": "lots"}, "budget must be a whole number"), ({"budget": "0"}, "budget must be")):
        r = server.get("/context", q="zigbee", **bad)
        assert r.status_code == 400 and message in r.json()["error"]
    assert server.get("/context", q="").status_code == 400
    assert server.get("/context", q="x", tier="private").status_code == 400


# ------------------------------------------------------------------------------------ serving


def test_concurrent_clients_get_consistent_answers(server):
    queries = ["zigbee coordinator firmware", "restic backblaze", "proxmox vlan bridge", "家庭用サーバー"]

    def ask(i):
        with httpx.Client(base_url=server.url, timeout=30) as client:
            r = client.get("/search", params={"q": queries[i % len(queries)], "k": 3})
            return i % len(queries), r.status_code, [h["id"] for h in r.json()["hits"]]

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(ask, range(48)))
    assert all(status == 200 for _, status, _ in results)
    by_query: dict[int, set] = {}
    for q, _, ids in results:
        by_query.setdefault(q, set()).add(tuple(ids))
    assert all(len(answers) == 1 for answers in by_query.values())


def test_searches_are_logged_without_reloading_the_matrix(server, cfg):
    server.get("/search", q="warm up")
    tiers = server.server.config.app.state.tiers
    loaded = tiers.index("public", OWNER).loaded()
    before = _log_rows(cfg.public_store_path)
    for i in range(5):
        assert server.get("/search", q=f"proxmox logged {i}").status_code == 200
    deadline = time.monotonic() + 5
    while _log_rows(cfg.public_store_path) < before + 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _log_rows(cfg.public_store_path) >= before + 5
    assert tiers.index("public", OWNER).loaded() is loaded  # the log rows did not trigger a reload


def _log_rows(path: Path) -> int:
    with closing(sqlite3.connect(tier_logs.log_path(path))) as conn:
        return conn.execute("SELECT COUNT(*) FROM search_log").fetchone()[0]


def test_a_rebuilt_store_is_picked_up(cfg, tmp_path):
    copy = dataclasses.replace(cfg, output_dir=tmp_path / "out")  # a copy of the built store, to change
    copy.public_store_path.parent.mkdir(parents=True)
    with (
        closing(sqlite3.connect(cfg.public_store_path)) as source,
        closing(sqlite3.connect(copy.public_store_path)) as target,
    ):
        source.backup(target)
    cfg = copy
    with ServerThread(create_app(cfg)) as running:
        assert running.get("/search", q="restic backblaze", k=1).json()["hits"][0]["slug"] == "backups"
        store.delete_collections(cfg.public_store_path, ["docs"])  # what a build removing `docs` does
        hits = running.get("/search", q="restic backblaze", k=5, min_score=0).json()["hits"]
        assert hits and all(h["collection"] == "posts" for h in hits)


def test_private_tier_is_refused_off_loopback(cfg):
    with ServerThread(create_app(cfg, serve_private=False)) as running:
        r = running.get("/search", q="anything", tier="private")
        assert r.status_code == 403 and "allow_private_remote" in r.json()["error"]
        status = running.get("/status").json()
        assert status["tiers"]["private"] == {"exists": False, "served": False}
        assert running.get("/search", q="proxmox").status_code == 200


def test_provider_down_is_a_503_and_bugs_are_a_json_500(server, monkeypatch):
    tiers = server.server.config.app.state.tiers

    def unavailable(tier, index):
        raise ProviderUnavailable("Ollama at http://127.0.0.1:11434 is not reachable")

    monkeypatch.setattr(tiers, "embedder", unavailable)
    r = server.get("/search", q="proxmox")
    assert r.status_code == 503 and "mode=bm25" in r.json()["error"]
    assert server.get("/search", q="proxmox", mode="bm25").status_code == 200  # BM25 needs no embedder

    def broken(tier, who):
        raise RuntimeError("boom")

    monkeypatch.setattr(tiers, "index", broken)
    r = server.get("/search", q="proxmox")
    assert r.status_code == 500
    assert r.json() == {"error": "internal server error (RuntimeError); the server log has the details"}


@pytest.mark.parametrize(
    "host, allow, served, warning",
    [
        ("127.0.0.1", False, True, None),
        ("localhost", False, True, None),
        ("0.0.0.0", False, False, "the private tier is not served"),
        ("0.0.0.0", True, True, "WITH the private tier"),
    ],
)
def test_serve_keeps_the_private_tier_on_loopback(cfg, monkeypatch, capsys, host, allow, served, warning):
    started = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(app=app, **kw))
    monkeypatch.setattr(server_module, "limit_blas_threads", lambda threads=1: "")  # process-wide: not in tests

    server_module.serve(cfg, host=host, port=9, allow_private_remote=allow)
    started["app"].state.tiers.close()
    assert (started["host"], started["port"]) == (host, 9)
    assert started["app"].state.tiers.serve_private is served
    out = capsys.readouterr().out
    if warning:
        assert warning in out
    else:
        assert "warning" not in out
