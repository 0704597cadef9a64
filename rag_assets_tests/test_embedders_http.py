"""OpenAI-compatible and Ollama clients against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rag_assets.base.http_retry import RetryPolicy, retry_after_seconds
from rag_assets.embed import EmbeddingAuthError, EmbeddingBatchError
from rag_assets.embed.ollama import OllamaEmbedder, ollama_health
from rag_assets.embed.openai_compat import OpenAICompatibleEmbedder

FAST = RetryPolicy(max_retries=3, base_backoff=0.01, max_backoff=0.05, retry_after_cap=5.0, timeout=2.0)


def openai_client(server, **kwargs) -> OpenAICompatibleEmbedder:
    return OpenAICompatibleEmbedder(
        base_url=f"{server.url}/v1", api_key="sk-test", policy=kwargs.pop("policy", FAST), **kwargs
    )


def test_batches_of_the_configured_size_with_the_key_and_real_vectors(embedding_server):
    texts = [f"chunk number {i} about proxmox vlans" for i in range(120)]
    client = openai_client(embedding_server, batch_size=50)
    vectors = client.embed_documents(texts)
    sizes = [len(r.json["input"]) for r in embedding_server.embedding_requests]
    assert sizes == [50, 50, 20]
    assert all(r.headers["authorization"] == "Bearer sk-test" for r in embedding_server.embedding_requests)
    assert embedding_server.embedding_requests[0].json["model"] == "openai/text-embedding-3-small"
    assert vectors.shape == (120, 1536) and vectors.dtype == np.float32
    assert np.allclose(vectors[7], embedding_server.vector_for(texts[7], 1536), atol=1e-6)
    assert client.usage.requests == 3
    assert client.usage.tokens == sum(len(t.split()) for t in texts)


def test_429_waits_for_retry_after_then_succeeds(embedding_server):
    embedding_server.script("429:0.4")
    client = openai_client(embedding_server)
    started = time.monotonic()
    client.embed_documents(["a text"])
    assert time.monotonic() - started >= 0.35
    first, second = embedding_server.embedding_requests
    assert second.time - first.time >= 0.35
    assert client.usage.retries == 1


def test_retry_after_as_http_date_and_the_cap():
    now = 1_000_000.0
    from email.utils import formatdate

    assert retry_after_seconds(formatdate(now + 7, usegmt=True), cap=60, now=now) == pytest.approx(7, abs=1)
    assert retry_after_seconds("3600", cap=30) == 30
    assert retry_after_seconds("soon", cap=30) is None and retry_after_seconds(None, cap=30) is None


def test_429_with_a_date_header_against_the_server(embedding_server):
    embedding_server.script("429-date:1")
    openai_client(embedding_server).embed_documents(["x"])
    assert len(embedding_server.embedding_requests) == 2


@pytest.mark.parametrize(
    "action", ["500", "502", "503", "drop", "slow:1.5", "malformed", "wrong_count", "wrong_dim", "nan", "missing_field"]
)
def test_transient_and_malformed_answers_are_retried(embedding_server, action):
    embedding_server.script(action, action)
    policy = RetryPolicy(max_retries=3, base_backoff=0.01, max_backoff=0.05, timeout=0.5)
    vectors = openai_client(embedding_server, policy=policy).embed_documents(["one", "two"])
    assert vectors.shape == (2, 1536)
    assert len(embedding_server.embedding_requests) == 3


@pytest.mark.parametrize(
    "action, problem",
    [
        ("500", "HTTP 500"),
        ("malformed", "malformed response"),
        ("wrong_count", "got 1 vectors for 2 inputs"),
        ("wrong_dim", "dimension 1535, expected 1536"),
        ("nan", "NaN"),
        ("missing_field", "no 'data'"),
        ("slow:1.5", "timed out"),
    ],
)
def test_at_most_three_retries_then_an_error_naming_provider_and_batch(embedding_server, action, problem):
    embedding_server.script(*[action] * 5)
    policy = RetryPolicy(max_retries=3, base_backoff=0.01, max_backoff=0.05, timeout=0.5)
    client = openai_client(embedding_server, policy=policy)
    with pytest.raises(EmbeddingBatchError) as err:
        client.embed_documents(["one", "two"], batch_label="2/5 of posts")
    message = str(err.value)
    assert "openai-compatible" in message and "batch 2/5 of posts" in message and problem in message
    assert len(embedding_server.embedding_requests) == 4  # first attempt + 3 retries


@pytest.mark.parametrize("status", ["401", "403"])
def test_auth_errors_stop_at_once_with_a_message_about_the_key(embedding_server, status):
    embedding_server.script(status)
    with pytest.raises(EmbeddingAuthError, match="API key"):
        openai_client(embedding_server).embed_documents(["x"])
    assert len(embedding_server.embedding_requests) == 1


def test_a_wrong_key_is_refused_by_a_server_that_checks_it():
    from .embedding_server import EmbeddingServer

    with EmbeddingServer(api_key="right") as server:
        with pytest.raises(EmbeddingAuthError, match="OPENROUTER_API_KEY"):
            openai_client(server).embed_documents(["x"])


def test_ollama_uses_nomic_task_prefixes_and_its_own_endpoint(embedding_server):
    client = OllamaEmbedder(host=embedding_server.url, policy=FAST)
    docs = client.embed_documents(["vlan tagging on a bridge"])
    query = client.embed_query("vlans")
    doc_request, query_request = embedding_server.embedding_requests
    assert doc_request.path == "/api/embed" and doc_request.json["model"] == "nomic-embed-text"
    assert doc_request.json["input"] == ["search_document: vlan tagging on a bridge"]
    assert query_request.json["input"] == ["search_query: vlans"]
    assert docs.shape == (1, 768) and query.shape == (768,)
    assert client.usage.tokens > 0


def test_ollama_health_reports_models_and_outages(embedding_server):
    health = ollama_health(embedding_server.url)
    assert health.online and health.has_model("nomic-embed-text")
    embedding_server.script_tags("500")
    assert not ollama_health(embedding_server.url).online
    assert not ollama_health("http://127.0.0.1:9", timeout=0.5).online


def test_ollama_unknown_model_fails_the_batch_without_retries(embedding_server):
    client = OllamaEmbedder(host=embedding_server.url, model="mxbai-embed-large", dimension=768, policy=FAST)
    with pytest.raises(EmbeddingBatchError, match="pulling"):
        client.embed_documents(["x"])
    assert len(embedding_server.embedding_requests) == 1


def test_rag_status_asks_ollama_once_and_auto_reuses_the_answer(embedding_server):
    """`rag status` probed Ollama twice (its own line, then `auto`'s choice): one probe is enough."""
    from rag_assets.config.settings import EmbedderSettings
    from rag_assets.embed.selection import service_status

    status = service_status(EmbedderSettings(name="auto"), environ={"OLLAMA_HOST": embedding_server.url})
    probes = [r for r in embedding_server.requests if r.method == "GET" and r.path.startswith("/api/tags")]
    assert status.ollama_online and len(probes) == 1
    assert status.selected in ("ollama", "local", "hashing")  # whichever auto chose, from that one probe
