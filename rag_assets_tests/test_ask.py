"""`rag ask` and POST /ask end to end: the real build of the sample, the real server (uvicorn),
the loopback chat server as the model. Safe-tier secrets never reach the model; Private-tier
text reaches only a local one, directly, past any proxy."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rag_assets.config.settings import LlmOllamaSettings, LlmOpenAISettings, LlmSettings
from rag_assets.defs.runner import run_build
from rag_assets.index import tier_logs
from rag_assets.serve.ask_routes import MAX_QUESTION_CHARS
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .chat_server import ChatServer
from .conftest import REPO_ROOT, SAMPLE_CONTENT, instance_for_test
from .live_server import ServerThread
from .test_egress import RecordingServer
from .test_tiers import IDENTITIES, PLANTED, SECRETS, sample_config

PUBLIC_QUESTION = "how does restic prune the offsite backup snapshots?"
SAFE_QUESTION = "which credentials does restic use for the offsite backups to the bucket?"
NONSENSE = "zxqv blorptangle wibbleflux quandorium"
CITATION_KEYS = {"n", "id", "collection", "slug", "title", "headingPath"}
SOURCE_KEYS = CITATION_KEYS | {"anchor", "url", "relevance", "text"}
JSON_KEYS = {"answer", "citations", "model", "usage", "abstained", "citationCheck", "retrieval"}
DONE_KEYS = {"answer", "citations", "model", "usage", "abstained", "citationCheck", "latencyMs"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    cfg = sample_config(tmp_path_factory.mktemp("ask"))
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
    assert outcome.success, outcome.error or outcome.failed_checks
    return cfg


@pytest.fixture
def chat():
    with ChatServer() as server:
        yield server


def with_llm(cfg, url: str, name: str = "ollama"):
    return dataclasses.replace(cfg, llm=LlmSettings(name=name, ollama=LlmOllamaSettings(host=url)))


def write_config(cfg, path: Path, llm: str) -> list[str]:
    """A rag.yaml for the built sample with this ``llm:`` section; the CLI arguments naming it."""
    vaults = "".join(f"  - {{name: {v.name}, path: '{v.path}', tier: {v.tier}}}\n" for v in cfg.vaults)
    path.write_text(
        f"content_dir: '{SAMPLE_CONTENT}'\noutput_dir: '{cfg.output_dir}'\nidentity_map: '{REPO_ROOT / 'identity_map.json'}'\n"
        f"vaults:\n{vaults}llm: {llm}\n"
    )
    return ["--config", str(path)]


def ask_json(capsys, *args) -> tuple[int, dict]:
    code = rag(["ask", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def answer_rows(path: Path, session: str | None = None) -> list[tuple]:
    """The answer_log rows of the store at ``path`` (in its log file beside it)."""
    with closing(sqlite3.connect(tier_logs.log_path(path))) as conn:
        return conn.execute(
            "SELECT question, query, abstained, model, citation_problems, error FROM answer_log"
            " WHERE session IS ? ORDER BY id",
            (session,),
        ).fetchall()


# --- rag ask --------------------------------------------------------------------------------------


def test_rag_ask_streams_a_cited_answer_with_the_sources_beneath(built, chat, tmp_path, capsys):
    config = write_config(built, tmp_path / "rag.yaml", f"{{name: ollama, ollama: {{host: '{chat.url}'}}}}")
    assert rag(["ask", *PUBLIC_QUESTION.split(), *config]) == 0
    out, err = capsys.readouterr()
    answer, _, sources = out.partition("\n\nSources:\n")
    assert answer.startswith("According to the notes, ") and answer.endswith("[1].")
    assert " *[1] " in sources and "posts/restic-offsite-backups" in out
    assert "llama3.2" in err and "cited: 1 of" in err
    prompt = chat.prompts()[0]
    assert f"Question: {PUBLIC_QUESTION}" in prompt and "\n\n[1] " in prompt
    assert chat.chat_requests[0].json["stream"] is True


def test_rag_ask_json_has_the_documented_shape_and_is_logged(built, chat, tmp_path, capsys):
    config = write_config(built, tmp_path / "rag.yaml", f"{{name: ollama, ollama: {{host: '{chat.url}'}}}}")
    chat.reply("text:Restic keeps thirty daily snapshots [2] and prunes weekly [1][2].")
    code, body = ask_json(capsys, PUBLIC_QUESTION, *config)
    assert code == 0 and set(body) == JSON_KEYS
    assert body["answer"] == "Restic keeps thirty daily snapshots [2] and prunes weekly [1][2]."
    assert [c["n"] for c in body["citations"]] == [2, 1] and all(set(c) == CITATION_KEYS for c in body["citations"])
    assert body["model"] == "llama3.2" and body["abstained"] is False
    assert body["citationCheck"] == {"unknown": [], "uncited": False}
    assert body["usage"]["completionTokens"] == 10 and body["usage"]["promptTokens"] > 50
    retrieval = body["retrieval"]
    assert retrieval["query"] == PUBLIC_QUESTION and retrieval["tier"] == "public"
    assert all(set(s) == SOURCE_KEYS for s in retrieval["sources"]) and len(retrieval["sources"]) >= 2
    first = retrieval["sources"][0]
    assert first["relevance"] >= retrieval["minScore"] and first["text"] in chat.prompts()[0]
    assert body["citations"][1]["id"] == first["id"]
    rows = answer_rows(built.public_store_path)
    assert rows[-1][:4] == (PUBLIC_QUESTION, PUBLIC_QUESTION, 0, "llama3.2") and rows[-1][4] == "[]"
    assert rag(["log", *config, "--json"]) == 0
    logged = json.loads(capsys.readouterr().out)["answers"]
    assert logged["total"] >= 1 and logged["recent"][0]["question"] == PUBLIC_QUESTION


def test_wrong_and_missing_citations_are_reported(built, chat, tmp_path, capsys):
    config = write_config(built, tmp_path / "rag.yaml", f"{{name: ollama, ollama: {{host: '{chat.url}'}}}}")
    chat.reply("text:Restic prunes old snapshots [9].")
    code, body = ask_json(capsys, PUBLIC_QUESTION, *config)
    assert code == 0 and body["citationCheck"] == {"unknown": [9], "uncited": True} and body["citations"] == []
    chat.reply("text:Restic prunes old snapshots.")
    assert rag(["ask", PUBLIC_QUESTION, *config]) == 0
    err = capsys.readouterr().err
    assert "cites no source" in err
    problems = [json.loads(r[4]) for r in answer_rows(built.public_store_path)[-2:]]
    assert problems == [["cites [9], which is not a source", "cites no source"], ["cites no source"]]


def test_a_question_the_notes_do_not_answer_abstains_without_a_model_call(built, chat, tmp_path, capsys):
    config = write_config(built, tmp_path / "rag.yaml", f"{{name: ollama, ollama: {{host: '{chat.url}'}}}}")
    code, body = ask_json(capsys, NONSENSE, *config)
    assert code == 0 and body["abstained"] is True and body["model"] is None and body["citations"] == []
    assert body["answer"] == "Nothing in these notes answers that."
    assert body["retrieval"]["sources"] and "relevance threshold" in body["retrieval"]["message"]
    assert rag(["ask", NONSENSE, *config]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Nothing in these notes answers that.") and "Nearest pages:" in out
    assert chat.chat_requests == []


def test_without_a_chat_model_the_sources_are_printed_with_the_reason(built, tmp_path, capsys):
    config = write_config(built, tmp_path / "rag.yaml", "none")
    assert rag(["ask", PUBLIC_QUESTION, *config]) == 1
    out, err = capsys.readouterr()
    assert "Sources found:" in out and "posts/restic-offsite-backups" in out
    assert "no answer: llm.name is none" in err
    config = write_config(built, tmp_path / "rag.yaml", "{name: ollama, ollama: {host: 'http://127.0.0.1:9'}}")
    code, body = ask_json(capsys, PUBLIC_QUESTION, *config)
    assert code == 1 and body["status"] == 502 and "connection error" in body["error"]
    assert body["retrieval"]["sources"]


def test_a_failing_model_still_lists_the_sources(built, chat, tmp_path, capsys):
    config = write_config(
        built, tmp_path / "rag.yaml", f"{{name: ollama, max_retries: 1, backoff: 0, ollama: {{host: '{chat.url}'}}}}"
    )
    chat.reply("500", "503")
    assert rag(["ask", PUBLIC_QUESTION, *config]) == 1
    out, err = capsys.readouterr()
    assert "[1]" in out and "posts/restic-offsite-backups" in out and "the answer failed" in err and "HTTP 503" in err
    assert len(chat.chat_requests) == 2
    assert answer_rows(built.public_store_path)[-1][5].startswith("ollama")


def test_a_session_follow_up_is_rewritten_before_retrieval(built, chat, tmp_path, capsys):
    config = write_config(built, tmp_path / "rag.yaml", f"{{name: ollama, ollama: {{host: '{chat.url}'}}}}")
    code, _ = ask_json(capsys, "how are restic offsite backups set up?", "--session", "backups", *config)
    assert code == 0
    chat.reply("text:restic offsite backup prune schedule", "ok")
    code, body = ask_json(capsys, "and how often is it pruned?", "--session", "backups", *config)
    assert code == 0 and body["retrieval"]["query"] == "restic offsite backup prune schedule"
    assert body["retrieval"]["rewrite"] == "model"
    rewrite_prompt = chat.prompts()[1]
    assert (
        "Q: how are restic offsite backups set up?" in rewrite_prompt
        and "Last question: and how often is it pruned?" in rewrite_prompt
    )
    assert "(In full: restic offsite backup prune schedule)" in chat.prompts()[2]
    rows = answer_rows(built.public_store_path, "backups")
    assert [r[1] for r in rows][-2:] == [
        "how are restic offsite backups set up?",
        "restic offsite backup prune schedule",
    ]
    assert rag(["ask", "x", "--session", "bad name!", *config]) == 2


def test_no_safe_tier_secret_ever_reaches_the_chat_model(built, chat, tmp_path, capsys):
    config = write_config(built, tmp_path / "rag.yaml", f"{{name: ollama, ollama: {{host: '{chat.url}'}}}}")
    questions = [
        SAFE_QUESTION,
        "ssh access keys for the servers",
        "grafana alerting webhook and password",
        "gitea mirror ci tokens",
        "wireguard handshake troubleshooting keys",
        "home assistant access token",
    ]
    for question in questions:
        rag(["ask", question, "--tier", "safe", *config])
    capsys.readouterr()
    sent = b"".join(r.raw_body for r in chat.chat_requests)
    assert len(chat.chat_requests) >= 4 and b"[REDACTED:" in sent  # the notes were sent, sanitised
    for planted in SECRETS:
        if planted["vault"] == "homelab-notes":
            assert planted["secret"].encode() not in sent, f"{planted['kind']} from {planted['file']} reached the model"
    for planted in IDENTITIES:
        if planted["vault"] == "homelab-notes":
            assert planted["text"].encode() not in sent


def test_the_private_tier_answers_locally_past_any_proxy_and_refuses_a_remote_model(
    built, chat, tmp_path, capsys, monkeypatch
):
    with RecordingServer(forward=True) as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.setenv("OLLAMA_HOST", chat.url)
        config = write_config(built, tmp_path / "rag.yaml", "auto")
        code, body = ask_json(capsys, "wifi password of the home router", "--tier", "private", *config)
        assert code == 0 and body["model"] == "llama3.2" and not body["abstained"]
        wifi = next(p for p in PLANTED if p["kind"] == "wifi_password")
        assert wifi["secret"].encode() in chat.chat_requests[-1].raw_body  # raw private text, to the local model only
        assert len(proxy.received) == 0, proxy.received[:300]
        chat.reset()
        monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
        remote = write_config(
            built, tmp_path / "rag.yaml", "{name: openai, openai: {base_url: 'https://203.0.113.7/v1'}}"
        )
        assert rag(["ask", "wifi password of the home router", "--tier", "private", *remote]) == 2
        assert "refusing to answer from private notes" in capsys.readouterr().err
        assert chat.requests == [] and len(proxy.received) == 0


# --- POST /ask ------------------------------------------------------------------------------------


def sse_events(response) -> list[tuple[str, dict]]:
    events, kind = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
    return events


def test_post_ask_answers_json(built, chat):
    with ServerThread(create_app(with_llm(built, chat.url), preload=False)) as api:
        r = api.post("/ask", json={"question": PUBLIC_QUESTION, "tier": "public"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == JSON_KEYS and body["answer"].endswith("[1].") and body["citations"][0]["n"] == 1
        assert body["citationCheck"] == {"unknown": [], "uncited": False}
        assert chat.chat_requests[0].json["stream"] is False


@pytest.mark.parametrize("how", ["accept", "body"])
def test_post_ask_streams_server_sent_events(built, chat, how):
    headers = {"Accept": "text/event-stream"} if how == "accept" else {}
    payload = {"question": PUBLIC_QUESTION, "tier": "public", **({"stream": True} if how == "body" else {})}
    with ServerThread(create_app(with_llm(built, chat.url), preload=False)) as api:
        with api.client.stream("POST", "/ask", json=payload, headers=headers) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = sse_events(r)
    kinds = [k for k, _ in events]
    assert kinds[0] == "sources" and kinds[-1] == "done" and set(kinds[1:-1]) == {"token"} and len(kinds) > 5
    sources = events[0][1]
    assert set(sources) == {"question", "query", "tier", "abstained", "sources"} and sources["abstained"] is False
    # Streamed (for the page), each source comes rendered too: sanitised HTML and plain text.
    assert all(set(s) == SOURCE_KEYS | {"html", "plain"} for s in sources["sources"])
    first = sources["sources"][0]
    assert (
        first["collection"] == "posts"
        and first["url"] is None
        and first["anchor"] in ("", *[h.lower().replace(" ", "-") for h in first["headingPath"]])
    )
    done = events[-1][1]
    assert set(done) == DONE_KEYS and done["answer"] == "".join(d["text"] for k, d in events if k == "token")
    assert done["citationCheck"] == {"unknown": [], "uncited": False} and done["latencyMs"] > 0


def test_post_ask_reports_a_failing_model(built, chat):
    cfg = dataclasses.replace(
        built, llm=LlmSettings(name="ollama", max_retries=0, ollama=LlmOllamaSettings(host=chat.url))
    )
    with ServerThread(create_app(cfg, preload=False)) as api:
        chat.reply("500")
        r = api.post("/ask", json={"question": PUBLIC_QUESTION})
        assert r.status_code == 502 and "HTTP 500" in r.json()["error"] and r.json()["retrieval"]["sources"]
        chat.reply("cut:3")
        with api.client.stream("POST", "/ask", json={"question": PUBLIC_QUESTION, "stream": True}) as streamed:
            events = sse_events(streamed)
        assert [k for k, _ in events] == ["sources", "token", "token", "token", "error"]
        assert events[-1][1]["status"] == 502 and "stopped in the middle" in events[-1][1]["error"]


def test_post_ask_abstains_with_the_nearest_pages(built, chat):
    with ServerThread(create_app(with_llm(built, chat.url), preload=False)) as api:
        body = api.post("/ask", json={"question": NONSENSE}).json()
        assert body["abstained"] is True and body["retrieval"]["sources"] and body["model"] is None
        with api.client.stream("POST", "/ask", json={"question": NONSENSE, "stream": True}) as r:
            events = sse_events(r)
        assert [k for k, _ in events] == ["sources", "done"] and events[0][1]["abstained"] is True
        assert "relevance threshold" in events[0][1]["message"] and events[1][1]["abstained"] is True
    assert chat.chat_requests == []


def test_post_ask_without_a_model_is_a_503_with_the_sources(built):
    cfg = dataclasses.replace(built, llm=LlmSettings(name="none"))
    with ServerThread(create_app(cfg, preload=False)) as api:
        r = api.post("/ask", json={"question": PUBLIC_QUESTION})
        assert r.status_code == 503 and "llm.name is none" in r.json()["error"] and r.json()["retrieval"]["sources"]


@pytest.mark.parametrize(
    "payload, status, message",
    [
        ({"question": "   "}, 400, "non-empty"),
        ({"question": "x", "tier": "secret"}, 400, "unknown tier"),
        ({"question": "x" * (MAX_QUESTION_CHARS + 1)}, 400, f"the most is {MAX_QUESTION_CHARS}"),
        ({"question": "x", "k": 3}, 400, "unknown key(s) 'k'"),
        ({"question": "x", "stream": "yes"}, 400, "true or false"),
        ({"question": "x", "session": "../etc"}, 400, "session name"),
        ({"question": "x", "collections": 3}, 400, "collections must be"),
        (["question"], 400, "JSON object"),
        ({"question": "x" * 70_000}, 413, "over"),
    ],
)
def test_post_ask_rejects_bad_input_with_a_message(built, chat, payload, status, message):
    with ServerThread(create_app(with_llm(built, chat.url), preload=False)) as api:
        r = api.post("/ask", json=payload)
        assert r.status_code == status and message in r.json()["error"]
        assert api.post("/ask", content=b"{not json", headers={"Content-Type": "application/json"}).status_code == 400
    assert chat.chat_requests == []


def test_post_ask_refuses_the_private_tier_off_loopback(built, chat):
    with ServerThread(create_app(with_llm(built, chat.url), serve_private=False, preload=False)) as api:
        r = api.post("/ask", json={"question": "wifi password", "tier": "private"})
        assert r.status_code == 403 and "allow_private_remote" in r.json()["error"]
    assert chat.requests == []


def test_post_ask_refuses_a_remote_model_for_the_private_tier_before_sending_anything(built, chat, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    cfg = dataclasses.replace(
        built, llm=LlmSettings(name="openai", openai=LlmOpenAISettings(base_url="https://203.0.113.7/v1"))
    )
    with RecordingServer(forward=True) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        with ServerThread(create_app(cfg, preload=False)) as api:
            r = api.post("/ask", json={"question": "wifi password of the home router", "tier": "private"})
            assert r.status_code == 403 and "refusing to answer from private notes" in r.json()["error"]
            with api.client.stream(
                "POST", "/ask", json={"question": "wifi password", "tier": "private", "stream": True}
            ) as streamed:
                assert streamed.status_code == 403
        assert len(proxy.received) == 0
