"""``POST /embed`` of ``rag serve``: the Public tier's query vector for rag-search.js, and the
browser's fallback to BM25 alone when the endpoint cannot be reached."""

from __future__ import annotations

import dataclasses
import socket

import dagster as dg
import numpy as np
import pytest

from rag_assets.defs.runner import run_build
from rag_assets.embed.hashing import MODEL_NAME, HashingEmbedder
from rag_assets.serve.http import create_app

from .browser import open_search, static_server
from .conftest import PROXMOX_POST
from .live_server import ServerThread

SITE = "https://site.example"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from rag_assets.config import load_config

    root = tmp_path_factory.mktemp("embed")
    content = root / "content"
    (content / "posts").mkdir(parents=True)
    (content / "posts" / "proxmox.md").write_text(PROXMOX_POST)
    (content / "posts" / "backup.md").write_text("---\ntitle: Backups\n---\nZFS snapshots sent to another box.\n")
    cfg = load_config(None, content_dir=content, output_dir=root / "out", embedder="hashing", environ={})
    # CORS is closed by default: a site calling /embed from another origin is listed in serve.cors_origins.
    cfg = dataclasses.replace(cfg, serve=dataclasses.replace(cfg.serve, cors_origins=(SITE,)))
    assert run_build(cfg, dg.DagsterInstance.ephemeral(), vaults=[]).success
    with ServerThread(create_app(cfg, preload=False)) as running:
        yield cfg, running


def test_embed_returns_the_public_tier_query_vector(served):
    _, server = served
    answer = server.post("/embed", json={"text": "vlan aware bridge", "model": MODEL_NAME}, headers={"Origin": SITE})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["model"] == MODEL_NAME and body["dimension"] == 384
    assert np.array_equal(
        np.array(body["vector"], dtype=np.float32), HashingEmbedder(384).embed_query("vlan aware bridge")
    )
    assert answer.headers["access-control-allow-origin"] == SITE


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"text": ""}, 400, "text"),
        ({"text": "x" * 5000}, 400, "too long"),
        ({"text": "x", "tier": "private"}, 400, "nothing else"),
        ({"text": 3}, 400, "text"),
        ([1, 2], 400, "JSON object"),
        ({"text": "vlan", "model": "text-embedding-3-small"}, 409, "reload"),
    ],
)
def test_embed_refuses_bad_requests_with_a_json_error(served, body, status, says):
    _, server = served
    answer = server.post("/embed", json=body)
    assert answer.status_code == status
    assert says in answer.json()["error"]


def test_embed_answers_cors_preflight_and_only_post(served):
    _, server = served
    preflight = server.client.options("/embed", headers={"Origin": SITE, "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 200  # Starlette's CORSMiddleware answers it (the route's own 204 is gone)
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert server.get("/embed").status_code == 405
    assert (
        server.client.post("/embed", content=b"not json", headers={"Content-Type": "application/json"}).status_code
        == 400
    )
    assert server.client.post("/embed", content=b'{"text": "vlan"}').status_code == 415  # JSON only (origin_check)


def test_browser_uses_the_endpoint_and_falls_back_to_bm25_when_it_is_down(served, page):
    cfg, server = served
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/embed"
    with static_server(cfg.public_dir) as url:
        # The site is another origin than the server: it must be listed in serve.cors_origins
        # (the module's server, which does not list it, refuses it: 403, so BM25 alone).
        listed = dataclasses.replace(cfg, serve=dataclasses.replace(cfg.serve, cors_origins=(url,)))
        with ServerThread(create_app(listed, preload=False)) as allowing:
            open_search(page, url)
            results = page.evaluate(
                """async ([live, dead, unlisted]) => {
                    const { RagSearch } = await import("./rag-search.js");
                    const local = await RagSearch.open("./");
                    const remote = await RagSearch.open("./", { embedUrl: live, queryEmbedding: "endpoint" });
                    const down = await RagSearch.open("./", { embedUrl: dead, queryEmbedding: "endpoint" });
                    const refused = await RagSearch.open("./", { embedUrl: unlisted, queryEmbedding: "endpoint" });
                    const q = "vlan aware bridge";
                    const ids = (r) => [r.mode, r.hits.map((h) => [h.id, h.vectorScore])];
                    return [ids(await local.search(q)), ids(await remote.search(q)), ids(await down.search(q)),
                            ids(await refused.search(q))];
                }""",
                [allowing.url + "/embed", dead, server.url + "/embed"],
            )
    local, remote, down, refused = results
    assert refused[0] == "bm25"
    assert local[0] == remote[0] == "hybrid"
    assert [h[0] for h in remote[1]] == [h[0] for h in local[1]]
    assert np.allclose([h[1] for h in remote[1]], [h[1] for h in local[1]], atol=1e-6)
    assert down[0] == "bm25" and all(h[1] is None for h in down[1])
