"""Choosing the embedding provider: by name, or ``auto`` with a logged reason.

``auto`` tries, in order: the OpenAI-compatible API when its key variable is set
(OpenRouter by default), Ollama when it answers and has the model pulled,
all-MiniLM-L6-v2 in numpy (``minilm``: no torch) when its libraries and weights are
installed, the local sentence-transformers model when installed, and finally the
offline hashing embedder. The reason for the choice is kept so the UI and ``rag status``
can say which model built which index and why.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from rag_assets.base.egress import PrivateEgress
from rag_assets.base.http_retry import RetryPolicy
from rag_assets.config.masking import mask_url
from rag_assets.config.providers import PROVIDERS, canonical_name
from rag_assets.config.settings import EmbedderSettings, LlmSettings, OllamaSettings, OpenAISettings
from rag_assets.embed.base import Embedder
from rag_assets.embed.errors import ProviderUnavailable
from rag_assets.embed.hashing import MODEL_NAME as HASHING_MODEL
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.embed.ollama import OllamaEmbedder, OllamaHealth, ollama_health, ollama_host
from rag_assets.embed.openai_compat import OpenAICompatibleEmbedder


@dataclass(frozen=True)
class Selection:
    embedder: Embedder
    provider: str
    reason: str


def retry_policy(settings: EmbedderSettings | LlmSettings) -> RetryPolicy:
    """How a remote provider retries, from the embedder settings (or the chat model's: the same keys)."""
    return RetryPolicy(
        max_retries=settings.max_retries,
        base_backoff=settings.backoff,
        timeout=settings.timeout,
        retry_after_cap=settings.retry_after_cap,
    )


def select_embedder(
    settings: EmbedderSettings,
    environ: Mapping[str, str] | None = None,
    *,
    private_egress: PrivateEgress | None = None,
    probed: OllamaHealth | None = None,
) -> Selection:
    """The configured provider, or for ``auto`` the first available one, with the reason.

    With ``private_egress`` (the Private tier), ``auto`` never picks the remote API and
    considers Ollama only at a host the egress rule approves; Ollama is probed and used
    through that rule's client. ``probed``: Ollama's health as just probed without egress
    rule (by :func:`service_status`), so ``auto`` does not ask it twice.
    """
    env = os.environ if environ is None else environ
    name = canonical_name(settings.name)
    if name == "auto":
        return _auto(settings, env, private_egress, probed)
    if name == "openai":
        return Selection(_openai(settings, env), "openai", "configured: openai-compatible API")
    if name == "ollama":
        return Selection(_ollama(settings, env, private_egress), "ollama", "configured: ollama")
    if name == "local":
        return Selection(_local(settings), "local", "configured: local model")
    if name == "minilm":
        return Selection(_minilm(settings), "minilm", "configured: all-MiniLM-L6-v2 in numpy")
    if name == "hashing":
        return Selection(HashingEmbedder(settings.hashing_dimension), "hashing", "configured: hashing")
    raise ValueError(f"unknown embedder {settings.name!r}; choose one of: {', '.join(PROVIDERS)}")


def _auto(
    settings: EmbedderSettings,
    env: Mapping[str, str],
    egress: PrivateEgress | None = None,
    probed: OllamaHealth | None = None,
) -> Selection:
    skipped: list[str] = []
    key_env = settings.openai.api_key_env
    local_only = egress is not None
    if local_only:
        skipped.append("local only: no remote API")
    elif env.get(key_env):
        return Selection(_openai(settings, env), "openai", f"auto: {key_env} is set")
    else:
        skipped.append(f"{key_env} not set")
    host = ollama_host(settings.ollama.host, env)
    if egress is not None and not egress.allows(host):
        skipped.append(f"Ollama at {host} is not local")
    else:
        health = probed if probed is not None and egress is None else ollama_health(host, timeout=1.0, egress=egress)
        if health.online and health.has_model(settings.ollama.model):
            return Selection(
                _ollama(settings, env, egress), "ollama", f"auto: Ollama at {host} has {settings.ollama.model}"
            )
        skipped.append(
            f"Ollama at {host} lacks {settings.ollama.model}" if health.online else f"Ollama at {host} is not reachable"
        )
    from rag_assets.embed.local import local_model_status
    from rag_assets.embed.minilm import minilm_status

    # minilm before local: the same vectors, without importing torch (seconds) on every start.
    for provider, status, make in (("minilm", minilm_status, _minilm), ("local", local_model_status, _local)):
        available, why = status(settings.local_model_path)
        if available:
            return Selection(make(settings), provider, f"auto: {why} ({'; '.join(skipped)})")
        skipped.append(why)
    return Selection(
        HashingEmbedder(settings.hashing_dimension), "hashing", f"auto: offline hashing ({'; '.join(skipped)})"
    )


def _openai(settings: EmbedderSettings, env: Mapping[str, str]) -> OpenAICompatibleEmbedder:
    o = settings.openai
    return OpenAICompatibleEmbedder(
        base_url=env.get("RAG_OPENAI_BASE_URL") or o.base_url,
        model=o.model,
        dimension=o.dimension,
        api_key=env.get(o.api_key_env),
        batch_size=settings.batch_size,
        policy=retry_policy(settings),
        send_dimensions=o.send_dimensions,
    )


def _ollama(settings: EmbedderSettings, env: Mapping[str, str], egress: PrivateEgress | None = None) -> OllamaEmbedder:
    o = settings.ollama
    return OllamaEmbedder(
        host=ollama_host(o.host, env),
        model=o.model,
        dimension=o.dimension,
        batch_size=settings.batch_size,
        policy=retry_policy(settings),
        egress=egress,
    )


def _local(settings: EmbedderSettings) -> Embedder:
    from rag_assets.embed.local import LocalEmbedder

    return LocalEmbedder(model_path=settings.local_model_path)


def _minilm(settings: EmbedderSettings) -> Embedder:
    from rag_assets.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder(model_path=settings.local_model_path)


def _same_vectors(provider: str, model: str, settings: EmbedderSettings) -> Embedder:
    """For an index built by ``local`` or ``minilm``: that provider if it runs here, else the other.

    Both run the same folder's weights to the same vectors (to 1e-4) and record the same
    model name, so an index built with sentence-transformers is searchable without torch.
    """
    from rag_assets.embed.local import local_model_status
    from rag_assets.embed.minilm import minilm_status

    options = {"local": (local_model_status, _local), "minilm": (minilm_status, _minilm)}
    reasons = []
    for name in (provider, "minilm" if provider == "local" else "local"):
        status, make = options[name]
        available, why = status(settings.local_model_path)
        if available:
            return make(settings)
        reasons.append(why)
    raise ProviderUnavailable(f"the index was built with the local model {model}, but {'; and '.join(reasons)}")


def query_embedder(
    provider: str,
    model: str,
    dimension: int,
    settings: EmbedderSettings,
    environ: Mapping[str, str] | None = None,
    *,
    egress: PrivateEgress | None = None,
) -> Embedder:
    """The embedder that built an index, for embedding queries; a clear error if unavailable.
    With ``egress`` (a Private-tier store) Ollama is probed and used only through its client."""
    env = os.environ if environ is None else environ
    if provider == "hashing":
        return HashingEmbedder(dimension)
    if provider == "openai":
        key_env = settings.openai.api_key_env
        if not env.get(key_env):
            raise ProviderUnavailable(
                f"the index was built with {model} through the OpenAI-compatible API, but {key_env} is not set; "
                "set it, or rebuild the index with another embedder"
            )
        return OpenAICompatibleEmbedder(
            base_url=env.get("RAG_OPENAI_BASE_URL") or settings.openai.base_url,
            model=model,
            dimension=dimension,
            api_key=env.get(key_env),
            policy=retry_policy(settings),
            send_dimensions=settings.openai.send_dimensions,
        )
    if provider == "ollama":
        host = ollama_host(settings.ollama.host, env)
        health = ollama_health(host, timeout=2.0, egress=egress)
        if not health.online:
            raise ProviderUnavailable(
                f"the index was built with {model} on Ollama, but Ollama at {host} is not reachable "
                f"({health.error}); start it (ollama serve) or rebuild the index with another embedder"
            )
        if not health.has_model(model):
            raise ProviderUnavailable(f"Ollama at {host} does not have {model}; run: ollama pull {model}")
        return OllamaEmbedder(host=host, model=model, dimension=dimension, policy=retry_policy(settings), egress=egress)
    if provider in ("local", "minilm"):
        return _same_vectors(provider, model, settings)
    raise ProviderUnavailable(f"the index was built by an unknown provider {provider!r} ({model})")


__all__ = [
    "EmbedderSettings",
    "OpenAISettings",
    "OllamaSettings",
    "Selection",
    "select_embedder",
    "query_embedder",
    "HASHING_MODEL",
    "PROVIDERS",
]


@dataclass(frozen=True)
class ServiceStatus:
    """What each provider looks like right now, for the UI and ``rag status``."""

    configured: str
    selected: str
    model: str
    reason: str
    ollama_host: str
    ollama_online: bool
    ollama_models: tuple[str, ...]
    ollama_error: str | None
    openai_key_set: bool
    local_available: bool
    local_reason: str
    minilm_available: bool = False
    minilm_reason: str = ""

    @property
    def selected_reachable(self) -> bool:
        if self.selected == "ollama":
            return self.ollama_online and any(_same_model(self.model, m) for m in self.ollama_models)
        if self.selected == "openai":
            return self.openai_key_set
        if self.selected == "local":
            return self.local_available
        if self.selected == "minilm":
            return self.minilm_available
        return True

    def lines(self) -> list[str]:
        ollama = (
            f"online, models: {', '.join(self.ollama_models) or 'none pulled'}"
            if self.ollama_online
            else f"offline ({self.ollama_error})"
        )
        return [
            f"embedder   {self.configured} -> {self.selected}: {self.model} ({mask_url(self.reason)})",
            f"ollama     {mask_url(self.ollama_host)}: {mask_url(ollama)}",
            f"openai     key {'set' if self.openai_key_set else 'not set'}",
            f"local      {self.local_reason}",
            f"minilm     {self.minilm_reason}",
        ]


def _same_model(wanted: str, available: str) -> bool:
    from rag_assets.embed.ollama import model_matches

    return model_matches(wanted, available)


def service_status(settings: EmbedderSettings, environ: Mapping[str, str] | None = None) -> ServiceStatus:
    """Probe every provider (cheaply: no model is loaded) and report which one would run."""
    from rag_assets.embed.local import local_model_status
    from rag_assets.embed.minilm import minilm_status

    env = os.environ if environ is None else environ
    host = ollama_host(settings.ollama.host, env)
    health = ollama_health(host, timeout=1.0)
    local_ok, local_why = local_model_status(settings.local_model_path)
    minilm_ok, minilm_why = minilm_status(settings.local_model_path)
    selection = select_embedder(settings, env, probed=health)
    return ServiceStatus(
        configured=settings.name,
        selected=selection.provider,
        model=selection.embedder.model,
        reason=selection.reason,
        ollama_host=host,
        ollama_online=health.online,
        ollama_models=tuple(health.models),
        ollama_error=health.error,
        openai_key_set=bool(env.get(settings.openai.api_key_env)),
        local_available=local_ok,
        local_reason=local_why,
        minilm_available=minilm_ok,
        minilm_reason=minilm_why,
    )
