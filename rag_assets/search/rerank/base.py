"""What every reranker is: one call that scores passages against a query, and its errors.

A reranker returns one score per passage, higher = more relevant, in [0, 1] for the
built-in providers (a chat model's 0-10 divided by ten, the /rerank API's
``relevance_score``, a cross-encoder's sigmoid). Only the order matters to the search;
the scores are shown beside the fused ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


class RerankError(RuntimeError):
    """The reranker could not score the passages (down, timed out after its retries, a bad
    answer); the search goes on in its fused order and says why."""


class RerankerUnavailable(RerankError):
    """The reranker cannot run here at all (a library or the model folder is missing)."""


@runtime_checkable
class Reranker(Protocol):
    """Scores passages for a query: ``rerank(query, passages)[i]`` belongs to ``passages[i]``."""

    @property
    def name(self) -> str:
        """Provider and model, for the result and the logs (``http:bge-reranker-v2-m3``)."""
        ...

    @property
    def local(self) -> bool:
        """True when passages never leave this process or go only to an approved local host."""
        ...

    def rerank(self, query: str, passages: Sequence[str]) -> list[float]: ...

    def close(self) -> None: ...
