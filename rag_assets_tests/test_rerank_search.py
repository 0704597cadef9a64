"""The reranking stage in real searches: stores built by the real pipeline, a real /rerank
server on loopback, the ``rag`` CLI and the HTTP API; re-ordering, degrading when the
reranker fails, and the Private tier's passages kept on this machine."""

from __future__ import annotations

import dataclasses
import json
import socket
from pathlib import Path

import pytest

from rag_assets.base.http_retry import RetryPolicy
from rag_assets.config import RerankerSettings, VaultConfig, load_config
from rag_assets.defs.runner import run_build
from rag_assets.index.params import SearchParams
from rag_assets.search.rerank.http import HttpReranker
from rag_assets.search.rerank.stage import RerankStage, search_reranked
from rag_assets.search.retrieval import SearchIndex, tier_embedder
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .conftest import instance_for_test
from .live_server import ServerThread
from .rerank_server import RerankServer
from .test_egress import RecordingServer
from .test_search import TREE

QUERY = "proxmox vlan bridge snapshots handshake"
PRIVATE_NOTE = "# Bank recovery codes\n\nThe recovery phrase for the savings account is kept in the fire safe.\n"
PARAMS = SearchParams(k=3, min_score=0)
EXTRA = {
    "posts/backups.md": "# Backups\n\nRestic snapshots go to a bucket; the vlan for storage is separate.\n",
    "docs/bridge.md": "# Bridges\n\nA Linux bridge joins the guests to the network; proxmox calls it vmbr0.\n",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A public tree and a private vault, built once with the hashing embedder."""
    root = tmp_path_factory.mktemp("rerank")
    content = root / "content"
    for rel, text in {**TREE, **EXTRA, "vaults/me/bank.md": PRIVATE_NOTE}.items():
        (content / rel).parent.mkdir(parents=True, exist_ok=True)
        (content / rel).write_text(text, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("RAG_CONFIG", raising=False)
        cfg = load_config(
            None,
            content_dir=content,
            output_dir=root / "out",
            embedder="hashing",
            private_embedder="hashing",
            environ={},
        )
        cfg = dataclasses.replace(
            cfg, vaults=(VaultConfig("me", content / "vaults" / "me", "private"),), identity_map_path=None
        )
        with instance_for_test() as instance:
            outcome = run_build(cfg, instance)
    assert outcome.success, outcome.error
    return cfg


def fused(cfg, query: str = QUERY, k: int = 6, tier: str = "public"):
    index = SearchIndex(cfg.store_path(tier), cfg.collection_weights, log_searches=False)
    return index.search(query, tier_embedder(cfg, tier, index), SearchParams(k=k, min_score=0)).hits


def reversing(order: list[str]):
    """A judge that ranks the fused order backwards: a re-ordering nobody could get by accident."""
    return lambda query, document: (order.index(document) + 1) / len(order) if document in order else 0.0


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def stage_for(url: str, top_n: int = 4) -> RerankStage:
    policy = RetryPolicy(max_retries=1, base_backoff=0.01, timeout=2)
    return RerankStage(HttpReranker(base_url=url, model="judge", policy=policy), top_n)


def with_reranker(cfg, url: str, **settings):
    return dataclasses.replace(
        cfg, reranker=RerankerSettings(name="http", base_url=url, model="judge", max_retries=1, **settings)
    )


# --- The stage ----------------------------------------------------------------------------------


def test_the_top_n_fused_candidates_are_reranked_and_the_rest_keep_their_place(built):
    before = fused(built)
    assert len(before) >= 5
    head = [h.text for h in before[:4]]
    index = SearchIndex(built.public_store_path, built.collection_weights, log_searches=False)
    embedder = tier_embedder(built, "public", index)
    with RerankServer(score=reversing(head)) as server:
        result = search_reranked(index, QUERY, embedder, SearchParams(k=5, min_score=0), stage_for(server.url, top_n=4))
        (request,) = server.rerank_requests
    assert request.json == {"model": "judge", "query": QUERY, "documents": head, "top_n": 4}
    assert [h.id for h in result.hits] == [h.id for h in before[:4][::-1]] + [before[4].id]
    assert [h.score for h in result.hits[:4]] == [h.score for h in before[:4][::-1]]  # fused scores kept
    assert [h.rerank_score is not None for h in result.hits] == [True] * 4 + [False]
    assert result.params.k == 5 and result.rerank.reranked and result.rerank.candidates == 4
    payload = result.to_json()
    assert payload["reranked"] is True and payload["reranker"] == "http:judge" and "rerankError" not in payload
    assert "rerankScore" in payload["hits"][0] and "rerankScore" not in payload["hits"][4]


def test_k_below_top_n_still_reranks_top_n_candidates(built):
    before = fused(built, k=4)
    index = SearchIndex(built.public_store_path, built.collection_weights, log_searches=False)
    with RerankServer(score=reversing([h.text for h in before])) as server:
        result = search_reranked(
            index, QUERY, tier_embedder(built, "public", index), SearchParams(k=1, min_score=0), stage_for(server.url)
        )
        assert len(server.rerank_requests[0].json["documents"]) == 4
    assert [h.id for h in result.hits] == [before[3].id]


def test_a_reranker_that_is_down_leaves_the_fused_order_and_says_why(built, caplog):
    before = fused(built, k=3)
    index = SearchIndex(built.public_store_path, built.collection_weights, log_searches=False)
    result = search_reranked(index, QUERY, tier_embedder(built, "public", index), PARAMS, stage_for(closed_port_url()))
    assert [h.id for h in result.hits] == [h.id for h in before]
    assert all(h.rerank_score is None for h in result.hits)
    payload = result.to_json()
    assert payload["reranked"] is False and "connection error" in payload["rerankError"]
    assert "reranking with http:judge failed" in caplog.text


def test_a_reranker_answering_5xx_is_retried_then_degrades(built):
    with RerankServer() as server:
        server.script("500", "502")
        index = SearchIndex(built.public_store_path, built.collection_weights, log_searches=False)
        result = search_reranked(index, QUERY, tier_embedder(built, "public", index), PARAMS, stage_for(server.url))
        assert len(server.rerank_requests) == 2  # the first try and one retry
    assert result.rerank.reranked is False and "HTTP 502" in result.rerank.error


# --- rag search / rag context -------------------------------------------------------------------


def write_config(built, path: Path, reranker: str) -> list[str]:
    path.write_text(
        f"content_dir: {built.content_dir}\noutput_dir: {built.output_dir}\nembedder: hashing\nidentity_map: null\n"
        f"vaults:\n  - {{name: me, path: {built.content_dir / 'vaults' / 'me'}, tier: private}}\n"
        f"private_tier: {{embedder: hashing}}\nreranker: {reranker}\n"
    )
    return ["--config", str(path)]


def search_json(capsys, *args: str) -> dict:
    assert rag(["search", QUERY, "--json", "--min-score", "0", "-k", "3", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_rag_search_reranks_by_default_when_configured_and_not_with_no_rerank(built, tmp_path, capsys):
    head = [h.text for h in fused(built, k=3)]
    with RerankServer(score=reversing(head)) as server:
        config = write_config(
            built, tmp_path / "rag.yaml", f"{{name: http, base_url: '{server.url}', model: judge, top_n: 3}}"
        )
        reranked = search_json(capsys, *config)
        assert [h["text"] for h in reranked["hits"]] == head[::-1] and reranked["reranked"] is True
        assert len(server.rerank_requests) == 1
        plain = search_json(capsys, *config, "--no-rerank")
        assert [h["text"] for h in plain["hits"]] == head and plain["reranked"] is False
        assert len(server.rerank_requests) == 1
        assert rag(["search", QUERY, "--min-score", "0", "-k", "3", *config]) == 0
        out, err = capsys.readouterr()
        assert "(rerank 1.00)" in out.splitlines()[0] and "reranking 3 with http:judge" in err
        assert rag(["context", QUERY, "--budget", "60", "-k", "3", "--min-score", "0", *config]) == 0
        first = fused(built, k=3)[-1]
        assert capsys.readouterr().out.startswith(f"[{first.collection}:{first.slug}")


def test_rag_search_says_when_reranking_failed_or_none_is_configured(built, tmp_path, capsys):
    config = write_config(
        built, tmp_path / "rag.yaml", f"{{name: http, base_url: '{closed_port_url()}', max_retries: 0}}"
    )
    assert rag(["search", QUERY, "--min-score", "0", *config]) == 0
    assert "warning: not reranked, results in fused order" in capsys.readouterr().err
    assert search_json(capsys, *config)["rerankError"]
    config = write_config(built, tmp_path / "rag.yaml", "none")
    assert rag(["search", QUERY, "--rerank", *config]) == 2
    assert "no reranker is configured" in capsys.readouterr().err


def test_rag_search_private_refuses_a_reranker_off_this_machine(built, tmp_path, capsys, non_loopback_address):
    address = non_loopback_address
    with RerankServer(bind_host="0.0.0.0") as server:
        config = write_config(
            built, tmp_path / "rag.yaml", f"{{name: http, base_url: 'http://{address}:{server.port}'}}"
        )
        assert search_json(capsys, *config)["reranked"] is True  # reachable there: the silence below is a refusal
        server.reset()
        assert rag(["search", "recovery phrase", "--tier", "private", *config]) == 2
        assert "refusing to rerank private notes" in capsys.readouterr().err
        assert rag(["context", "recovery phrase", "--tier", "private", *config]) == 2
        capsys.readouterr()
        assert server.requests == []
        assert search_json(capsys, "--tier", "private", "--no-rerank", *config)["hits"]


def test_rag_search_private_reranks_locally_past_any_proxy(built, tmp_path, capsys, monkeypatch):
    with RerankServer() as server, RecordingServer(forward=True) as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        config = write_config(built, tmp_path / "rag.yaml", f"{{name: http, base_url: '{server.url}'}}")
        payload = search_json(capsys, "--tier", "private", *config)
        assert payload["reranked"] is True and payload["hits"][0]["slug"] == "bank"
        assert any(b"fire safe" in r.raw_body for r in server.rerank_requests)
        assert len(proxy.received) == 0, proxy.received[:400]


# --- The HTTP API -------------------------------------------------------------------------------


def test_the_http_api_reranks_unless_told_not_to(built):
    head = [h.text for h in fused(built, k=3)]
    with RerankServer(score=reversing(head)) as judge:
        with ServerThread(create_app(with_reranker(built, judge.url, top_n=3), preload=False)) as api:
            body = api.get("/search", q=QUERY, k=3, min_score=0).json()
            assert [h["text"] for h in body["hits"]] == head[::-1] and body["reranked"] is True
            body = api.get("/search", q=QUERY, k=3, min_score=0, rerank="false").json()
            assert [h["text"] for h in body["hits"]] == head and body["reranked"] is False
            context = api.get("/context", q=QUERY, k=3, min_score=0, budget=60).json()
            assert context["reranked"] is True and context["text"].startswith(f"[{fused(built, k=3)[-1].collection}:")
            bad = api.get("/search", q=QUERY, rerank="perhaps")
            assert bad.status_code == 400 and "true or false" in bad.json()["error"]
        assert len(judge.rerank_requests) == 2


def test_the_http_api_degrades_when_the_reranker_is_down_and_refuses_remote_private(built, non_loopback_address):
    with ServerThread(create_app(with_reranker(built, closed_port_url()), preload=False)) as api:
        body = api.get("/search", q=QUERY, min_score=0).json()
        assert body["reranked"] is False and body["rerankError"] and body["hits"]
    none_configured = ServerThread(create_app(built, preload=False))
    with none_configured as api:
        assert api.get("/search", q=QUERY).json()["reranked"] is False
        assert api.get("/search", q=QUERY, rerank="true").status_code == 400
    address = non_loopback_address  # before, a machine without one silently skipped this half
    with RerankServer(bind_host="0.0.0.0") as judge:
        with ServerThread(create_app(with_reranker(built, f"http://{address}:{judge.port}"), preload=False)) as api:
            refused = api.get("/search", q="recovery phrase", tier="private")
            assert refused.status_code == 403 and "refusing to rerank private notes" in refused.json()["error"]
            assert api.get("/search", q="recovery phrase", tier="private", rerank="false").status_code == 200
        assert judge.requests == []
