"""Numeric parameters of every way in, fuzzed against a real server: zero, negative, NaN,
infinities, huge numbers and words give a 2xx with sane results or a 400 (an MCP tool error,
a CLI usage error with exit 2), never a 500 or a traceback.

The store is built with the hashing embedder, whose search profile weighs the vector list 0:
``bm25_weight=0`` there used to leave both weights 0 and divide by their sum.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rag_assets.config import load_config
from rag_assets.config.settings import LlmOllamaSettings, LlmSettings
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .chat_server import ChatServer
from .live_server import ServerThread
from .test_mcp import build_site

TIERS = ("public", "safe", "private")
FUSIONS = (None, "zscore", "rrf", "convex")
ODD_NUMBERS = [
    "0",
    "-0",
    "-1",
    "0.0",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "1e308",
    "-1e308",
    "1e309",
    "1" + "0" * 400,
    "1" + "0" * 5000,
    "abc",
    "",
    " ",
    "0x10",
    "1_0",
    "1e3",
    "2.5",
    "\u0663",
]
SEARCH_NUMBERS = ("k", "vector_weight", "bm25_weight", "min_score", "mmr", "per_doc", "candidates", "rrf_k", "sections")
QUESTION = "zigbee coordinator firmware"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def chat():
    with ChatServer() as server:
        yield server


@pytest.fixture(scope="module")
def api(site, chat):
    cfg = load_config(site, environ={})
    cfg = dataclasses.replace(
        cfg, llm=LlmSettings(name="ollama", max_retries=0, ollama=LlmOllamaSettings(host=chat.url))
    )
    with ServerThread(create_app(cfg, preload=False)) as running:
        yield running


def check_sane(response: httpx.Response, what: Any) -> dict:
    """A 2xx whose scores are all finite numbers, or a 400 with a message."""
    assert response.status_code in (200, 400), (what, response.status_code, response.text[:500])
    body = response.json()
    if response.status_code == 400:
        assert body["error"], what
        return body
    for hit in body.get("hits", []):
        for key in ("score", "relevance"):
            assert isinstance(hit[key], (int, float)) and math.isfinite(hit[key]), (what, hit)
    return body


# --- bm25_weight=0 and vector_weight=0: every route, fusion and tier ---------------------------


@pytest.mark.parametrize("route", ["/search", "/context"])
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("tier", TIERS)
def test_a_zero_weight_switches_its_list_off(api, route, fusion, tier):
    base = {"q": QUESTION, "tier": tier, "min_score": "0", **({"fusion": fusion} if fusion else {})}
    for zero in ("bm25_weight", "vector_weight"):
        r = api.get(route, **base, **{zero: "0"})
        assert r.status_code == 200, (zero, r.text[:500])
        other = "vector_weight" if zero == "bm25_weight" else "bm25_weight"
        alone = api.get(route, **base, **{zero: "0", other: "1"})
        assert alone.status_code == 200
        key = "hits" if route == "/search" else "citations"
        assert r.json()[key] == alone.json()[key] and r.json()[key], (zero, "a weight of 0 leaves the other list alone")
    both = api.get(route, **base, bm25_weight="0", vector_weight="0")
    assert both.status_code == 400 and "not both 0" in both.json()["error"]


# --- huge weights: only their ratio counts, so 1e308 is as valid as 1 -----------------------------


@pytest.mark.parametrize("route", ["/search", "/context"])
@pytest.mark.parametrize("fusion", FUSIONS)
@pytest.mark.parametrize("tier", TIERS)
def test_huge_weights_rank_as_their_ratio(api, route, fusion, tier):
    """1e308 for both weights ranks and scores exactly as 1 for both; 1e308 against 1 is a 200
    with finite scores. (zscore multiplied them first: inf, then NaN scores, a 400 saying
    "Out of range float values are not JSON compliant" and a traceback in the server's log.)"""
    base = {"q": QUESTION, "tier": tier, "min_score": "0", **({"fusion": fusion} if fusion else {})}
    key = "hits" if route == "/search" else "citations"
    one = api.get(route, **base, bm25_weight="1", vector_weight="1")
    huge = api.get(route, **base, bm25_weight="1e308", vector_weight="1e308")
    assert one.status_code == huge.status_code == 200, huge.text[:500]
    assert huge.json()[key] and huge.json()[key] == one.json()[key]
    for weights in ({"bm25_weight": "1e308", "vector_weight": "1"}, {"bm25_weight": "1", "vector_weight": "1.7e308"}):
        lopsided = api.get(route, **base, **weights)
        assert lopsided.status_code == 200, (weights, lopsided.text[:500])
        check_sane(lopsided, weights)


# --- every numeric query parameter of /search and /context --------------------------------------

odd_values = st.one_of(
    st.sampled_from(ODD_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    route=st.sampled_from(["/search", "/context"]),
    tier=st.sampled_from(TIERS),
    fusion=st.sampled_from(FUSIONS),
    mode=st.sampled_from(["hybrid", "vector", "bm25", "chunks"]),
    numbers=st.dictionaries(st.sampled_from(SEARCH_NUMBERS + ("budget",)), odd_values, min_size=1, max_size=3),
)
def test_odd_numbers_in_search_and_context_are_never_a_500(api, route, tier, fusion, mode, numbers):
    if route == "/search":
        numbers.pop("budget", None)
    params = {"q": QUESTION, "tier": tier, "mode": mode, **({"fusion": fusion} if fusion else {}), **numbers}
    check_sane(api.get(route, **params), params)


# --- JSON bodies of POST /ask and POST /embed ---------------------------------------------------

ODD_JSON = [
    b"0",
    b"-1",
    b"1e308",
    b"-1e308",
    b"1e309",
    b"1" + b"0" * 400,
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b'"0"',
    b'"nan"',
    b'"1e308"',
    b"true",
    b"null",
    b"[]",
    b"{}",
    b'"' + b"9" * 400 + b'"',
]


@pytest.mark.parametrize("value", ODD_JSON)
@pytest.mark.parametrize("key", ["question", "tier", "session", "collections", "stream"])
def test_odd_values_in_the_ask_body_are_a_400_or_an_answer(api, key, value):
    fields = {"question": b'"' + QUESTION.encode() + b'"', "tier": b'"public"', key: value}
    body = b"{" + b",".join(b'"%s": %s' % (k.encode(), v) for k, v in fields.items()) + b"}"
    r = api.post("/ask", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code in (200, 400), (key, value[:40], r.status_code, r.text[:300])
    if r.headers["content-type"].startswith("text/event-stream"):  # "stream": true
        assert "event: done" in r.text
    else:
        assert r.json().get("error") if r.status_code == 400 else r.json()["answer"]


@pytest.mark.parametrize("value", ODD_JSON)
@pytest.mark.parametrize("key", ["text", "model"])
def test_odd_values_in_the_embed_body_are_a_400_or_a_vector(api, key, value):
    fields = {"text": b'"vlan"', key: value}
    body = b"{" + b",".join(b'"%s": %s' % (k.encode(), v) for k, v in fields.items()) + b"}"
    r = api.post("/embed", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code in (200, 400, 409), (key, value[:40], r.status_code, r.text[:300])
    if r.status_code == 200:
        assert all(math.isfinite(x) for x in r.json()["vector"])
    else:
        assert r.json()["error"]


# --- MCP tool arguments, over /mcp with raw JSON-RPC (the SDK client would not send NaN) --------


class RawMcp:
    """A streamable-HTTP MCP session spoken by hand, so any JSON can go into a tool call."""

    HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.headers = dict(self.HEADERS)
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "0"},
            },
        }
        r = client.post("/mcp", json=init, headers=self.headers)
        assert r.status_code == 200, r.text
        if "mcp-session-id" in r.headers:
            self.headers["mcp-session-id"] = r.headers["mcp-session-id"]
        client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers)
        self.ids = 1

    def call(self, tool: str, arguments_json: bytes) -> dict:
        self.ids += 1
        raw = b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}' % (
            self.ids,
            tool.encode(),
            arguments_json,
        )
        r = self.client.post("/mcp", content=raw, headers=self.headers)
        assert r.status_code < 500, r.text[:300]
        if r.status_code != 200:
            return {"status": r.status_code}
        lines = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")] or [r.text]
        return json.loads(lines[-1])


MCP_NUMBERS = [
    ("search", "k"),
    ("search", "min_relevance"),
    ("get_context", "k"),
    ("get_context", "budget"),
    ("get_context", "min_relevance"),
]


def test_odd_numbers_in_mcp_tool_arguments_are_tool_errors_or_results(api):
    mcp = RawMcp(api.client)
    for tool, name in MCP_NUMBERS:
        for value in ODD_JSON + [b"5.0", b"0.5", b"20.0"]:
            for tier in TIERS:
                args = b'{"query": "%s", "tier": "%s", "%s": %s}' % (
                    QUESTION.encode(),
                    tier.encode(),
                    name.encode(),
                    value,
                )
                answer = mcp.call(tool, args)
                if "status" in answer:  # refused before it reached the server: a 4xx, not a 500
                    continue
                if "error" in answer:  # a protocol error (e.g. JSON the SDK cannot parse): a message, no crash
                    assert answer["error"]["message"], answer
                    continue
                result = answer["result"]
                text = result["content"][0]["text"]
                assert "internal error" not in text, (tool, name, value, text)
                if not result.get("isError"):
                    assert isinstance(json.loads(text), dict)


# --- CLI flags --------------------------------------------------------------------------------


CLI_NUMBERS = ["-k", "--vector-weight", "--bm25-weight", "--min-score", "--mmr", "--per-doc", "--link-boost"]


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "-inf", "1e308", "1" + "0" * 400, "abc"])
@pytest.mark.parametrize("flag", CLI_NUMBERS + ["--budget"])
def test_odd_numbers_on_the_command_line_are_a_usage_error_or_a_result(site, capsys, flag, value):
    command = "context" if flag == "--budget" else "search"
    try:
        code = rag([command, QUESTION, "--config", str(site), "--tier", "safe", f"{flag}={value}", "--json"])
    except SystemExit as exc:  # argparse: the flag and what it accepts, exit 2
        code = exc.code
    out, err = capsys.readouterr()
    assert code in (0, 2), (flag, value, code, err[-500:])
    assert "Traceback" not in err
    if code == 2:
        assert flag.lstrip("-").split("-")[0] in err or "must be" in err or "rag:" in err, err
    else:
        json.loads(out)


def test_rag_search_with_bm25_weight_0_searches_the_vectors_alone(site, capsys):
    assert rag(["search", QUESTION, "--config", str(site), "--bm25-weight", "0", "--min-score", "0", "--json"]) == 0
    zero = json.loads(capsys.readouterr().out)
    assert (
        rag(
            [
                "search",
                QUESTION,
                "--config",
                str(site),
                "--bm25-weight",
                "0",
                "--vector-weight",
                "1",
                "--min-score",
                "0",
                "--json",
            ]
        )
        == 0
    )
    alone = json.loads(capsys.readouterr().out)
    assert zero["hits"] and [h["id"] for h in zero["hits"]] == [h["id"] for h in alone["hits"]]


def test_rag_search_with_huge_weights_scores_as_with_their_ratio(site, capsys):
    """The command line too: finite scores (json.loads reads NaN, so they are compared)."""

    def hits(weight: str) -> list:
        assert (
            rag(
                [
                    "search",
                    QUESTION,
                    "--config",
                    str(site),
                    "--tier",
                    "safe",
                    "--fusion",
                    "zscore",
                    "--min-score",
                    "0",
                    "--bm25-weight",
                    weight,
                    "--vector-weight",
                    weight,
                    "--json",
                ]
            )
            == 0
        )
        return json.loads(capsys.readouterr().out)["hits"]

    huge, one = hits("1e308"), hits("1")
    assert huge and all(math.isfinite(h["score"]) for h in huge)
    assert [(h["id"], h["score"]) for h in huge] == [(h["id"], h["score"]) for h in one]
