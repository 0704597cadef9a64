"""Embedding providers behind one :class:`Embedder` interface, and how one is chosen."""

from __future__ import annotations

from rag_assets.embed.base import Embedder, l2_normalise
from rag_assets.embed.errors import (
    EmbeddingAuthError,
    EmbeddingBatchError,
    EmbeddingError,
    ProviderUnavailable,
)
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.embed.selection import (
    PROVIDERS,
    EmbedderSettings,
    OllamaSettings,
    OpenAISettings,
    Selection,
    canonical_name,
    query_embedder,
    select_embedder,
)

KNOWN_EMBEDDERS = PROVIDERS + ("openrouter",)


class UnknownEmbedderError(ValueError):
    """The configured embedder name is not one this version knows."""


def create_embedder(name: str, dimension: int = 384) -> Embedder:
    """An embedder by name with default settings (``auto`` probes what is available)."""
    if canonical_name(name) not in PROVIDERS:
        raise UnknownEmbedderError(f"unknown embedder {name!r}; choose one of: {', '.join(PROVIDERS)}")
    return select_embedder(EmbedderSettings(name=name, hashing={"dimension": dimension})).embedder


__all__ = [
    "Embedder",
    "HashingEmbedder",
    "EmbedderSettings",
    "OpenAISettings",
    "OllamaSettings",
    "Selection",
    "EmbeddingError",
    "EmbeddingAuthError",
    "EmbeddingBatchError",
    "ProviderUnavailable",
    "UnknownEmbedderError",
    "create_embedder",
    "select_embedder",
    "query_embedder",
    "l2_normalise",
    "KNOWN_EMBEDDERS",
]
