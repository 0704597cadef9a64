"""The rerankers on the wire: the /rerank API and a chat model on a real loopback server,
their retries and errors, reading a chat model's answer, a local cross-encoder, and which
reranker each tier may use."""

from __future__ import annotations

import math
import sys

import pytest

from rag_assets.base.egress import PrivacyError
from rag_assets.base.http_retry import MalformedResponse, RetryPolicy
from rag_assets.config import ConfigError, RerankerSettings, load_config
from rag_assets.search.rerank.base import RerankError, RerankerUnavailable
from rag_assets.search.rerank.chat import ChatReranker
from rag_assets.search.rerank.chat_scores import parse_scores
from rag_assets.search.rerank.cross_encoder import CrossEncoderReranker
from rag_assets.search.rerank.http import HttpReranker
from rag_assets.search.rerank.selection import select_reranker

from .rerank_server import RerankServer, word_overlap

QUERY = "proxmox vlan bridge"
PASSAGES = [
    "Feed the sourdough starter and bake the loaf.",  # 0 of 3 query words
    "Make the proxmox bridge vlan-aware.",  # 3 of 3
    "The proxmox installer boots from a stick.",  # 1 of 3
]
FAST = RetryPolicy(max_retries=2, base_backoff=0.01, timeout=2.0, retry_after_cap=1.0)


def http_reranker(server: RerankServer, **kwargs) -> HttpReranker:
    return HttpReranker(
        base_url=server.url + "/v1", model=kwargs.pop("model", "bge-reranker-test"), policy=FAST, **kwargs
    )


def chat_reranker(server: RerankServer, **kwargs) -> ChatReranker:
    return ChatReranker(base_url=server.url + "/v1", model="qwen-test", policy=FAST, **kwargs)


# --- /rerank ------------------------------------------------------------------------------------


def test_the_rerank_api_gets_the_common_request_and_scores_map_back_by_index():
    with RerankServer(api_key="rk-test") as server:
        scores = http_reranker(server, api_key="rk-test").rerank(QUERY, PASSAGES)
        (request,) = server.rerank_requests
    assert request.path == "/v1/rerank" and request.headers["authorization"] == "Bearer rk-test"
    assert request.json == {"model": "bge-reranker-test", "query": QUERY, "documents": PASSAGES, "top_n": 3}
    # The server answers best first; the scores come back in the passages' own order.
    assert scores == pytest.approx([word_overlap(QUERY, p) for p in PASSAGES])
    assert scores[1] > scores[2] > scores[0]


def test_the_rerank_api_retries_429_and_5xx_then_succeeds():
    with RerankServer() as server:
        server.script("429:0", "503", "drop")
        reranker = HttpReranker(
            base_url=server.url, model=None, policy=RetryPolicy(max_retries=3, base_backoff=0.01, timeout=2)
        )
        assert reranker.rerank(QUERY, PASSAGES)[1] == pytest.approx(1.0)
        assert len(server.rerank_requests) == 4
        assert "model" not in server.rerank_requests[-1].json  # none configured: none sent


@pytest.mark.parametrize("action", ["malformed", "missing_field", "nan"])
def test_a_bad_answer_is_retried_like_a_5xx(action):
    with RerankServer() as server:
        server.script(action)
        assert http_reranker(server).rerank(QUERY, PASSAGES)[1] == pytest.approx(1.0)
        assert len(server.rerank_requests) == 2


def test_errors_after_the_retries_and_refused_keys_are_rerank_errors():
    with RerankServer(api_key="rk-right") as server:
        server.script("500", "500", "500")
        with pytest.raises(RerankError, match="failed after 2 retries: HTTP 500"):
            http_reranker(server, api_key="rk-right").rerank(QUERY, PASSAGES)
        server.reset()
        with pytest.raises(RerankError, match=r"refused the request.*\$RR_KEY"):
            http_reranker(server, api_key="rk-wrong", api_key_env="RR_KEY").rerank(QUERY, PASSAGES)
        assert len(server.rerank_requests) == 1  # a wrong key is not retried


def test_a_server_that_is_down_or_too_slow_is_a_rerank_error():
    with RerankServer() as server:
        url = server.url
        server.script("slow:5", "slow:5")
        slow = HttpReranker(base_url=url, model=None, policy=RetryPolicy(max_retries=1, base_backoff=0.01, timeout=0.3))
        with pytest.raises(RerankError, match="timed out"):
            slow.rerank(QUERY, PASSAGES)
    down = HttpReranker(base_url=url, model=None, policy=RetryPolicy(max_retries=1, base_backoff=0.01, timeout=1))
    with pytest.raises(RerankError, match="connection error"):
        down.rerank(QUERY, PASSAGES)


# --- /chat/completions --------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["json", "fenced", "prose", "lines", "think"])
def test_a_chat_model_grades_each_passage_in_batches(style):
    passages = PASSAGES + ["proxmox vlan notes", "bridge"]
    with RerankServer(chat_style=style) as server:
        scores = chat_reranker(server, batch_size=2).rerank(QUERY, passages)
        requests = server.chat_requests
    assert [len(r.json["messages"][1]["content"].split("\n\n[")) - 1 for r in requests] == [2, 2, 1]
    first = requests[0].json
    assert first["model"] == "qwen-test" and first["temperature"] == 0
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert "Query: proxmox vlan bridge" in first["messages"][1]["content"]
    assert scores == pytest.approx([round(10 * word_overlap(QUERY, p)) / 10 for p in passages])


def test_a_chat_answer_without_scores_is_retried_then_an_error():
    with RerankServer() as server:
        server.script("missing_field", "missing_field", "missing_field")
        with pytest.raises(RerankError, match="could not read 3 relevance score"):
            chat_reranker(server).rerank(QUERY, PASSAGES)
        assert len(server.chat_requests) == 3


@pytest.mark.parametrize(
    ("answer", "expected", "scores"),
    [
        ('{"scores": [7, 0, 10]}', 3, [0.7, 0.0, 1.0]),
        ('Sure!\n```json\n{"scores": [3, 12, -1]}\n```', 3, [0.3, 1.0, 0.0]),
        ("[8, 2]", 2, [0.8, 0.2]),
        ('{"1": 9, "2": "4"}', 2, [0.9, 0.4]),
        ('{"scores": [{"index": 1, "score": 6}, {"index": 2, "score": 1}]}', 2, [0.6, 0.1]),
        ("[1] 7\n[2] 3", 2, [0.7, 0.3]),
        ("Passage 1: yes\nPassage 2: no", 2, [1.0, 0.0]),
        ("7, 5", 2, [0.7, 0.5]),
        ("Yes.", 1, [1.0]),
        ('<think>which of [1] and [2]?</think>{"scores": [2, 9]}', 2, [0.2, 0.9]),
    ],
)
def test_parse_scores_reads_what_small_models_write(answer, expected, scores):
    assert parse_scores(answer, expected) == pytest.approx(scores)


@pytest.mark.parametrize(
    ("answer", "expected"), [('{"scores": [7, 0]}', 3), ("I think the first one.", 2), ("", 1), ("[NaN, 1]", 2)]
)
def test_parse_scores_refuses_what_does_not_fit(answer, expected):
    with pytest.raises(MalformedResponse):
        parse_scores(answer, expected)


# --- Which reranker, for which tier -------------------------------------------------------------


def test_the_reranker_is_off_unless_configured_and_each_needs_its_settings(tmp_path):
    path = tmp_path / "rag.yaml"
    path.write_text("identity_map: null\n")
    assert load_config(path, environ={}).reranker == RerankerSettings() and not RerankerSettings().enabled
    assert select_reranker(RerankerSettings(), "public") is None
    for text, message in [
        ("reranker: chat\n", "reranker 'chat' needs reranker.base_url and reranker.model"),
        ("reranker: {name: http}\n", "needs reranker.base_url"),
        ("reranker: {name: cross_encoder}\n", "needs reranker.model_path"),
        ("reranker: {name: http, base_url: 'localhost:8080'}\n", "http:// or https://"),
        ("reranker: {name: htp}\n", "did you mean 'http'"),
        (
            "reranker: {name: http, base_url: 'http://x', api_key_env: 'sk-live-123'}\n",
            "NAME of an environment variable",
        ),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_config(path, environ={})
    path.write_text(
        "reranker: {name: http, base_url: 'http://127.0.0.1:9', model: m, top_n: 30, api_key_env: RR_KEY}\n"
    )
    settings = load_config(path, environ={}).reranker
    assert (settings.name, settings.top_n, settings.model) == ("http", 30, "m")
    chosen = select_reranker(
        settings, "public", environ={"RAG_RERANKER_BASE_URL": "http://127.0.0.1:7/v1", "RR_KEY": "k"}
    )
    assert isinstance(chosen, HttpReranker) and chosen.endpoint == "http://127.0.0.1:7/v1/rerank" and not chosen.local


@pytest.mark.parametrize("name", ["http", "chat"])
def test_a_reranker_off_this_machine_gets_no_private_passage(name, non_loopback_address):
    address = non_loopback_address
    with RerankServer(bind_host="0.0.0.0") as server:
        remote = f"http://{address}:{server.port}"
        # The server answers there, so its silence below means we refused, not that it was down.
        assert HttpReranker(base_url=remote, model=None).rerank(QUERY, PASSAGES)
        server.reset()
        settings = RerankerSettings(name=name, base_url=remote, model="m")
        with pytest.raises(PrivacyError, match="refusing to rerank private notes"):
            select_reranker(settings, "private")
        for tier in ("public", "safe"):  # sanitised or public text may go there
            assert not select_reranker(settings, tier).local
        # A loopback endpoint is accepted for the Private tier, through the egress client.
        local = select_reranker(RerankerSettings(name=name, base_url=server.url, model="m"), "private")
        assert local.local
        assert server.requests == []


def test_a_private_reranker_whose_host_changes_later_still_sends_nothing(non_loopback_address):
    """Defence in depth: the egress client checks every request, not only the configured URL."""
    address = non_loopback_address
    with RerankServer(bind_host="0.0.0.0") as server:
        reranker = select_reranker(RerankerSettings(name="http", base_url=server.url), "private")
        reranker.base_url = f"http://{address}:{server.port}"
        with pytest.raises(PrivacyError, match="refusing to send private text"):
            reranker.rerank(QUERY, ["the safe combination is 12-34-56"])
        assert server.requests == []


# --- A local cross-encoder ----------------------------------------------------------------------


def test_a_missing_extra_or_model_folder_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(RerankerUnavailable, match="not a folder holding a model"):
        CrossEncoderReranker(str(tmp_path / "nowhere")).rerank(QUERY, PASSAGES)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # a model folder, as far as the check looks
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the extra were not installed
    with pytest.raises(RerankerUnavailable, match=r"pip install '\.\[local\]'"):
        CrossEncoderReranker(str(model)).rerank(QUERY, PASSAGES)
    private = select_reranker(RerankerSettings(name="cross_encoder", model_path=str(tmp_path)), "private")
    assert private.local  # runs in this process: allowed for the Private tier


def tiny_cross_encoder(folder, num_labels: int = 1):
    """A small randomly initialised BERT cross-encoder saved as a model folder (no download)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("sentence_transformers", reason="the local extra is not installed (pip install '.[local]')")
    import torch

    words = sorted({w for text in [QUERY, *PASSAGES] for w in text.lower().replace(".", " ").split()})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    config = transformers.BertConfig(
        vocab_size=len(words) + 5,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=num_labels,
    )
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_local_cross_encoder_scores_every_passage_in_zero_to_one(tmp_path):
    reranker = CrossEncoderReranker(str(tiny_cross_encoder(tmp_path / "ce")), batch_size=2)
    scores = reranker.rerank(QUERY, PASSAGES)
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 and math.isfinite(s) for s in scores)
    assert reranker.rerank(QUERY, PASSAGES) == pytest.approx(scores)  # deterministic, loaded once
    assert reranker.rerank(QUERY, []) == [] and reranker.name == "cross_encoder:ce"


def test_a_cross_encoder_with_several_labels_is_refused(tmp_path):
    reranker = CrossEncoderReranker(str(tiny_cross_encoder(tmp_path / "nli", num_labels=3)))
    with pytest.raises(RerankError, match="3 labels per pair"):
        reranker.rerank(QUERY, PASSAGES)
