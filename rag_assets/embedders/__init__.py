"""Embedding providers behind one :class:`Embedder` interface."""

from __future__ import annotations

from rag_assets.embedders.base import Embedder, l2_normalise
from rag_assets.embedders.hashing import HashingEmbedder

KNOWN_EMBEDDERS = ("hashing", "auto")


class UnknownEmbedderError(ValueError):
    """The configured embedder name is not one this version knows."""


def create_embedder(name: str, dimension: int = 384) -> Embedder:
    """The embedder configured by name (``embedder:`` in rag.yaml, ``RAG_EMBEDDER``, ``--embedder``)."""
    # `auto` picks the best available provider; with only the offline one built in, that is hashing.
    if name in ("hashing", "auto"):
        return HashingEmbedder(dimension=dimension)
    raise UnknownEmbedderError(
        f"unknown embedder {name!r}; choose one of: {', '.join(KNOWN_EMBEDDERS)}"
    )


__all__ = ["Embedder", "HashingEmbedder", "create_embedder", "l2_normalise", "UnknownEmbedderError"]
