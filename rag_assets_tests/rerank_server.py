"""A real, scriptable reranking server on 127.0.0.1 for testing the rerankers on the wire.

It extends :class:`~rag_assets_tests.embedding_server.EmbeddingServer` (same recording,
same action script, same lifecycle) with the two protocols the rerankers speak:

- ``POST /rerank`` (and ``/v1/rerank``): the Cohere / Jina API,
  ``{"model", "query", "documents", "top_n"}`` -> ``{"results": [{"index", "relevance_score"}]}``,
  best first, ``top_n`` of them;
- ``POST /chat/completions`` (and ``/v1/chat/completions``): an OpenAI-compatible chat model
  that reads the query (``Query: ...``) and the numbered passages (``[i] ...``) from the user
  message, as a model would, and grades each 0-10 in the style set by ``chat_style``.

Scores come from ``score(query, document) -> float in [0, 1]``; the default is the share
of the query's words found in the document. Actions from :meth:`script` apply to these
routes as to the embedding ones (``429:S``, ``NNN``, ``slow:S``, ``drop``, ``malformed``,
``missing_field``, ``nan``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from .embedding_server import _WORD, EmbeddingServer, _Action, _Handler

RERANK_PATHS = frozenset({"/rerank", "/v1/rerank"})
CHAT_PATHS = frozenset({"/chat/completions", "/v1/chat/completions"})
CHAT_STYLES = ("json", "fenced", "prose", "lines", "think")
_PASSAGE = re.compile(r"^\[(\d+)\] (.*?)(?=\n\n\[\d+\] |\n\nScores for|\Z)", re.DOTALL | re.MULTILINE)


def word_overlap(query: str, document: str) -> float:
    """The share of the query's words that appear in the document."""
    wanted = set(_WORD.findall(query.lower()))
    return len(wanted & set(_WORD.findall(document.lower()))) / len(wanted) if wanted else 0.0


class RerankServer(EmbeddingServer):
    """EmbeddingServer plus ``/rerank`` and ``/chat/completions`` (see the module docstring)."""

    def __init__(
        self, *, score: Callable[[str, str], float] = word_overlap, chat_style: str = "json", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if chat_style not in CHAT_STYLES:
            raise ValueError(f"chat_style must be one of {CHAT_STYLES}")
        self.score = score
        self.chat_style = chat_style

    @property
    def rerank_requests(self):
        return [r for r in self.requests if urlsplit(r.path).path in RERANK_PATHS]

    @property
    def chat_requests(self):
        return [r for r in self.requests if urlsplit(r.path).path in CHAT_PATHS]

    def _handle(self, h: _Handler, raw: bytes) -> None:
        path = urlsplit(h.path).path
        if h.command != "POST" or path not in RERANK_PATHS | CHAT_PATHS:
            return super()._handle(h, raw)
        body = self._record(h, raw)
        with self._lock:
            action = self._script.popleft() if self._script else _Action("ok")
        if not self._apply_transport_action(h, action, ollama=False):
            return
        if self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(h, 401, False, "Invalid API key")
        if path in RERANK_PATHS:
            return self._rerank(h, body, action)
        return self._chat(h, body, action)

    # ------------------------------------------------------------------ /rerank
    def _rerank(self, h: _Handler, body: Any, action: _Action) -> None:
        problem = _rerank_problem(body)
        if problem:
            return self._error(h, 400, False, problem)
        documents = body["documents"]
        top_n = body.get("top_n") or len(documents)
        scored = sorted(
            ({"index": i, "relevance_score": self.score(body["query"], d)} for i, d in enumerate(documents)),
            key=lambda r: (-r["relevance_score"], r["index"]),
        )[:top_n]
        if action.name == "nan" and scored:
            scored[0]["relevance_score"] = float("nan")
        payload: dict[str, Any] = {
            "id": "rerank-test",
            "results": scored,
            "meta": {"billed_units": {"search_units": 1}},
        }
        if action.name == "missing_field":
            del payload["results"]
        h.send_raw(200, json.dumps(payload).encode())  # NaN goes out as the bare token some servers emit

    # ------------------------------------------------------------ /chat/completions
    def _chat(self, h: _Handler, body: Any, action: _Action) -> None:
        problem = _chat_problem(body)
        if problem:
            return self._error(h, 400, False, problem)
        prompt = "\n".join(m["content"] for m in body["messages"] if m["role"] == "user")
        query_line = re.search(r"^Query: (.*)$", prompt, re.MULTILINE)
        passages = {int(n): text for n, text in _PASSAGE.findall(prompt)}
        if not query_line or sorted(passages) != list(range(1, len(passages) + 1)):
            return self._error(h, 400, False, "the prompt holds no query or no numbered passages")
        grades = [round(10 * self.score(query_line.group(1), passages[i])) for i in sorted(passages)]
        content = "I cannot grade these." if action.name == "missing_field" else _styled(grades, self.chat_style)
        h.send_json(
            200,
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
                "usage": {
                    "prompt_tokens": len(prompt.split()),
                    "completion_tokens": len(content.split()),
                    "total_tokens": 0,
                },
            },
        )


def _styled(grades: list[int], style: str) -> str:
    """The grades written the way various small models write them."""
    scores = json.dumps({"scores": grades})
    if style == "fenced":
        return f"```json\n{scores}\n```"
    if style == "prose":
        return f"Here are the relevance scores for the passages:\n{scores}\nLet me know if you need more."
    if style == "lines":
        return "\n".join(f"Passage {i}: {g}/10" for i, g in enumerate(grades, start=1))
    if style == "think":
        return f"<think>Passage 1 mentions [1, 2, 3] things.</think>\n{scores}"
    return scores


def _rerank_problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if "model" in body and (not isinstance(body["model"], str) or not body["model"]):
        return "'model' must be a non-empty string"
    if not isinstance(body.get("query"), str) or not body["query"]:
        return "'query' is required"
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
        return "'documents' must be a non-empty list of strings"
    top_n = body.get("top_n")
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1):
        return "'top_n' must be a positive integer"
    return None


def _chat_problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "'model' is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list"
    for m in messages:
        if (
            not isinstance(m, dict)
            or m.get("role") not in ("system", "user", "assistant")
            or not isinstance(m.get("content"), str)
        ):
            return "each message needs a role (system, user, assistant) and text content"
    return None
