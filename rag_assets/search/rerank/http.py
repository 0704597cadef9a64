"""The common ``/rerank`` API, as Cohere, Jina, Voyage and self-hosted rerankers serve it.

Request (``POST {base_url}/rerank``)::

    {"model": "...", "query": "...", "documents": ["...", ...], "top_n": <all of them>}

Answer::

    {"results": [{"index": 3, "relevance_score": 0.91}, ...]}

``top_n`` asks for every passage, so each gets a score; a passage the answer leaves out
anyway ranks below all scored ones. ``model`` is sent when configured (self-hosted servers
that serve one model may not need it). An answer whose indexes are out of range, repeated,
or whose scores are not finite numbers is malformed and retried like a 5xx.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rag_assets.base.http_retry import MalformedResponse
from rag_assets.search.rerank.remote import RemoteReranker


class HttpReranker(RemoteReranker):
    """Scores passages with one ``/rerank`` request per search."""

    provider = "http"

    @property
    def endpoint(self) -> str:
        return f"{self.base_url}/rerank"

    def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        payload: dict[str, Any] = {"query": query, "documents": list(passages), "top_n": len(passages)}
        if self.model:
            payload = {"model": self.model, **payload}
        return self._post(payload, lambda body: parse_results(body, len(passages)), batch="rerank", count=len(passages))


def parse_results(body: Any, expected: int) -> list[float]:
    """``{"results": [{"index", "relevance_score"}]}`` -> one score per passage, in order.
    Passages the answer left out get ``-inf`` (last); anything inconsistent is malformed."""
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list):
        raise MalformedResponse("no 'results' list in the response")
    scores = [-math.inf] * expected
    seen: set[int] = set()
    for item in results:
        if not isinstance(item, dict):
            raise MalformedResponse("a result is not an object")
        index, score = item.get("index"), item.get("relevance_score", item.get("score"))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < expected or index in seen:
            raise MalformedResponse(f"result index {index!r} is not one of the {expected} documents sent, once")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise MalformedResponse(f"result {index} has no finite relevance_score ({score!r})")
        seen.add(index)
        scores[index] = float(score)
    if not seen:
        raise MalformedResponse("the response scored none of the documents")
    return scores
