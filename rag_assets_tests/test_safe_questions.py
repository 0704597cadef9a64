"""A secret or a hostname typed into a Safe-tier question never leaves raw: not to the query
embedder, the reranker or the chat model, and not into the Safe tier's ``search_log``,
``answer_log`` or a session's history. Every way in: the CLI, HTTP and MCP; the embedding
provider, the reranker and the chat model are recording servers on 127.0.0.1."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.index import tier_logs
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .chat_server import ChatServer
from .conftest import REPO_ROOT, instance_for_test
from .live_server import ServerThread
from .rerank_server import RerankServer
from .test_tiers import all_bytes

PASSWORD = "Zq8!vLm2Pw0rd"
ACCESS_KEY = "AKIAQ3EGRZ7XK2MBVN4P"
HOST = "pve01.home.arpa"  # the identity map's [HOST:hv-a]
RAW = (PASSWORD, ACCESS_KEY, HOST, "pve01")
QUESTION = f"my password is {PASSWORD} and the key {ACCESS_KEY}: how does restic back up {HOST} offsite?"

SAFE_NOTE = """---
title: Offsite backups
---
# Offsite backups

How does restic back up pve01.home.arpa offsite? My password is Hk3#uQ8wLp2Zr and the key AKIAZ7K2MQ3EGRVN4XBP
(the build redacts both): restic backs up pve01.home.arpa offsite every night; prune keeps thirty daily snapshots.
"""
# Other notes, so BM25 and the relevance model see a restic note that stands out among several.
OTHER_NOTES = {
    f"vaults/homelab/{topic.split()[0].lower()}.md": f"---\ntitle: {topic}\n---\n# {topic}\n\n{body}\n"
    for topic, body in [
        ("Zigbee coordinator", "The Sonoff dongle runs the zigbee2mqtt coordinator firmware, flashed with cc2538-bsl."),
        (
            "Grafana dashboards",
            "Grafana shows the node exporter panels; alerts go to the chat room when disks fill up.",
        ),
        ("Wireguard tunnel", "The router forwards port 51820 to the wireguard peer; keys rotate every spring."),
        ("Kubernetes upgrades", "k3s is upgraded one node at a time after draining it; etcd snapshots come first."),
        ("Garden irrigation", "The drip lines water the tomatoes at dawn; the valve controller runs on a timer."),
    ]
}
PUBLIC_NOTE = "---\ntitle: Restic\n---\n# Restic\n\nRestic makes encrypted, deduplicated backups.\n"
PRIVATE_NOTE = "---\ntitle: Diary\n---\n# Diary\n\nRestic backs up the diary too, offsite, every night.\n"


@pytest.fixture(scope="module")
def models():
    """(chat + Ollama embeddings, reranker): every request they get is recorded."""
    with ChatServer() as chat, RerankServer() as judge:
        yield chat, judge


@pytest.fixture(scope="module")
def site(tmp_path_factory, models) -> Path:
    chat, judge = models
    root = tmp_path_factory.mktemp("safe-questions")
    for rel, text in {
        "content/docs/restic.md": PUBLIC_NOTE,
        "vaults/homelab/backups.md": SAFE_NOTE,
        "vaults/diary/diary.md": PRIVATE_NOTE,
        **OTHER_NOTES,
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    config = root / "rag.yaml"
    config.write_text(
        f"content_dir: content\noutput_dir: out\nidentity_map: '{REPO_ROOT / 'identity_map.json'}'\n"
        f"embedder: {{name: ollama, ollama: {{host: '{chat.url}'}}}}\nprivate_tier: {{embedder: hashing}}\n"
        f"llm: {{name: ollama, max_retries: 0, ollama: {{host: '{chat.url}'}}}}\n"
        f"reranker: {{name: http, base_url: '{judge.url}', model: judge, max_retries: 0}}\n"
        "vaults:\n  - {name: homelab, path: vaults/homelab, tier: safe}\n  - {name: diary, path: vaults/diary, tier: private}\n"
        # The Private tier embeds with the hashing model, whose relevance model (refit with the
        # title feature) puts this question, full of words no note holds, at 0.477: below the
        # answer threshold. The weight lifts it over, so that the private test reaches the model.
        "weights: {homelab: 1.5}\n"
    )
    with instance_for_test() as instance:
        outcome = run_build(load_config(config, environ={}), instance)
    assert outcome.success, outcome.error or outcome.failed_checks
    return config


@pytest.fixture
def recorded(models):
    """The recording servers, emptied of the build's requests; checked for raw values after the test."""
    chat, judge = models
    chat.reset()
    judge.reset()
    yield chat, judge


def sent(chat: ChatServer, judge: RerankServer) -> bytes:
    return b"\n".join(r.raw_body for r in [*chat.requests, *judge.requests])


def assert_nothing_raw(site: Path, chat: ChatServer, judge: RerankServer) -> None:
    """Nothing raw went out or into the Safe store, and the sanitised question did go everywhere."""
    wire = sent(chat, judge)
    for value in RAW:
        assert value.encode() not in wire, f"{value} reached a provider"
    assert b"[REDACTED:" in wire and b"[HOST:hv-a]" in wire  # the sanitised question did go out
    assert chat.embedding_requests and judge.rerank_requests
    store = load_config(site, environ={}).safe_store_path
    for value in RAW:
        assert value.encode() not in all_bytes(store), f"{value} was logged in the Safe store"


def log_rows(site: Path, table: str, column: str) -> list[str]:
    store = load_config(site, environ={}).safe_store_path
    with closing(sqlite3.connect(tier_logs.log_path(store))) as conn:
        return [row[0] for row in conn.execute(f"SELECT {column} FROM {table}")]


def test_the_cli_sanitises_safe_tier_questions(site, recorded, capsys):
    chat, judge = recorded
    config = ["--config", str(site), "--tier", "safe"]
    assert rag(["search", QUESTION, *config, "--min-score", "0", "--json"]) == 0
    assert "[REDACTED:" in json.loads(capsys.readouterr().out)["query"]
    assert rag(["context", QUESTION, *config, "--min-score", "0"]) == 0
    for session in (None, "backups", "backups"):  # the second turn reads the first from the history
        assert rag(["ask", QUESTION, *config, "--json", *(["--session", session] if session else [])]) == 0
    capsys.readouterr()
    assert len(chat.chat_requests) >= 3
    assert_nothing_raw(site, chat, judge)
    assert any("[REDACTED:" in q for q in log_rows(site, "search_log", "query"))
    assert any("[REDACTED:" in q for q in log_rows(site, "answer_log", "question"))


def test_http_sanitises_safe_tier_questions(site, recorded):
    chat, judge = recorded
    cfg = load_config(site, environ={})
    with ServerThread(create_app(cfg, preload=False)) as api:
        for route in ("/search", "/context"):
            r = api.get(route, q=QUESTION, tier="safe", min_score="0")
            assert r.status_code == 200 and PASSWORD not in r.text, r.text[:300]
        for body in (
            {"question": QUESTION, "tier": "safe", "session": "web"},
            {"question": QUESTION, "tier": "safe", "session": "web", "stream": True},
        ):
            r = api.post("/ask", json=body)
            assert r.status_code == 200 and PASSWORD not in r.text, r.text[:300]
    assert len(chat.chat_requests) >= 2
    assert_nothing_raw(site, chat, judge)


def test_mcp_sanitises_safe_tier_questions(site, recorded):
    chat, judge = recorded
    cfg = load_config(site, environ={})

    async def calls(url: str) -> list[str]:
        async with streamable_http_client(f"{url}/mcp") as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                texts = []
                for tool, args in (
                    ("search", {"query": QUESTION, "min_relevance": 0}),
                    ("get_context", {"query": QUESTION, "min_relevance": 0}),
                    ("ask", {"question": QUESTION}),
                ):
                    result = await session.call_tool(tool, {**args, "tier": "safe"})
                    assert not result.is_error, result.content[0].text
                    texts.append(result.content[0].text)
                return texts

    with ServerThread(create_app(cfg, preload=False)) as api:
        texts = anyio.run(calls, api.url)
    assert all(PASSWORD not in t for t in texts)
    assert chat.chat_requests
    assert_nothing_raw(site, chat, judge)


def test_private_tier_questions_stay_raw_and_local(site, recorded, capsys):
    chat, _ = recorded
    assert rag(["ask", QUESTION, "--config", str(site), "--tier", "private", "--json"]) == 0
    capsys.readouterr()
    assert chat.chat_requests and PASSWORD.encode() in chat.chat_requests[-1].raw_body  # the local model, as before
