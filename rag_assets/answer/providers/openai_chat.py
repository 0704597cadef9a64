"""OpenAI-compatible ``POST {base_url}/chat/completions``: OpenRouter by default, or OpenAI,
llama.cpp, vLLM, LM Studio, Ollama's /v1.

Streamed (the default) the answer comes as server-sent events, ``data: {chunk}`` lines
ending with ``data: [DONE]``; each chunk's ``choices[0].delta.content`` is a piece, and
``stream_options.include_usage`` asks for a last chunk with the ``usage``. A server that
answers a streamed request with plain JSON anyway is read as a whole answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson

from rag_assets.answer.providers.base import ChatError, ChatUsage, Message
from rag_assets.answer.providers.http import ChatHttp, provider_label
from rag_assets.base.egress import PrivateEgress
from rag_assets.base.http_retry import MalformedResponse, RetryPolicy, decode_json
from rag_assets.search.rerank.chat import answer_text


class OpenAIChat:
    """A chat model behind the OpenAI chat-completions API."""

    provider = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        policy: RetryPolicy = RetryPolicy(),
        temperature: float = 0.1,
        max_tokens: int = 800,
        egress: PrivateEgress | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = ChatHttp(
            provider_label("openai-compatible", self.base_url), self.base_url, policy, headers, egress
        )

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    @property
    def local(self) -> bool:
        return self._http.egress is not None

    def close(self) -> None:
        self._http.close()

    def stream(
        self, messages: list[Message], usage: ChatUsage, *, streamed: bool = True, max_tokens: int | None = None
    ) -> Iterator[str]:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": max_tokens or self.max_tokens,
            "stream": streamed,
        }
        if streamed:
            payload["stream_options"] = {"include_usage": True}
        return self._http.stream(self.endpoint, payload, read_answer, usage, max_tokens or self.max_tokens)


def read_answer(response: httpx.Response, usage: ChatUsage) -> Iterator[str]:
    """Pieces of a streamed (SSE) or whole (JSON) chat-completions answer."""
    if "text/event-stream" not in response.headers.get("content-type", ""):
        body = decode_json(response.read())
        _read_usage(body, usage)
        yield answer_text(body)
        return
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue  # comments (": keep-alive"), event names, blank separators
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise MalformedResponse(f"an event is not JSON: {data[:80]!r}") from None
        if isinstance(chunk, dict) and chunk.get("error"):
            error = chunk["error"]
            raise ChatError(
                f"the model reported an error mid-answer: {error.get('message', error) if isinstance(error, dict) else error}"
            )
        _read_usage(chunk, usage)
        piece = _delta(chunk)
        if piece:
            yield piece
    raise MalformedResponse("the event stream ended without data: [DONE]")


def _delta(chunk: Any) -> str:
    if not isinstance(chunk, dict):
        raise MalformedResponse("an event is not a JSON object")
    choices = chunk.get("choices")
    if not choices:  # the usage-only last chunk
        return ""
    if not isinstance(choices, list) or not isinstance(choices[0], dict):
        raise MalformedResponse("'choices' is not a list of objects")
    delta = choices[0].get("delta") or {}
    content = delta.get("content") if isinstance(delta, dict) else None
    if content is not None and not isinstance(content, str):
        raise MalformedResponse("a delta's content is not text")
    return content or ""


def _read_usage(body: Any, usage: ChatUsage) -> None:
    found = body.get("usage") if isinstance(body, dict) else None
    if isinstance(found, dict):
        usage.prompt_tokens = _count(found.get("prompt_tokens"), usage.prompt_tokens)
        usage.completion_tokens = _count(found.get("completion_tokens"), usage.completion_tokens)


def _count(value: Any, default: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default
