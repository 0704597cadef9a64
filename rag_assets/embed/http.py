"""Shared HTTP plumbing for remote embedding providers: the retry rules, validation, usage.

The policy and its arithmetic (backoff, ``Retry-After``) are :mod:`rag_assets.base.http_retry`,
which the chat models and rerankers share.

Retry rules (per batch, at most ``max_retries`` retries after the first attempt):

- 429: wait for ``Retry-After`` (seconds or an HTTP date), capped at ``retry_after_cap``;
  without the header, back off as below.
- 5xx, timeouts, connection errors and malformed answers: exponential backoff with full
  jitter (``uniform(0, base * 2**attempt)``, capped at ``max_backoff``).
- 401/403: :class:`EmbeddingAuthError` at once, no retry: the key is wrong.
- other 4xx: the request itself is wrong; fail the batch without retrying.

A batch that still fails raises :class:`EmbeddingBatchError` naming the provider and
batch; the caller decides whether the run goes on.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rag_assets.base.egress import PrivateEgress
from rag_assets.base.http_retry import (
    MalformedResponse,
    RetryPolicy,
    backoff_seconds,
    batched,
    decode_json,
    error_text,
    retry_after_seconds,
)
from rag_assets.embed.base import l2_normalise
from rag_assets.embed.errors import EmbeddingAuthError, EmbeddingBatchError

# What a response parses into: vectors for the embedders, scores for the /rerank reranker.
Parsed = TypeVar("Parsed")

if TYPE_CHECKING:
    import httpx  # imported where a request is made: a search that sends nothing never loads it
    import numpy as np  # imported where vectors are made: `rag status` never loads numpy


@dataclass
class Usage:
    """What a provider reported and what we sent, for the run's metadata."""

    requests: int = 0
    retries: int = 0
    tokens: int = 0
    texts: int = 0

    def snapshot(self) -> Usage:
        return Usage(self.requests, self.retries, self.tokens, self.texts)

    def since(self, before: Usage) -> Usage:
        return Usage(
            self.requests - before.requests,
            self.retries - before.retries,
            self.tokens - before.tokens,
            self.texts - before.texts,
        )


def validate_vectors(raw: Any, expected: int, dimension: int) -> np.ndarray:
    """Turn a decoded list of vectors into a checked float32 matrix, or raise MalformedResponse."""
    import numpy as np

    if not isinstance(raw, list):
        raise MalformedResponse(f"expected a list of vectors, got {type(raw).__name__}")
    if len(raw) != expected:
        raise MalformedResponse(f"got {len(raw)} vectors for {expected} inputs")
    for i, vector in enumerate(raw):
        if not isinstance(vector, list) or len(vector) != dimension:
            size = len(vector) if isinstance(vector, list) else type(vector).__name__
            raise MalformedResponse(f"vector {i} has dimension {size}, expected {dimension}")
    try:
        matrix = np.asarray(raw, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise MalformedResponse(f"vectors hold non-numeric values ({exc})") from None
    if not np.isfinite(matrix).all():
        raise MalformedResponse("vectors hold NaN or infinite values")
    return l2_normalise(matrix)


@dataclass
class HttpBatchSender:
    """POSTs one batch with the retry rules above and parses the answer."""

    provider: str
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    headers: dict[str, str] = field(default_factory=dict)
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)
    usage: Usage = field(default_factory=Usage)
    # The Private tier's egress rule (rag_assets.base.egress): when set, every request goes through
    # its client (approved host only, no proxy, no redirect). None for the Public and Safe tiers.
    egress: PrivateEgress | None = None
    _client: httpx.Client | None = None

    @property
    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = self._new_client()
        return self._client

    def _new_client(self) -> httpx.Client:
        if self.egress is not None:
            return self.egress.client(timeout=self.policy.timeout, headers=self.headers)
        import httpx

        # Public and Safe text may travel through the environment's proxy (a corporate proxy
        # is legitimate for it), so this client keeps httpx's default trust_env=True.
        return httpx.Client(timeout=self.policy.timeout, headers=self.headers)

    def restrict_to(self, egress: PrivateEgress) -> None:
        """From now on send only as ``egress`` allows; a client made earlier is discarded."""
        self.close()
        self.egress = egress

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def post(
        self,
        url: str,
        payload: dict[str, Any],
        parse: Callable[[Any], tuple[Parsed, int]],
        *,
        batch: str,
        n_texts: int,
    ) -> Parsed:
        """Send, retry, parse; ``parse`` returns (vectors, tokens) or raises MalformedResponse."""
        import httpx

        if self.egress is not None:
            self.egress.check_url(url)  # refuse before the first attempt, not inside the retries
        last_problem = "no attempt made"
        for attempt in range(self.policy.max_retries + 1):
            if attempt:
                self.usage.retries += 1
            self.usage.requests += 1
            wait: float | None = None
            try:
                response = self.client.post(url, json=payload)
            except httpx.TimeoutException:
                last_problem = f"timed out after {self.policy.timeout:g}s"
            except httpx.TransportError as exc:
                last_problem = f"connection error ({type(exc).__name__}: {exc})"
            else:
                status = response.status_code
                if status in (401, 403):
                    raise EmbeddingAuthError(
                        f"{self.provider} refused the request with HTTP {status} ({error_text(response)}); "
                        "check the API key (for OpenRouter: the OPENROUTER_API_KEY variable)"
                    )
                if status == 429:
                    last_problem = "rate limited (HTTP 429)"
                    wait = retry_after_seconds(response.headers.get("retry-after"), self.policy.retry_after_cap)
                elif status >= 500:
                    last_problem = f"HTTP {status} ({error_text(response)})"
                elif status >= 400:
                    raise EmbeddingBatchError(f"{self.provider} batch {batch}: HTTP {status} ({error_text(response)})")
                else:
                    try:
                        vectors, tokens = parse(decode_json(response.content))
                    except (ValueError, MalformedResponse, KeyError, TypeError) as exc:
                        last_problem = f"malformed response: {exc}"
                    else:
                        self.usage.tokens += tokens
                        self.usage.texts += n_texts
                        return vectors
            if attempt < self.policy.max_retries:
                self.sleep(wait if wait is not None else self._backoff(attempt))
        raise EmbeddingBatchError(
            f"{self.provider} batch {batch} failed after {self.policy.max_retries} retries: {last_problem}"
        )

    def _backoff(self, attempt: int) -> float:
        return backoff_seconds(self.policy, attempt, self.rng)


class RemoteEmbedder:
    """Common shape of HTTP providers: prefixes, batching, usage; subclasses say how to talk."""

    provider = "remote"

    def __init__(self, *, model: str, dimension: int, batch_size: int, sender: HttpBatchSender) -> None:
        self._model = model
        self._dimension = dimension
        self.batch_size = batch_size
        self._sender = sender
        self._document_prefix = ""
        self._query_prefix = ""

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def usage(self) -> Usage:
        return self._sender.usage

    def prepare_document(self, text: str) -> str:
        """The exact text sent for a document (the embedding cache keys on it)."""
        return self._document_prefix + text

    def prepare_query(self, text: str) -> str:
        return self._query_prefix + text

    def embed_documents(self, texts: Sequence[str], *, batch_label: str | None = None) -> np.ndarray:
        return self._embed([self.prepare_document(t) for t in texts], batch_label)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([self.prepare_query(text)], "query")[0]

    def close(self) -> None:
        self._sender.close()

    @property
    def endpoint(self) -> str:
        return self._endpoint()

    def restrict_egress(self, egress: PrivateEgress) -> None:
        """Send every request as ``egress`` allows (the Private tier's rule; it raises to refuse)."""
        self._sender.restrict_to(egress)

    def _embed(self, texts: list[str], batch_label: str | None) -> np.ndarray:
        import numpy as np

        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        parts = []
        for number, batch in enumerate(batched(texts, self.batch_size), start=1):
            parts.append(
                self._sender.post(
                    self._endpoint(),
                    self._payload(list(batch)),
                    functools.partial(self._parse, expected=len(batch)),
                    batch=batch_label or str(number),
                    n_texts=len(batch),
                )
            )
        return np.vstack(parts)

    def _endpoint(self) -> str:
        raise NotImplementedError

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        raise NotImplementedError

    def _parse(self, body: Any, expected: int) -> tuple[np.ndarray, int]:
        raise NotImplementedError
