"""The chat providers on the wire, against the loopback chat server: streaming (SSE, NDJSON) and
not, retries (429 Retry-After, 5xx, timeouts, garbage), failures mid-answer, and the choice of
provider per tier (the Private tier: local only, past any proxy)."""

from __future__ import annotations

import socketserver
import threading
import time

import pytest

from rag_assets.answer.grounding import check_citations, cited_numbers, grounded_messages
from rag_assets.answer.providers.base import ChatAuthError, ChatError, ChatUsage, complete
from rag_assets.answer.providers.ollama_chat import OllamaChat
from rag_assets.answer.providers.openai_chat import OpenAIChat
from rag_assets.answer.selection import chat_for_tier, select_chat
from rag_assets.answer.sessions import Turn, clean_rewrite, fallback_query, standalone_query
from rag_assets.answer.sources import Source
from rag_assets.base.egress import PrivacyError, PrivateEgress
from rag_assets.base.http_retry import RetryPolicy
from rag_assets.config.settings import LlmOllamaSettings, LlmOpenAISettings, LlmSettings

from .chat_server import ChatServer
from .test_egress import RecordingServer, _Redirector

MESSAGES = [
    {"role": "system", "content": "Answer from the sources."},
    {"role": "user", "content": "Sources:\n\n[1] Backups\nRestic runs nightly at 02:00.\n\nQuestion: when?"},
]
FAST = RetryPolicy(max_retries=2, base_backoff=0.01, max_backoff=0.02, timeout=2.0, retry_after_cap=5)


@pytest.fixture
def chat():
    with ChatServer() as server:
        yield server


def openai(server: ChatServer, policy: RetryPolicy = FAST, **kwargs) -> OpenAIChat:
    return OpenAIChat(base_url=f"{server.url}/v1", model="test-model", policy=policy, **kwargs)


def ollama(server: ChatServer, policy: RetryPolicy = FAST, **kwargs) -> OllamaChat:
    return OllamaChat(host=server.url, model="llama3.2", policy=policy, **kwargs)


def answer(provider, streamed: bool = True) -> tuple[list[str], ChatUsage]:
    usage = ChatUsage()
    return list(provider.stream(MESSAGES, usage, streamed=streamed)), usage


@pytest.mark.parametrize("make", [openai, ollama])
@pytest.mark.parametrize("streamed", [True, False])
def test_an_answer_streams_in_pieces_or_comes_whole(chat, make, streamed):
    pieces, usage = answer(make(chat), streamed)
    assert "".join(pieces) == "According to the notes, Restic runs nightly at 02:00 [1]."
    assert (len(pieces) > 3) is streamed
    assert usage.completion_tokens == 10 and usage.prompt_tokens and usage.requests == 1
    sent = chat.chat_requests[0].json
    assert sent["messages"] == MESSAGES and sent["stream"] is streamed
    assert sent["model"] in ("test-model", "llama3.2")


def test_openai_sends_the_key_and_asks_for_usage_when_streaming(chat):
    chat.api_key = "sk-test"
    pieces, usage = answer(openai(chat, api_key="sk-test"))
    request = chat.chat_requests[0]
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.json["stream_options"] == {"include_usage": True} and usage.prompt_tokens
    with pytest.raises(ChatAuthError, match="HTTP 401"):
        answer(openai(chat, api_key="wrong"))
    assert len(chat.chat_requests) == 2  # a refused key is not retried


@pytest.mark.parametrize("make", [openai, ollama])
def test_429_with_retry_after_is_waited_for_then_retried(chat, make):
    chat.reply("429:1", "ok")
    pieces, usage = answer(make(chat))
    assert "[1]" in "".join(pieces) and usage.retries == 1 and usage.requests == 2
    first, second = chat.chat_requests
    # At least the 1 s asked for; far under the 60 s Retry-After cap (a generous bound, not a timing).
    assert 0.9 <= second.time - first.time < 30


@pytest.mark.parametrize("failure", ["500", "503", "drop", "malformed", "garbage", "slow:3"])
def test_server_errors_timeouts_and_garbage_are_retried(chat, failure):
    chat.reply(failure, "ok")
    pieces, usage = answer(openai(chat))
    assert "".join(pieces).endswith("[1].") and usage.retries == 1


@pytest.mark.parametrize("make", [openai, ollama])
def test_a_provider_that_keeps_failing_is_a_chat_error_after_the_retries(chat, make):
    chat.reply("garbage", "502", "garbage")
    with pytest.raises(ChatError, match="failed after 2 retries"):
        answer(make(chat))
    assert len(chat.chat_requests) == 3


def test_a_bad_request_is_not_retried(chat):
    chat.reply("400")
    with pytest.raises(ChatError, match="HTTP 400"):
        answer(openai(chat))
    assert len(chat.chat_requests) == 1


@pytest.mark.parametrize("make", [openai, ollama])
@pytest.mark.parametrize("failure", ["cut:3", "stall:3"])
def test_a_failure_mid_answer_ends_it_without_repeating_what_was_sent(chat, make, failure):
    chat.reply(failure)
    provider = make(chat, policy=RetryPolicy(max_retries=2, timeout=0.5))
    received: list[str] = []
    with pytest.raises(ChatError, match="stopped in the middle of the answer"):
        for piece in provider.stream(MESSAGES, ChatUsage()):
            received.append(piece)
    assert len(received) == 3 and len(chat.chat_requests) == 1


def test_complete_gives_the_whole_answer(chat):
    chat.reply("text:restic offsite schedule")
    text, usage = complete(ollama(chat), MESSAGES)
    assert text == "restic offsite schedule" and chat.chat_requests[0].json["stream"] is False


# --- Choosing the provider -----------------------------------------------------------------------


def settings(
    name: str = "auto", base_url: str | None = None, host: str | None = None, model: str = "llama3.2"
) -> LlmSettings:
    return LlmSettings(
        name=name,
        openai=LlmOpenAISettings(base_url=base_url, model="m"),
        ollama=LlmOllamaSettings(host=host, model=model),
    )


def test_auto_prefers_the_api_when_its_key_is_set_then_ollama_then_none(chat):
    env = {"OPENROUTER_API_KEY": "k", "RAG_OPENAI_BASE_URL": f"{chat.url}/v1"}
    chosen = select_chat(settings(), "public", environ=env)
    assert chosen.provider.provider == "openai" and chosen.provider.endpoint == f"{chat.url}/v1/chat/completions"
    chosen = select_chat(settings(), "public", environ={"OLLAMA_HOST": chat.url})
    assert chosen.provider.provider == "ollama" and "has llama3.2" in chosen.reason
    chosen = select_chat(settings(model="mistral"), "public", environ={"OLLAMA_HOST": chat.url})
    assert (
        chosen.provider is None and "OPENROUTER_API_KEY not set" in chosen.reason and "lacks mistral" in chosen.reason
    )
    chosen = select_chat(settings(), "public", environ={"OLLAMA_HOST": "http://127.0.0.1:9"})
    assert chosen.provider is None and "not reachable" in chosen.reason
    assert select_chat(settings("none"), "public", environ=env).provider is None


def test_llm_base_url_wins_over_the_environment(chat):
    env = {"OPENROUTER_API_KEY": "k", "RAG_OPENAI_BASE_URL": "http://elsewhere.example/v1"}
    chosen = select_chat(settings("openai", base_url=f"{chat.url}/v1"), "public", environ=env)
    assert chosen.provider.base_url == f"{chat.url}/v1"
    assert select_chat(settings("openai"), "public", environ=env).provider.base_url == "http://elsewhere.example/v1"


def test_openai_without_a_key_for_a_remote_api_is_unavailable_not_a_crash():
    chosen = chat_for_tier(settings("openai"), "public", environ={})
    assert chosen.provider is None and "OPENROUTER_API_KEY is not set" in chosen.reason


def test_the_private_tier_refuses_a_remote_model_before_sending_anything(chat):
    remote = {"OPENROUTER_API_KEY": "k", "RAG_OPENAI_BASE_URL": "https://openrouter.ai/api/v1"}
    with pytest.raises(PrivacyError, match="refusing to answer from private notes"):
        select_chat(settings("openai"), "private", environ=remote)
    with pytest.raises(PrivacyError):
        select_chat(settings("ollama", host="http://gpu-box.lan:11434"), "private", environ={})
    # auto skips the remote API and finds the local Ollama instead
    chosen = select_chat(settings(), "private", environ={**remote, "OLLAMA_HOST": chat.url})
    assert chosen.provider.provider == "ollama" and chosen.provider.local
    # a host the owner listed is trusted like loopback
    listed = select_chat(
        settings("ollama", host="http://gpu-box.lan:11434"), "private", private_hosts=["gpu-box.lan"], environ={}
    )
    assert listed.provider.local
    assert chat.chat_requests == []


def test_the_private_tier_goes_straight_to_loopback_past_every_proxy(chat, monkeypatch):
    with RecordingServer(forward=True) as proxy:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        env = {"OPENROUTER_API_KEY": "k", "RAG_OPENAI_BASE_URL": f"{chat.url}/v1"}
        for name in ("openai", "ollama", "auto"):
            chosen = select_chat(settings(name), "private", environ={**env, "OLLAMA_HOST": chat.url})
            assert chosen.provider.local
            assert "".join(answer(chosen.provider)[0]).endswith("[1].")
        assert len(chat.chat_requests) == 3 and len(proxy.received) == 0, proxy.received[:300]


def test_a_private_model_that_redirects_or_is_remote_gets_nothing_sent_on():
    with RecordingServer() as elsewhere:
        redirector = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Redirector)
        redirector.target = elsewhere.url  # type: ignore[attr-defined]
        threading.Thread(target=redirector.serve_forever, daemon=True).start()
        try:
            host = f"http://127.0.0.1:{redirector.server_address[1]}"
            provider = OllamaChat(host=host, model="m", policy=FAST, egress=PrivateEgress())
            with pytest.raises(PrivacyError, match="redirect"):
                answer(provider)
        finally:
            redirector.shutdown()
            redirector.server_close()
        time.sleep(0.1)  # let a stray connection, if any, be recorded
        assert len(elsewhere.received) == 0, elsewhere.received[:400]
    remote = OllamaChat(host="http://192.0.2.1:11434", model="m", policy=FAST, egress=PrivateEgress())
    with pytest.raises(PrivacyError, match="refusing to send private text"):
        answer(remote)


# --- Grounding and sessions ----------------------------------------------------------------------


def source(n: int) -> Source:
    return Source(
        n=n,
        id=f"c/s/chunk-{n}",
        collection="c",
        slug=f"s{n}",
        title=f"Page {n}",
        heading_path=["H"],
        text=f"text {n}",
        relevance=0.7,
    )


def test_citations_are_checked():
    assert cited_numbers("a [1] b [2, 3][4] c [x] [12;1]") == [1, 2, 3, 4, 12, 1]
    check = check_citations("Restic [2] runs nightly [1][2]; see also [7].", 3)
    assert check.cited == [2, 1] and check.unknown == [7] and not check.uncited
    assert check.to_json() == {"unknown": [7], "uncited": False}
    assert check_citations("No citation here.", 3).uncited
    assert check_citations("Only a wrong one [9].", 3).to_json() == {"unknown": [9], "uncited": True}


def test_the_prompt_numbers_the_sources_and_asks_for_citations():
    system, user = grounded_messages("when?", [source(1), source(2)], query="when does restic run")
    assert (
        "[n]" in user["content"] and "[1] Page 1 > H\ntext 1" in user["content"] and "[2] Page 2 > H" in user["content"]
    )
    assert "nothing else" in system["content"] and "(In full: when does restic run)" in user["content"]


def test_follow_ups_are_rewritten_by_the_model_or_deterministically(chat):
    turns = [Turn("how do restic offsite backups work?", "how do restic offsite backups work?", "They go to B2 [1].")]
    assert fallback_query("and how often?", turns) == "and how often? restic offsite backups work"
    chat.reply('text:Query: "restic offsite backup schedule"')
    rewrite = standalone_query("and how often?", turns, ollama(chat))
    assert rewrite.query == "restic offsite backup schedule" and rewrite.how == "model"
    assert "Q: how do restic offsite backups work?" in chat.prompts()[0]
    chat.reply("500", "500", "500")
    rewrite = standalone_query("and how often?", turns, ollama(chat))
    assert rewrite.query == "and how often? restic offsite backups work" and rewrite.how.startswith("fallback")
    assert standalone_query("first?", [], None).how == "first question"
    assert clean_rewrite("<think>hmm</think>\nsearch query: zfs snapshots\nmore") == "zfs snapshots"


# --- llm: in rag.yaml ----------------------------------------------------------------------------


def test_the_llm_section_is_validated_and_its_defaults_agree(tmp_path):
    from rag_assets.config import ConfigError, load_config
    from rag_assets.config.schema import LlmSection

    assert LlmSettings is LlmSection  # one model: the file's section is the pipeline's settings
    config = tmp_path / "rag.yaml"
    config.write_text("identity_map: null\nllm: ollama\n")
    assert load_config(config, environ={}).llm == LlmSettings(name="ollama")
    config.write_text(
        "identity_map: null\nllm: {name: openai, context_budget: 900, openai: {base_url: 'http://127.0.0.1:8080/v1', model: qwen}}\n"
    )
    llm = load_config(config, environ={}).llm
    assert (llm.context_budget, llm.openai.base_url, llm.openai.model) == (900, "http://127.0.0.1:8080/v1", "qwen")
    for bad, message in [
        ("llm: {name: gpt}", "llm.name"),
        ("llm: {context_budget: 5}", "context_budget"),
        ("llm: {openai: {api_key_env: sk-abc123}}", "NAME of an environment variable"),
        ("llm: {openai: {base_url: ftp://x}}", "http"),
        ("llm: {modle: x}", "modle"),
    ]:
        config.write_text(f"identity_map: null\n{bad}\n")
        with pytest.raises(ConfigError, match=message):
            load_config(config, environ={})
