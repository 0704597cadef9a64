"""The Private tier's local-only rule, proven with recording HTTP servers that must stay silent."""

from __future__ import annotations

import dataclasses

import pytest

from rag_assets.config import VaultConfig
from rag_assets.config.providers import endpoint_allowed
from rag_assets.defs.runner import run_build
from rag_assets.embed.ollama import OllamaEmbedder
from rag_assets.embed.openai_compat import OpenAICompatibleEmbedder
from rag_assets.embed.selection import EmbedderSettings, OllamaSettings, OpenAISettings
from rag_assets.index import store
from rag_assets.privacy.local_only import (
    PrivacyError,
    enforce_local_only,
    select_private_embedder,
)

from .conftest import instance_for_test
from .embedding_server import EmbeddingServer

PRIVATE_NOTE = """---
title: Bank recovery codes
---
# Bank recovery codes

The recovery phrase for the savings account is kept in the fire safe, second drawer.
"""


@pytest.mark.parametrize(
    ("url", "allowed", "ok"),
    [
        ("http://localhost:11434", (), True),
        ("http://127.0.0.1:11434", (), True),
        ("http://127.9.9.9:1", (), True),
        ("http://[::1]:11434", (), True),
        ("http://10.0.0.5:11434", (), False),
        ("http://192.168.1.20:11434", (), False),
        ("https://openrouter.ai/api/v1", (), False),
        ("http://localhost.evil.example:11434", (), False),
        ("http://gpu-box.lan:11434", ("gpu-box.lan",), True),
        ("http://gpu-box.lan:11434", ("http://gpu-box.lan:11434",), True),
        ("http://other.lan:11434", ("gpu-box.lan",), False),
    ],
)
def test_endpoint_allowed(url, allowed, ok):
    assert endpoint_allowed(url, allowed) is ok


def vault_config(write_tree, make_config, **private):
    content = write_tree({"posts/hello.md": "# Hello\n\nA public post.\n", "vaults/me/bank.md": PRIVATE_NOTE})
    cfg = make_config(content)
    vault = VaultConfig("me", content / "vaults" / "me", "private")
    return dataclasses.replace(cfg, vaults=(vault,), **private)


def test_a_remote_provider_for_the_private_tier_is_refused_at_run_time(write_tree, make_config, monkeypatch):
    with EmbeddingServer(api_key="sk-test") as server:
        monkeypatch.setenv("TEST_KEY", "sk-test")
        remote = EmbedderSettings(
            name="openai", openai=OpenAISettings(base_url=server.url + "/v1", api_key_env="TEST_KEY")
        )
        # Config validation would stop this at load time; bypass it to test the run-time gate.
        cfg = vault_config(write_tree, make_config, private_embedding=remote)
        with instance_for_test() as instance:
            outcome = run_build(cfg, instance)
        assert not outcome.success
        assert "remote API" in outcome.error
        assert server.requests == []
    assert store.summarise(cfg.private_store_path).chunks == 0


def test_enforce_local_only_refuses_remote_embedders_before_any_request():
    with EmbeddingServer(api_key="sk-test") as server:
        openai = OpenAICompatibleEmbedder(base_url=server.url + "/v1", model="m", dimension=1536, api_key="sk-test")
        with pytest.raises(PrivacyError, match="only locally"):
            enforce_local_only(openai)
        assert server.requests == []


def test_ollama_at_a_non_loopback_address_of_this_machine_gets_nothing(write_tree, make_config, non_loopback_address):
    address = non_loopback_address
    with EmbeddingServer(bind_host="0.0.0.0") as server:
        host = f"http://{address}:{server.port}"
        # The server is reachable there, so silence below means we refused, not that it was down.
        assert OllamaEmbedder(host=host, model="nomic-embed-text").health().online
        server.reset()
        settings = EmbedderSettings(name="ollama", ollama=OllamaSettings(host=host))
        cfg = vault_config(write_tree, make_config, private_embedding=settings)
        with instance_for_test() as instance:
            outcome = run_build(cfg, instance)
        assert not outcome.success and "not on this machine" in outcome.error
        with pytest.raises(PrivacyError):
            enforce_local_only(OllamaEmbedder(host=host, model="nomic-embed-text"))
        with pytest.raises(PrivacyError):
            select_private_embedder(settings, (), {})
        assert server.embedding_requests == []


def test_the_request_guard_stops_a_redirected_embedder(monkeypatch, non_loopback_address):
    """Defence in depth: even an embedder whose host changes after the check sends nothing."""
    address = non_loopback_address
    with EmbeddingServer(bind_host="0.0.0.0") as server:
        embedder = enforce_local_only(OllamaEmbedder(host=server.url, model="nomic-embed-text"))
        embedder.host = f"http://{address}:{server.port}"
        with pytest.raises(PrivacyError, match="refusing to send private text"):
            embedder.embed_documents(["the safe combination is 12-34-56"])
        assert server.embedding_requests == []


def test_local_ollama_is_used_for_the_private_tier(write_tree, make_config):
    """The positive control: on loopback the same path does send, and the store fills."""
    with EmbeddingServer() as server:
        settings = EmbedderSettings(name="ollama", ollama=OllamaSettings(host=server.url))
        cfg = vault_config(write_tree, make_config, private_embedding=settings)
        with instance_for_test() as instance:
            outcome = run_build(cfg, instance)
        assert outcome.success, outcome.error
        assert server.embedding_requests
        assert any(b"fire safe" in r.raw_body for r in server.embedding_requests)
    assert store.summarise(cfg.private_store_path).model == "nomic-embed-text"
