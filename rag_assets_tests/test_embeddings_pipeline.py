"""Embedding through the Dagster assets: cache, failed batches, model changes, usage, `auto`."""

from __future__ import annotations

import dataclasses
import sqlite3

import pytest

from rag_assets.config.schema import LocalSection
from rag_assets.defs.runner import run_build
from rag_assets.embed import EmbedderSettings, OllamaSettings, select_embedder
from rag_assets.embed.local import local_model_status
from rag_assets.embed.minilm import minilm_status
from rag_assets.index.index_json import read_index, read_meta
from rag_assets.index.manifest import read_manifest
from rag_assets.serve.cli import main

from .conftest import PROXMOX_POST, SAMPLE_CONTENT, instance_for_test


@pytest.fixture
def openai_env(monkeypatch, embedding_server):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    monkeypatch.setenv("RAG_OPENAI_BASE_URL", f"{embedding_server.url}/v1")
    return embedding_server


def remote_config(make_config, content, name="openai", **settings):
    cfg = make_config(content, embedder=name)
    fast = dict(batch_size=10, backoff=0.01, timeout=2.0)
    fast.update(settings)
    return dataclasses.replace(cfg, embedding=cfg.embedding.model_copy(update=fast))


def build(cfg):
    with instance_for_test() as instance:
        return run_build(cfg, instance)


# Two collections, 17 chunks (posts in two batches of up to 10): what the rebuild and model-change
# tests count (every chunk sent again, or none) needs no more than that; the sample content's
# 50-odd pages made each of their builds a few seconds.
SMALL_TREE = {
    "posts/p.md": PROXMOX_POST,
    **{f"posts/n{i}.md": f"# Note {i}\n\nzfs snapshot note {i}" for i in range(12)},
    **{f"docs/d{i}.md": f"# Doc {i}\n\nwireguard peer doc {i}" for i in range(4)},
}


def test_openai_build_records_the_model_everywhere_with_usage(openai_env, make_config, tmp_path):
    cfg = remote_config(
        make_config,
        SAMPLE_CONTENT,
        openai=EmbedderSettings().openai.model_copy(update={"price_per_million_tokens": 0.02}),
    )
    outcome = build(cfg)
    assert outcome.success, outcome.error
    posts = next(c for c in outcome.collections if c.collection == "posts").metadata["embeddings"]
    assert posts["provider"] == "openai" and posts["model"] == "openai/text-embedding-3-small"
    assert posts["cache_misses"] == 31 and posts["cache_hits"] == 0
    assert posts["requests"] == 4 and posts["batches"] == 4  # 31 chunks in batches of 10
    assert posts["tokens"] > 0 and posts["estimated_cost_usd"] == pytest.approx(posts["tokens"] / 1e6 * 0.02)
    index, meta = read_index(cfg.index_path), read_meta(cfg.meta_path)
    for header in (index, meta, read_manifest(cfg.manifest_path)):
        assert (header["model"], header["dimension"], header["provider"]) == (
            "openai/text-embedding-3-small",
            1536,
            "openai",
        )
    with sqlite3.connect(cfg.public_store_path) as conn:
        assert conn.execute("SELECT model, dimension FROM embeddings_meta").fetchone() == (
            "openai/text-embedding-3-small",
            1536,
        )
    assert len(index["chunks"][0]["embedding"]) == 1536


def test_a_rebuild_sends_nothing_for_unchanged_chunks(openai_env, make_config, write_tree):
    cfg = remote_config(make_config, write_tree(SMALL_TREE))
    assert build(cfg).success
    sent = len(openai_env.embedding_requests)
    outcome = build(cfg)
    assert outcome.success and len(openai_env.embedding_requests) == sent
    meta = outcome.collections[0].metadata["embeddings"]
    assert meta["cache_misses"] == 0 and meta["requests"] == 0 and meta["cache_hits"] > 0


def test_a_failed_batch_is_left_out_reported_and_retried_alone_next_run(openai_env, make_config, write_tree):
    content = write_tree(
        {"posts/p.md": PROXMOX_POST, **{f"posts/n{i}.md": f"# Note {i}\n\nzfs note {i}" for i in range(25)}}
    )
    cfg = remote_config(make_config, content, max_retries=2)
    openai_env.script("ok", "500", "500", "500")  # batch 1 fine, batch 2 fails three times
    outcome = build(cfg)
    assert outcome.success  # an incomplete index is published, with a warning
    meta = outcome.collections[0].metadata["embeddings"]
    assert meta["failed_batches"] == 1 and meta["failed_chunks"] == 10
    assert "batch 2/3 of posts" in meta["errors"]
    index = read_index(cfg.index_path)
    assert index["totalChunks"] == 26 - 10
    assert any(w.startswith("index_complete: missing_chunks=10") for w in outcome.warnings)

    openai_env.reset()
    outcome = build(cfg)
    assert outcome.success and not outcome.warnings
    [request] = openai_env.embedding_requests
    assert len(request.json["input"]) == 10  # only the chunks that failed
    assert read_index(cfg.index_path)["totalChunks"] == 26


def test_an_auth_error_stops_the_build_with_a_message_about_the_key(openai_env, make_config, write_tree):
    openai_env.script("401")
    cfg = remote_config(make_config, write_tree(SMALL_TREE))
    outcome = build(cfg)
    assert not outcome.success and "API key" in outcome.error
    assert len(openai_env.embedding_requests) == 1
    assert not cfg.index_path.exists()


def test_model_change_re_embeds_everything_and_switching_back_is_free(openai_env, make_config, write_tree):
    cfg = remote_config(make_config, write_tree(SMALL_TREE))
    assert build(cfg).success
    first = len(openai_env.embedding_requests)
    assert first >= 3  # both collections, one of them in two batches
    larger = {"model": "text-embedding-3-large", "dimension": 3072, "send_dimensions": True}
    other = dataclasses.replace(
        cfg, embedding=cfg.embedding.model_copy(update={"openai": cfg.embedding.openai.model_copy(update=larger)})
    )
    assert build(other).success
    assert len(openai_env.embedding_requests) == 2 * first  # every chunk again, never mixed
    assert read_meta(other.meta_path)["model"] == "text-embedding-3-large"
    assert read_meta(other.meta_path)["dimension"] == 3072
    assert build(cfg).success
    assert len(openai_env.embedding_requests) == 2 * first  # back to the first model: all cached
    assert read_meta(cfg.meta_path)["model"] == "openai/text-embedding-3-small"


def test_cli_partial_build_with_a_new_model_rebuilds_every_collection(openai_env, write_tree, tmp_path, capsys):
    content = write_tree({"posts/a.md": PROXMOX_POST, "docs/b.md": "# B\n\nSome docs."})
    args = ["--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    assert main(["build", "--embedder", "hashing", *args]) == 0
    capsys.readouterr()
    assert main(["build", "--embedder", "openai", "--collection", "posts", *args]) == 0
    printed = capsys.readouterr().out
    assert "re-embeds every collection" in printed and "[docs]" in printed
    assert read_meta(tmp_path / "out" / "public" / "embeddings-meta.json")["model"] == "openai/text-embedding-3-small"


def test_auto_prefers_a_key_then_ollama_then_minilm_then_local_then_hashing(embedding_server):
    settings = EmbedderSettings(name="auto", ollama=OllamaSettings(host=embedding_server.url))
    env = {"OPENROUTER_API_KEY": "k", "RAG_OPENAI_BASE_URL": f"{embedding_server.url}/v1"}
    chosen = select_embedder(settings, env)
    assert chosen.provider == "openai" and "OPENROUTER_API_KEY is set" in chosen.reason
    chosen = select_embedder(settings, {})
    assert chosen.provider == "ollama" and chosen.embedder.model == "nomic-embed-text"
    assert "has nomic-embed-text" in chosen.reason
    local_ok, _ = local_model_status()
    expected = "minilm" if minilm_status()[0] else "local" if local_ok else "hashing"
    missing_model = settings.model_copy(update={"ollama": OllamaSettings(host=embedding_server.url, model="bge-m3")})
    chosen = select_embedder(missing_model, {})
    assert chosen.provider == expected and "lacks bge-m3" in chosen.reason
    offline = settings.model_copy(update={"ollama": OllamaSettings(host="http://127.0.0.1:9")})
    chosen = select_embedder(offline, {})
    assert chosen.provider == expected and "not reachable" in chosen.reason
    no_local = offline.model_copy(update={"local": LocalSection(model_path="/nonexistent/model")})
    if not local_model_status("/nonexistent/model")[0] and not minilm_status("/nonexistent/model")[0]:
        assert select_embedder(no_local, {}).provider == "hashing"


def test_status_reports_the_embedding_service(embedding_server, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("OLLAMA_HOST", embedding_server.url)
    monkeypatch.setenv("RAG_EMBEDDER", "ollama")
    assert main(["status", "--output-dir", str(tmp_path)]) == 1  # no index yet, but the service is shown
    printed = capsys.readouterr().out
    assert f"ollama     {embedding_server.url}: online, models: nomic-embed-text:latest" in printed


def test_local_model_builds_the_index_through_dagster(make_config, write_tree):
    available, why = local_model_status()
    if not available:
        pytest.skip(f"local provider not installed: {why}")
    content = write_tree(
        {"posts/a.md": PROXMOX_POST, "posts/b.md": "# Bread\n\nA sourdough starter needs flour and water."}
    )
    outcome = build(make_config(content, embedder="local"))
    assert outcome.success, outcome.error
    meta = outcome.collections[0].metadata["embeddings"]
    assert (meta["provider"], meta["model"], meta["dimension"]) == (
        "local",
        "sentence-transformers/all-MiniLM-L6-v2",
        384,
    )


def test_queries_use_the_provider_that_built_the_index_or_say_why_not(embedding_server):
    from rag_assets.embed import ProviderUnavailable, query_embedder

    settings = EmbedderSettings(ollama=OllamaSettings(host=embedding_server.url))
    embedder = query_embedder("ollama", "nomic-embed-text", 768, settings, {})
    assert embedder.embed_query("vlans").shape == (768,)
    assert embedding_server.embedding_requests[-1].json["input"] == ["search_query: vlans"]
    down = EmbedderSettings(ollama=OllamaSettings(host="http://127.0.0.1:9"))
    with pytest.raises(ProviderUnavailable, match="not reachable"):
        query_embedder("ollama", "nomic-embed-text", 768, down, {})
    with pytest.raises(ProviderUnavailable, match="OPENROUTER_API_KEY is not set"):
        query_embedder("openai", "openai/text-embedding-3-small", 1536, settings, {})
    assert query_embedder("hashing", "rag-assets/feature-hash-v1", 384, settings, {}).dimension == 384
