"""A chat model as a reranker: any OpenAI-compatible ``/chat/completions`` (llama.cpp,
Ollama, vLLM, LM Studio, OpenRouter) grades each passage 0-10 for the query.

Passages go in batches of ``batch_size`` per request, numbered, each cut to
``PASSAGE_CHARS`` characters; the model is asked for ``{"scores": [...]}`` with one
integer per passage, at temperature 0. Its answer is read by
:func:`rag_assets.search.rerank.chat_scores.parse_scores` (JSON, fenced JSON, numbered
lines, yes/no); an unreadable answer is retried like a 5xx, then the search falls back to
its fused order. Scores are the grades divided by ten, so batches compare directly.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from rag_assets.base.egress import PrivateEgress
from rag_assets.base.http_retry import MalformedResponse, RetryPolicy, batched
from rag_assets.search.rerank.chat_scores import parse_scores
from rag_assets.search.rerank.remote import RemoteReranker

PASSAGE_CHARS = 2000  # a 400-word chunk fits; a prompt of ten stays a few thousand tokens

SYSTEM_PROMPT = (
    "You grade search results. For each numbered passage, judge how well it answers or is relevant "
    "to the query, as an integer from 0 (unrelated) to 10 (directly answers it). Reply with JSON only, "
    'one score per passage in the given order, for example {"scores": [7, 0, 10]}.'
)


def user_prompt(query: str, passages: Sequence[str]) -> str:
    numbered = "\n\n".join(f"[{i}] {' '.join(p.split())[:PASSAGE_CHARS]}" for i, p in enumerate(passages, start=1))
    return f"Query: {query}\n\nPassages:\n\n{numbered}\n\nScores for the {len(passages)} passages, as JSON:"


class ChatReranker(RemoteReranker):
    """Grades passages with a chat model, ``batch_size`` passages per request."""

    provider = "chat"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        api_key_env: str | None = None,
        batch_size: int = 10,
        policy: RetryPolicy = RetryPolicy(),
        egress: PrivateEgress | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        super().__init__(
            base_url=base_url, model=model, api_key=api_key, api_key_env=api_key_env, policy=policy, egress=egress
        )
        self.batch_size = batch_size

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        scores: list[float] = []
        for number, batch in enumerate(batched(list(passages), self.batch_size), start=1):
            scores += self._post(
                self.payload(query, batch),
                functools.partial(_parse_answer, expected=len(batch)),
                batch=str(number),
                count=len(batch),
            )
        return scores

    def payload(self, query: str, passages: Sequence[str]) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": user_prompt(query, passages)},
            ],
            "temperature": 0,
            # Room for the JSON (and a short preamble some models cannot help writing).
            "max_tokens": 256 + 8 * len(passages),
        }


def answer_text(body: Any) -> str:
    """The first choice's message content; MalformedResponse when the answer has none."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise MalformedResponse("no choices[0].message.content in the response") from None
    if not isinstance(content, str):
        raise MalformedResponse("the message content is not text")
    return content


def _parse_answer(body: Any, expected: int) -> list[float]:
    """The ``expected`` scores of one batch, from the chat model's answer."""
    return parse_scores(answer_text(body), expected)
