"""The scriptable embedding test server, exercised over real HTTP with httpx."""

from __future__ import annotations

import base64
import email.utils
import json
import math
import threading
import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from rag_assets_tests.embedding_server import EmbeddingServer

MODEL = "nomic-embed-text"


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer(dimension=32, ollama_dimension=16) as srv:
        yield srv


@pytest.fixture
def client(server: EmbeddingServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=5) as c:
        yield c


def openai(client: httpx.Client, inputs: str | list[str], **extra) -> httpx.Response:
    return client.post("/v1/embeddings", json={"model": "text-embedding-3-small", "input": inputs, **extra})


def ollama(client: httpx.Client, inputs: str | list[str], model: str = MODEL) -> httpx.Response:
    return client.post("/api/embed", json={"model": model, "input": inputs})


# ------------------------------------------------------------------ normal responses
def test_openai_shape_usage_and_vectors(server, client):
    texts = ["VLAN on Proxmox", "a bridge that is vlan aware", ""]
    r = openai(client, texts)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["object"] == "list" and body["model"] == "text-embedding-3-small"
    assert body["usage"] == {"prompt_tokens": 9, "total_tokens": 9}
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 32 for d in body["data"])
    for text, d in zip(texts, body["data"]):
        assert d["embedding"] == server.vector_for(text, 32)
        assert math.isclose(np.linalg.norm(d["embedding"]), 1.0, rel_tol=1e-5)


def test_openai_single_string_dimensions_and_alias_path(server, client):
    r = client.post("/embeddings", json={"model": "m", "input": "hello world", "dimensions": 8})
    assert r.status_code == 200
    data = r.json()["data"]
    assert len(data) == 1 and data[0]["embedding"] == server.vector_for("hello world", 8)
    assert r.json()["usage"]["total_tokens"] == 2


def test_openai_base64_encoding(server, client):
    r = openai(client, ["alpha beta"], encoding_format="base64")
    raw = base64.b64decode(r.json()["data"][0]["embedding"])
    assert np.frombuffer(raw, dtype="<f4").tolist() == server.vector_for("alpha beta", 32)


def test_ollama_shape_and_counts(server, client):
    r = ollama(client, ["one two three", "four"])
    assert r.status_code == 200
    body = r.json()
    assert body["model"] == MODEL and body["prompt_eval_count"] == 4
    assert isinstance(body["total_duration"], int) and isinstance(body["load_duration"], int)
    assert body["embeddings"] == [server.vector_for("one two three", 16), server.vector_for("four", 16)]
    assert ollama(client, "solo", model=f"{MODEL}:latest").json()["embeddings"] == [server.vector_for("solo", 16)]


def test_same_text_same_vector_across_batches_and_similar_texts_are_close(server, client):
    alone = openai(client, "proxmox vlan bridge").json()["data"][0]["embedding"]
    batch = openai(client, ["other", "stuff here", "proxmox vlan bridge"]).json()["data"][2]["embedding"]
    assert alone == batch
    v = np.array(EmbeddingServer.vector_for("proxmox vlan bridge setup", 256))
    near = np.array(server.vector_for("proxmox vlan bridge", 256))
    far = np.array(server.vector_for("sourdough bread recipe", 256))
    assert v @ near > 0.7 > abs(v @ far)


# ------------------------------------------------------------------ scripted actions
def test_script_is_consumed_in_order_across_endpoints_then_falls_back_to_ok(server, client):
    server.script("500", "502", "503", "ok")
    assert server.pending_actions == 4
    assert openai(client, "a").status_code == 500
    assert ollama(client, "a").status_code == 502
    assert openai(client, "a").status_code == 503
    assert [openai(client, "a").status_code for _ in range(3)] == [200, 200, 200]
    assert server.pending_actions == 0


def test_error_bodies_follow_each_protocol(server, client):
    server.script("500", "500")
    assert openai(client, "a").json()["error"]["type"] == "server_error"
    assert isinstance(ollama(client, "a").json()["error"], str)


def test_429_with_seconds_and_default(server, client):
    server.script("429:2", "429")
    r = openai(client, "a")
    assert r.status_code == 429 and r.headers["retry-after"] == "2" and "error" in r.json()
    assert openai(client, "a").headers["retry-after"] == "1"


def test_429_with_http_date(server, client):
    server.script("429-date:30")
    before = time.time()
    r = ollama(client, "a")
    after = time.time()
    assert r.status_code == 429
    when = email.utils.parsedate_to_datetime(r.headers["retry-after"])
    assert r.headers["retry-after"].endswith("GMT")
    # 30 s after the moment the server answered, which lies between before and after (an
    # HTTP-date has whole seconds: 1 s either side).
    assert before + 30 - 1 <= when.timestamp() <= after + 30 + 1


def test_slow_exceeds_client_timeout(server, client):
    server.script("slow:0.5")
    # The ReadTimeout is the proof: the client gave up on the 0.1 s read before the answer came.
    with pytest.raises(httpx.ReadTimeout):
        client.post("/v1/embeddings", json={"model": "m", "input": "a"}, timeout=0.1)
    assert openai(client, "a").status_code == 200  # the next request is served normally


def test_slow_then_responds(server, client):
    server.script("slow:0.2")
    start = time.monotonic()
    assert ollama(client, "a").status_code == 200
    assert time.monotonic() - start >= 0.2


def test_malformed_body(server, client):
    server.script("malformed", "malformed")
    for r in (openai(client, "a"), ollama(client, "a")):
        assert r.status_code == 200
        with pytest.raises(json.JSONDecodeError):
            r.json()


def test_wrong_count_and_wrong_dim(server, client):
    server.script("wrong_count", "wrong_count", "wrong_dim", "wrong_dim")
    assert len(openai(client, ["a", "b", "c"]).json()["data"]) == 2
    assert ollama(client, "a").json()["embeddings"] == []
    assert {len(d["embedding"]) for d in openai(client, ["a", "b"]).json()["data"]} == {31}
    assert {len(v) for v in ollama(client, ["a", "b"]).json()["embeddings"]} == {15}


def test_nan_is_serialised_as_bare_token(server, client):
    server.script("nan")
    r = openai(client, ["a", "b"])
    assert r.status_code == 200 and b"NaN" in r.content
    vectors = [d["embedding"] for d in r.json()["data"]]
    assert math.isnan(vectors[0][0]) and not any(math.isnan(x) for x in vectors[1])


@pytest.mark.parametrize("status", [401, 403])
def test_scripted_auth_errors(server, client, status):
    server.script(str(status))
    r = openai(client, "a")
    assert r.status_code == status and r.json()["error"]["message"]


def test_drop_is_a_transport_error_and_server_keeps_serving(server, client):
    server.script("drop")
    with pytest.raises(httpx.TransportError):
        openai(client, "a")
    assert openai(client, "a").status_code == 200


def test_missing_field(server, client):
    server.script("missing_field", "missing_field")
    body = openai(client, "a").json()
    assert "data" not in body and body["usage"]["total_tokens"] == 1
    assert "embeddings" not in ollama(client, "a").json()


def test_unknown_actions_fail_at_script_time(server):
    for bad in ("teapot", "slow:x", "500:3", "200", "slow:-1"):
        with pytest.raises(ValueError):
            server.script(bad)
    with pytest.raises(ValueError):
        server.script_tags("nan")
    assert server.pending_actions == 0


# ------------------------------------------------------------------ auth, models, tags, routing
def test_api_key_enforcement():
    with EmbeddingServer(dimension=8, api_key="sk-test") as srv, httpx.Client(base_url=srv.url) as c:
        payload = {"model": "m", "input": "x"}
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            r = c.post("/v1/embeddings", json=payload, headers=headers)
            assert r.status_code == 401
            assert r.json() == {"error": {"message": "Invalid API key", "type": "invalid_request_error", "code": 401}}
        ok = c.post("/v1/embeddings", json=payload, headers={"Authorization": "Bearer sk-test"})
        assert ok.status_code == 200
        assert c.post("/api/embed", json={"model": MODEL, "input": "x"}).status_code == 200  # Ollama has no keys


def test_unknown_ollama_model_is_404(client):
    r = ollama(client, "a", model="all-minilm")
    assert r.status_code == 404
    assert r.json() == {"error": 'model "all-minilm" not found, try pulling it first'}


def test_tags_lists_models_and_ignores_the_embedding_script(server, client):
    server.script("500")
    body = client.get("/api/tags").json()
    assert [m["name"] for m in body["models"]] == ["nomic-embed-text:latest"]
    assert body["models"][0]["size"] == 274302450 and body["models"][0]["details"]
    assert server.pending_actions == 1


def test_tags_script(server, client):
    server.script_tags("500", "down")
    assert client.get("/api/tags").status_code == 500
    with pytest.raises(httpx.TransportError):
        client.get("/api/tags")
    assert client.get("/api/tags").status_code == 200


def test_bad_requests_get_json_errors_and_never_crash_the_server(server, client):
    assert client.post("/v1/embeddings", content=b"{not json").status_code == 400
    assert client.post("/api/embed", content=b"\xff\xfe").json()["error"]
    assert openai(client, 42).status_code == 400
    assert openai(client, []).status_code == 400
    assert openai(client, "a", dimensions=0).status_code == 400
    assert client.post("/v1/embeddings", json={"input": "a"}).status_code == 400
    assert client.get("/v1/embeddings").status_code == 404
    assert client.post("/nope", json={}).json()["error"]
    assert openai(client, "a").status_code == 200
    assert server.errors == []


# ------------------------------------------------------------------ recording and lifecycle
def test_requests_are_recorded_with_parsed_json(server, client):
    openai(client, ["a b"], dimensions=4)
    client.get("/api/tags")
    ollama(client, "c")
    reqs = server.requests
    assert [(r.method, r.path) for r in reqs] == [
        ("POST", "/v1/embeddings"),
        ("GET", "/api/tags"),
        ("POST", "/api/embed"),
    ]
    assert reqs[0].json == {"model": "text-embedding-3-small", "input": ["a b"], "dimensions": 4}
    assert reqs[0].headers["content-type"] == "application/json" and json.loads(reqs[0].raw_body) == reqs[0].json
    assert reqs[1].json is None and reqs[1].raw_body == b""
    assert reqs[0].time <= reqs[1].time <= reqs[2].time
    assert [r.path for r in server.embedding_requests] == ["/v1/embeddings", "/api/embed"]
    server.script("500")
    server.reset()
    assert server.requests == [] and server.pending_actions == 0


SLEEPER_SECONDS = 60  # what stop() must not wait for


def test_stop_returns_promptly_while_a_slow_handler_sleeps():
    srv = EmbeddingServer(dimension=8).start()
    srv.script(f"slow:{SLEEPER_SECONDS}")
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(
                httpx.post(srv.url + "/v1/embeddings", json={"model": "m", "input": "x"}, timeout=SLEEPER_SECONDS + 10)
            )
        except httpx.HTTPError as exc:
            outcome.append(exc)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    srv.wait_for_requests(1, timeout=SLEEPER_SECONDS / 2)
    srv.stop()
    # Had stop() waited for the sleeper, the client would have got its answer after 60 s; a
    # transport error before then shows it hung up instead (no clock needed to prove it).
    t.join(SLEEPER_SECONDS / 2)
    assert outcome and isinstance(outcome[0], httpx.TransportError)  # the sleeper hung up instead of answering
    assert not isinstance(outcome[0], httpx.TimeoutException)  # hung up on, not given up on
    srv.stop()  # idempotent
    with pytest.raises(RuntimeError):
        _ = srv.url
