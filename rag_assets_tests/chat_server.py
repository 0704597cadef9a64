"""A real, scriptable chat server on 127.0.0.1 for testing `rag ask` and POST /ask on the wire.

It extends :class:`~rag_assets_tests.embedding_server.EmbeddingServer` (same recording,
same lifecycle, ``GET /api/tags`` for the Ollama probe) with the two chat protocols:

- ``POST /v1/chat/completions`` (and ``/chat/completions``): OpenAI-compatible; with
  ``"stream": true`` server-sent events (``data: {chunk}`` ... ``data: [DONE]``, usage in a
  last chunk when ``stream_options.include_usage``), else one JSON answer;
- ``POST /api/chat``: Ollama; NDJSON lines (the last ``"done": true`` with token counts),
  or one JSON object with ``"stream": false``.

Streamed answers go out in chunked transfer encoding, one word (with its trailing space)
per event, ``token_delay`` seconds apart (the first too: the model "thinks" that long).

What each chat request gets is scripted with :meth:`ChatServer.reply` (one item per
request, then ``ok`` forever):

``ok``                    the default answer: the first sentence of source [1], citing [1]
``text:<answer>``         exactly this answer (write citations into it, or none)
``429:S``, ``NNN``, ``slow:S``, ``drop``, ``malformed``   as for the embedding server
``garbage``               200 with a stream whose events are not JSON
``cut:N``                 N pieces of the default answer, then the connection is closed
``stall:N``               N pieces, then silence until the client gives up
"""

from __future__ import annotations

import json
import re
import time
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from .embedding_server import EmbeddingServer, _Handler, _parse_action
from .rerank_server import _chat_problem

OPENAI_CHAT_PATHS = frozenset({"/v1/chat/completions", "/chat/completions"})
OLLAMA_CHAT_PATH = "/api/chat"
CHAT_PATHS = OPENAI_CHAT_PATHS | {OLLAMA_CHAT_PATH}
_PIECE = re.compile(r"\s*\S+\s*")
_SOURCE_ONE = re.compile(r"^\[1\] [^\n]*\n(.*?)(?:\n\n\[2\] |\n\nQuestion: )", re.DOTALL | re.MULTILINE)


def default_answer(prompt: str) -> str:
    """The first sentence of source [1], cited; a fixed sentence when the prompt has no sources."""
    match = _SOURCE_ONE.search(prompt)
    if not match:
        return "The notes say nothing about it."
    text = " ".join(match.group(1).split())
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0][:200].rstrip(".")
    return f"According to the notes, {sentence} [1]."


def pieces(answer: str) -> list[str]:
    """The answer cut into streamed pieces (a word with its spaces); joined, exactly the answer."""
    found = _PIECE.findall(answer)
    return found if "".join(found) == answer else [answer]


class ChatServer(EmbeddingServer):
    """EmbeddingServer plus the OpenAI and Ollama chat routes (see the module docstring)."""

    def __init__(
        self,
        *,
        token_delay: float = 0.0,
        answer: Callable[[str], str] = default_answer,
        models: tuple[str, ...] = ("llama3.2:latest", "nomic-embed-text:latest"),
        **kwargs: Any,
    ) -> None:
        super().__init__(models=models, **kwargs)
        self.token_delay = token_delay
        self.answer = answer
        self._replies: deque[tuple[str, Any]] = deque()

    def reply(self, *items: str) -> None:
        """Queue what the next chat requests get (see the module docstring)."""
        parsed = [_parse_reply(item) for item in items]
        with self._lock:
            self._replies.extend(parsed)

    @property
    def chat_requests(self):
        return [r for r in self.requests if urlsplit(r.path).path in CHAT_PATHS]

    def prompts(self) -> list[str]:
        """The user messages of every chat request, in order."""
        return ["\n".join(m["content"] for m in r.json["messages"] if m["role"] == "user") for r in self.chat_requests]

    # ------------------------------------------------------------------ serving
    def _handle(self, h: _Handler, raw: bytes) -> None:
        path = urlsplit(h.path).path
        if h.command != "POST" or path not in CHAT_PATHS:
            return super()._handle(h, raw)
        body = self._record(h, raw)
        ollama = path == OLLAMA_CHAT_PATH
        with self._lock:
            kind, arg = self._replies.popleft() if self._replies else ("ok", None)
        if kind == "action" and not self._apply_transport_action(h, arg, ollama):
            return
        if not ollama and self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(h, 401, False, "Invalid API key")
        problem = _chat_problem(body)
        if problem:
            return self._error(h, 400, ollama, problem)
        prompt = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        answer = arg if kind == "text" else self.answer(prompt)
        parts = pieces(answer)
        limit = arg if kind in ("cut", "stall") else None
        if not body.get("stream", ollama):  # Ollama streams unless told not to; OpenAI the reverse
            return h.send_json(200, _whole(body, answer, prompt, ollama))
        self._stream(h, body, parts, prompt, ollama, kind, limit)

    def _stream(
        self, h: _Handler, body: dict, parts: list[str], prompt: str, ollama: bool, kind: str, limit: int | None
    ) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "application/x-ndjson" if ollama else "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.send_header("Cache-Control", "no-cache")
        h.end_headers()

        def send(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        if kind == "garbage":
            send(b"data: {this is not json\n\n" if not ollama else b"<html>oops</html>\n")
            send(b"")
            return
        for i, part in enumerate(parts):
            if limit is not None and i == limit:
                if kind == "stall":
                    self._stopping.wait(3600)
                h.drop()
                return
            if self.token_delay and self._stopping.wait(self.token_delay):
                return h.drop()
            send(_ollama_line(body, part) if ollama else _sse(body, {"delta": {"content": part}}))
        completion = len(parts)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": completion}
        if ollama:
            send(
                json.dumps(
                    {
                        "model": body["model"],
                        "message": {"role": "assistant", "content": ""},
                        "done": True,
                        "prompt_eval_count": usage["prompt_tokens"],
                        "eval_count": completion,
                    }
                ).encode()
                + b"\n"
            )
        else:
            send(_sse(body, {"delta": {}, "finish_reason": "stop"}))
            if (body.get("stream_options") or {}).get("include_usage"):
                send(b"data: " + json.dumps({"id": "chatcmpl-test", "choices": [], "usage": usage}).encode() + b"\n\n")
            send(b"data: [DONE]\n\n")
        send(b"")


def _parse_reply(item: str) -> tuple[str, Any]:
    name, _, arg = str(item).partition(":")
    if name == "ok":
        return ("ok", None)
    if name == "text":
        return ("text", arg)
    if name == "garbage":
        return ("garbage", None)
    if name in ("cut", "stall"):
        return (name, int(arg or 1))
    return ("action", _parse_action(item))


def _sse(body: dict, choice: dict) -> bytes:
    chunk = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "model": body["model"],
        "choices": [{"index": 0, **choice}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _ollama_line(body: dict, part: str) -> bytes:
    return (
        json.dumps({"model": body["model"], "message": {"role": "assistant", "content": part}, "done": False}).encode()
        + b"\n"
    )


def _whole(body: dict, answer: str, prompt: str, ollama: bool) -> dict:
    prompt_tokens, completion = len(prompt.split()), len(pieces(answer))
    if ollama:
        return {
            "model": body["model"],
            "message": {"role": "assistant", "content": answer},
            "done": True,
            "prompt_eval_count": prompt_tokens,
            "eval_count": completion,
        }
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        },
    }
