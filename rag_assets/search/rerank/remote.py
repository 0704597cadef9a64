"""What the HTTP rerankers share: the embedders' sender (retries, backoff, Retry-After) and,
for the Private tier, its egress client.

A :class:`RemoteReranker` POSTs JSON through :class:`rag_assets.embed.http.HttpBatchSender`,
so 429, 5xx, timeouts, dropped connections and malformed answers are retried exactly as
embedding batches are. With ``egress`` (a Private-tier search) every request goes through
:class:`rag_assets.base.egress.PrivateEgress`'s client: approved host only, no proxy, no
redirect; the host is checked before the first attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rag_assets.base.egress import PrivateEgress
from rag_assets.base.http_retry import RetryPolicy
from rag_assets.config.masking import mask_url
from rag_assets.embed.errors import EmbeddingAuthError, EmbeddingError
from rag_assets.embed.http import HttpBatchSender
from rag_assets.search.rerank.base import RerankError


class RemoteReranker:
    """Common shape of the HTTP rerankers; subclasses build the request and read the answer."""

    provider = "remote"

    def __init__(
        self,
        *,
        base_url: str,
        model: str | None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        policy: RetryPolicy = RetryPolicy(),
        egress: PrivateEgress | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key_env = api_key_env
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._sender = HttpBatchSender(
            provider=f"{self.provider} reranker ({mask_url(self.base_url)})",
            policy=policy,
            headers=headers,
            egress=egress,
        )

    @property
    def name(self) -> str:
        return f"{self.provider}:{self.model}" if self.model else self.provider

    @property
    def local(self) -> bool:
        return self._sender.egress is not None

    @property
    def endpoint(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        self._sender.close()

    def _post(
        self, payload: dict[str, Any], parse: Callable[[Any], list[float]], *, batch: str, count: int
    ) -> list[float]:
        """Send with the sender's retries; its errors become :class:`RerankError` (PrivacyError
        passes through: a refusal is never a degraded search)."""
        try:
            return self._sender.post(self.endpoint, payload, lambda body: (parse(body), 0), batch=batch, n_texts=count)
        except EmbeddingAuthError:
            key = f"; check the key in ${self._api_key_env}" if self._api_key_env else "; set reranker.api_key_env"
            raise RerankError(
                f"the {self.provider} reranker at {mask_url(self.base_url)} refused the request (HTTP 401/403){key}"
            ) from None
        except EmbeddingError as exc:
            raise RerankError(str(exc)) from None
