"""Ollama ``POST /api/embed`` with nomic-embed-text's task prefixes, and its health endpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rag_assets.base.egress import PrivateEgress
from rag_assets.base.http_retry import MalformedResponse, RetryPolicy
from rag_assets.config.providers import OLLAMA_DEFAULT_DIMENSION as DEFAULT_DIMENSION
from rag_assets.config.providers import OLLAMA_DEFAULT_MODEL as DEFAULT_MODEL
from rag_assets.config.providers import is_loopback_host, ollama_host, url_host
from rag_assets.embed.http import HttpBatchSender, RemoteEmbedder, validate_vectors

if TYPE_CHECKING:
    import httpx  # imported where a request is made: a search that sends nothing never loads it
    import numpy as np  # annotations only: `rag status` probes Ollama and never loads numpy

# nomic-embed-text is trained with these task prefixes; without them retrieval quality drops.
NOMIC_PREFIXES = ("search_document: ", "search_query: ")


def model_matches(wanted: str, available: str) -> bool:
    """Ollama lists ``name:tag``; a bare name means ``:latest``."""

    def norm(name: str) -> str:
        return name if ":" in name else f"{name}:latest"

    return norm(wanted) == norm(available)


@dataclass(frozen=True)
class OllamaHealth:
    online: bool
    models: list[str] = field(default_factory=list)
    error: str | None = None

    def has_model(self, model: str) -> bool:
        return any(model_matches(model, m) for m in self.models)


def probe_client(host: str, timeout: float, egress: PrivateEgress | None = None) -> httpx.Client:
    """The client for a health probe: the Private tier's when given (no proxy, approved hosts
    only; a refused host raises PrivacyError rather than reading as "offline"). Otherwise
    environment proxies apply to remote hosts only: a proxy cannot answer for this machine's
    loopback, it would probe its own."""
    import ssl

    import httpx

    if egress is not None:
        return egress.client(timeout=timeout)
    loopback = is_loopback_host(url_host(host))
    if loopback and urlsplit(host).scheme == "http":
        # Plain HTTP to this machine, with no proxy and no redirect followed, never negotiates
        # TLS, so the default context's CA bundle (about 20 ms of every `rag status`) is not
        # loaded. This context trusts no root: were TLS ever attempted, it would fail closed.
        return httpx.Client(timeout=timeout, trust_env=False, verify=ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    return httpx.Client(timeout=timeout, trust_env=not loopback)


def ollama_health(host: str, timeout: float = 2.0, egress: PrivateEgress | None = None) -> OllamaHealth:
    """``GET /api/tags``: is the service up, and which models are pulled."""
    import httpx

    try:
        with probe_client(host, timeout, egress) as client:
            response = client.get(f"{host}/api/tags")
        response.raise_for_status()
        models = [m.get("name") or m.get("model") for m in response.json().get("models", [])]
        return OllamaHealth(True, [m for m in models if m])
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return OllamaHealth(False, [], f"{type(exc).__name__}: {exc}".strip(": "))


class OllamaEmbedder(RemoteEmbedder):
    """Embeds with a model served by Ollama."""

    provider = "ollama"

    def __init__(
        self,
        *,
        host: str | None = None,
        model: str = DEFAULT_MODEL,
        dimension: int = DEFAULT_DIMENSION,
        batch_size: int = 50,
        policy: RetryPolicy = RetryPolicy(),
        prefixes: tuple[str, str] | None = None,
        egress: PrivateEgress | None = None,
    ) -> None:
        self.host = ollama_host(host)
        sender = HttpBatchSender(provider=f"ollama ({self.host})", policy=policy, egress=egress)
        super().__init__(model=model, dimension=dimension, batch_size=batch_size, sender=sender)
        if prefixes is None:
            prefixes = NOMIC_PREFIXES if model.split(":")[0].endswith("nomic-embed-text") else ("", "")
        self._document_prefix, self._query_prefix = prefixes

    def health(self, timeout: float = 2.0) -> OllamaHealth:
        return ollama_health(self.host, timeout, self._sender.egress)

    def _endpoint(self) -> str:
        return f"{self.host}/api/embed"

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self._model, "input": texts}

    def _parse(self, body: Any, expected: int) -> tuple[np.ndarray, int]:
        if not isinstance(body, dict) or "embeddings" not in body:
            raise MalformedResponse("no 'embeddings' field in the response")
        tokens = body.get("prompt_eval_count") or 0
        return validate_vectors(body["embeddings"], expected, self._dimension), int(tokens)
