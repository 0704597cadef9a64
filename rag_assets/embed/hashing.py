"""The offline default embedder: deterministic feature hashing.

Word unigrams and bigrams are hashed (BLAKE2b, not Python's salted ``hash``, so
vectors are identical across processes and machines) into a fixed number of
signed buckets, weighted by sublinear term frequency and L2-normalised. It
needs no network, no key and no model download, and gives a lexical-semantic
baseline good enough for a first index; swap in a neural provider for meaning.
Runs of CJK characters, which have no spaces, are split into character bigrams
so that such text is still matched.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from typing import TYPE_CHECKING, Sequence

from rag_assets.base.cjk import WORD, bigrams, has_cjk
from rag_assets.embed.base import l2_normalise

if TYPE_CHECKING:
    import numpy as np  # imported where vectors are made: `rag status` never loads numpy

MODEL_NAME = "rag-assets/feature-hash-v1"


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens; CJK runs become overlapping character bigrams."""
    tokens: list[str] = []
    for word in WORD.findall(text.lower()):
        if has_cjk(word) and len(word) > 1:
            tokens.extend(bigrams(word))
        else:
            tokens.append(word)
    return tokens


class HashingEmbedder:
    """Feature-hashing embedder (see the module docstring)."""

    provider = "hashing"

    def __init__(self, dimension: int = 384, bigram_weight: float = 0.5) -> None:
        if dimension <= 0:
            raise ValueError("dimension must be positive")
        self._dimension = dimension
        self._bigram_weight = bigram_weight
        # Per-instance memo of feature -> (bucket, sign): vocabularies repeat heavily.
        self._buckets: dict[str, tuple[int, float]] = {}

    @property
    def model(self) -> str:
        return MODEL_NAME

    @property
    def dimension(self) -> int:
        return self._dimension

    def prepare_document(self, text: str) -> str:
        return text

    def embed_documents(self, texts: Sequence[str], *, batch_label: str | None = None) -> np.ndarray:
        import numpy as np

        matrix = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            self._accumulate(matrix[row], text)
        return l2_normalise(matrix)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]

    def _accumulate(self, out: np.ndarray, text: str) -> None:
        tokens = tokenize(text)
        features: Counter[str] = Counter(tokens)
        bigrams = Counter(f"{a} {b}" for a, b in zip(tokens, tokens[1:]))
        for feature, count in features.items():
            bucket, sign = self._bucket(feature)
            out[bucket] += sign * (1.0 + math.log(count))
        for feature, count in bigrams.items():
            bucket, sign = self._bucket(feature)
            out[bucket] += sign * self._bigram_weight * (1.0 + math.log(count))

    def _bucket(self, feature: str) -> tuple[int, float]:
        cached = self._buckets.get(feature)
        if cached is None:
            digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
            cached = (digest % self._dimension, 1.0 if digest >> 63 else -1.0)
            if len(self._buckets) < 1_000_000:
                self._buckets[feature] = cached
        return cached
