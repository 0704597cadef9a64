"""OpenAI-compatible ``/v1/embeddings``: OpenRouter by default, or OpenAI, vLLM, LM Studio, llama.cpp."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np  # annotations only: `rag status` reads no vectors and never loads numpy

from rag_assets.base.http_retry import MalformedResponse, RetryPolicy
from rag_assets.config.providers import OPENAI_DEFAULT_DIMENSION as DEFAULT_DIMENSION
from rag_assets.config.providers import OPENAI_DEFAULT_MODEL as DEFAULT_MODEL
from rag_assets.config.providers import OPENROUTER_BASE_URL
from rag_assets.embed.http import HttpBatchSender, RemoteEmbedder, validate_vectors


class OpenAICompatibleEmbedder(RemoteEmbedder):
    """Embeds through any server that speaks the OpenAI embeddings API."""

    provider = "openai"

    def __init__(
        self,
        *,
        base_url: str = OPENROUTER_BASE_URL,
        model: str = DEFAULT_MODEL,
        dimension: int = DEFAULT_DIMENSION,
        api_key: str | None = None,
        batch_size: int = 50,
        policy: RetryPolicy = RetryPolicy(),
        send_dimensions: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        sender = HttpBatchSender(provider=f"openai-compatible ({self.base_url})", policy=policy, headers=headers)
        super().__init__(model=model, dimension=dimension, batch_size=batch_size, sender=sender)
        # Only text-embedding-3 models accept `dimensions`; other servers reject the field.
        self._send_dimensions = send_dimensions

    def _endpoint(self) -> str:
        return f"{self.base_url}/embeddings"

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self._model, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            payload["dimensions"] = self._dimension
        return payload

    def _parse(self, body: Any, expected: int) -> tuple[np.ndarray, int]:
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise MalformedResponse("no 'data' list in the response")
        items = [item if isinstance(item, dict) else {} for item in body["data"]]
        items.sort(key=lambda item: item.get("index", 0))
        vectors = validate_vectors([item.get("embedding") for item in items], expected, self._dimension)
        usage = body.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        return vectors, int(usage.get("total_tokens") or usage.get("prompt_tokens") or 0)
