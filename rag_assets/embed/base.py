"""The interface every embedding provider implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np  # annotations only: `rag status` reads no vectors and never loads numpy


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension.

    Documents and queries go through separate methods because asymmetric models
    (nomic-embed-text, e5, ...) embed them with different prefixes or towers.
    """

    @property
    def model(self) -> str:
        """The model name recorded in every output, so an index is never mixed."""
        ...

    @property
    def dimension(self) -> int: ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, shape ``(len(texts), dimension)``, float32."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """One vector, shape ``(dimension,)``, float32."""
        ...


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; all-zero rows stay zero instead of becoming NaN."""
    import numpy as np

    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (matrix / norms).astype(np.float32, copy=False)
