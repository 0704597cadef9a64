"""Ollama ``POST {host}/api/chat``: streamed as NDJSON (one JSON object per line, the last with
``"done": true`` and the token counts), or one JSON object with ``"stream": false``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson

from rag_assets.answer.providers.base import ChatError, ChatUsage, Message
from rag_assets.answer.providers.http import ChatHttp, provider_label
from rag_assets.base.egress import PrivateEgress
from rag_assets.base.http_retry import MalformedResponse, RetryPolicy, decode_json
from rag_assets.config.providers import ollama_host
from rag_assets.embed.ollama import OllamaHealth, ollama_health


class OllamaChat:
    """A chat model served by Ollama."""

    provider = "ollama"

    def __init__(
        self,
        *,
        host: str | None = None,
        model: str,
        policy: RetryPolicy = RetryPolicy(),
        temperature: float = 0.1,
        max_tokens: int = 800,
        egress: PrivateEgress | None = None,
    ) -> None:
        self.host = ollama_host(host)
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._http = ChatHttp(provider_label("ollama", self.host), self.host, policy, {}, egress)

    @property
    def endpoint(self) -> str:
        return f"{self.host}/api/chat"

    @property
    def local(self) -> bool:
        return self._http.egress is not None

    def health(self, timeout: float = 2.0) -> OllamaHealth:
        return ollama_health(self.host, timeout, self._http.egress)

    def close(self) -> None:
        self._http.close()

    def stream(
        self, messages: list[Message], usage: ChatUsage, *, streamed: bool = True, max_tokens: int | None = None
    ) -> Iterator[str]:
        payload = {
            "model": self.model,
            "messages": messages,
            "stream": streamed,
            "options": {"temperature": self.temperature, "num_predict": max_tokens or self.max_tokens},
        }
        return self._http.stream(self.endpoint, payload, read_answer, usage, max_tokens or self.max_tokens)


def read_answer(response: httpx.Response, usage: ChatUsage) -> Iterator[str]:
    """Pieces of an NDJSON stream, or of one whole JSON answer."""
    if "ndjson" not in response.headers.get("content-type", ""):
        body = decode_json(response.read())
        yield _piece(body, usage)
        return
    for line in response.iter_lines():
        if not line.strip():
            continue
        try:
            message = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise MalformedResponse(f"a line is not JSON: {line[:80]!r}") from None
        piece = _piece(message, usage)
        if piece:
            yield piece
        if message.get("done"):
            return
    raise MalformedResponse("the stream ended without a line marked done")


def _piece(message: Any, usage: ChatUsage) -> str:
    if not isinstance(message, dict):
        raise MalformedResponse("an answer line is not a JSON object")
    if message.get("error"):
        raise ChatError(f"Ollama reported an error: {message['error']}")
    content = (message.get("message") or {}).get("content") if isinstance(message.get("message"), dict) else None
    if content is None and not message.get("done"):
        raise MalformedResponse("no message.content in the answer")
    if content is not None and not isinstance(content, str):
        raise MalformedResponse("the message content is not text")
    for key, attr in (("prompt_eval_count", "prompt_tokens"), ("eval_count", "completion_tokens")):
        value = message.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            setattr(usage, attr, value)
    return content or ""
