"""Errors of the embedding providers, split by what the build should do about them."""

from __future__ import annotations


class EmbeddingError(RuntimeError):
    """Base class: something went wrong while embedding."""


class EmbeddingAuthError(EmbeddingError):
    """The provider refused the key (401/403): stop at once, retrying cannot help."""


class EmbeddingBatchError(EmbeddingError):
    """One batch failed after its retries; the build goes on and retries it next run."""


class ProviderUnavailable(EmbeddingError):
    """The provider that built an index cannot be reached to embed a query."""
