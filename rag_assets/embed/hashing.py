"""The offline default embedder: deterministic feature hashing.

Word unigrams and bigrams are hashed (BLAKE2b, not Python's salted ``hash``, so
vectors are identical across processes and machines) into a fixed number of
signed buckets, weighted by sublinear term frequency and L2-normalised. It
needs no network, no key and no model download, and gives a lexical-semantic
baseline good enough for a first index; swap in a neural provider for meaning.
Runs of CJK characters, which have no spaces, are split into character bigrams
so that such text is still matched.

A batch is embedded with numpy rather than feature by feature: every word gets an
id, bigrams are pairs of ids, and each text's features are counted in the order
they first occur, so that every bucket receives the same float32 additions in the
same order as the plain definition (``reference_vector``): the vectors are
bit-identical to it, and to the browser's ``rag-search.js``.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rag_assets.base.cjk import WORD, bigrams, has_cjk
from rag_assets.embed.base import l2_normalise

if TYPE_CHECKING:
    import numpy as np  # imported where vectors are made: `rag status` never loads numpy

MODEL_NAME = "rag-assets/feature-hash-v1"

# ASCII bytes that are not word characters (re's \w: letters, digits, underscore) become
# spaces, so that str.split() yields exactly WORD.findall's tokens for ASCII text, faster.
_ASCII_NON_WORD = bytes(b if chr(b).isalnum() or b == ord("_") else ord(" ") for b in range(128)) + b" " * 128
_ID_BITS = 32  # a key packs (row or word id) << 32 | id
_LOW = (1 << _ID_BITS) - 1
# The memo is dropped when it grows past these (a corpus with millions of distinct words).
_MAX_WORDS = 500_000
_MAX_PAIRS = 1_000_000
_SHORT_QUERY = 200  # characters: a query this short is embedded feature by feature


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens; CJK runs become overlapping character bigrams."""
    lowered = text.lower()
    if lowered.isascii():  # no CJK, and \w is [A-Za-z0-9_]: one translate and split
        return lowered.encode("ascii").translate(_ASCII_NON_WORD).decode("ascii").split()
    tokens: list[str] = []
    for word in WORD.findall(lowered):
        if has_cjk(word) and len(word) > 1:
            tokens.extend(bigrams(word))
        else:
            tokens.append(word)
    return tokens


def feature_bucket(feature: str, dimension: int) -> tuple[int, float]:
    """(bucket, sign) of a feature: BLAKE2b's first 8 bytes, modulo the dimension; the top bit the sign."""
    digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
    return digest % dimension, 1.0 if digest >> 63 else -1.0


def reference_vector(text: str, dimension: int = 384, bigram_weight: float = 0.5) -> np.ndarray:
    """One text's vector by the plain definition, feature by feature (slow; the tests' reference):
    unigrams then bigrams, each in the order it first occurs, added into float32 buckets."""
    import numpy as np

    out = np.zeros(dimension, dtype=np.float32)
    tokens = tokenize(text)
    for feature, count in Counter(tokens).items():
        bucket, sign = feature_bucket(feature, dimension)
        out[bucket] += sign * (1.0 + math.log(count))
    for feature, count in Counter(f"{a} {b}" for a, b in zip(tokens, tokens[1:])).items():
        bucket, sign = feature_bucket(feature, dimension)
        out[bucket] += sign * bigram_weight * (1.0 + math.log(count))
    return l2_normalise(out[None, :])[0]


def first_occurrence_counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` in the order each first occurs, and how often each occurs
    (what ``Counter(keys)`` iterates, without a stable sort)."""
    import numpy as np

    if keys.size == 0:
        return keys, keys
    perm = np.argsort(keys)
    ordered = keys[perm]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    first = np.minimum.reduceat(perm, starts)  # a group's earliest position, whatever the sort did with ties
    # Each count put at its key's first position, then read in position order: the order of
    # first occurrence, without sorting the groups a second time.
    count_at = np.zeros(keys.size, dtype=np.int64)
    count_at[first] = np.diff(np.append(starts, keys.size))
    firsts = np.flatnonzero(count_at)
    return keys[firsts], count_at[firsts]


class HashingEmbedder:
    """Feature-hashing embedder (see the module docstring)."""

    provider = "hashing"

    def __init__(self, dimension: int = 384, bigram_weight: float = 0.5) -> None:
        if dimension <= 0:
            raise ValueError("dimension must be positive")
        self._dimension = dimension
        self._bigram_weight = bigram_weight
        # One embedding at a time: the memo below is shared (a server embeds queries on threads).
        self._lock = threading.Lock()
        self._memo_ready = False  # made on the first batch: `rag status` builds an embedder but no vectors

    def _forget(self) -> None:
        """An empty memo: word -> id, with each id's bucket and sign; word pair -> signed bucket."""
        import numpy as np

        from rag_assets.embed.key_table import KeyTable

        self._ids: dict[str, int] = {}
        self._words: list[str] = []
        self._word_bucket = np.zeros(1024, dtype=np.int64)
        self._word_sign = np.zeros(1024, dtype=np.float64)
        # (id << 32 | id) -> bucket + 1, negated for sign -1; a pair's slot is its id within a batch.
        self._pair_code = KeyTable()
        self._log_weight = np.zeros(0, dtype=np.float64)  # 1 + log(count), index count - 1
        self._memo_ready = True

    def __getstate__(self) -> dict:
        """Pickled without the lock and the memo (both are rebuilt)."""
        return {"_dimension": self._dimension, "_bigram_weight": self._bigram_weight}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._memo_ready = False

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

        with self._lock:
            if not self._memo_ready or len(self._words) > _MAX_WORDS or len(self._pair_code) > _MAX_PAIRS:
                self._forget()
            matrix = np.zeros(len(texts) * self._dimension, dtype=np.float32)
            words: list[str] = []
            lengths = []
            for text in texts:
                tokens = tokenize(text)
                words.extend(tokens)
                lengths.append(len(tokens))
            ids = self._word_ids(words)
            rows = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
            # Unigrams first, then bigrams, as the definition adds them (float32 sums depend on order).
            self._add_unigrams(matrix, rows, ids)
            self._add_bigrams(matrix, rows, ids)
        return l2_normalise(matrix.reshape(len(texts), self._dimension))

    def embed_query(self, text: str) -> np.ndarray:
        if len(text) <= _SHORT_QUERY:  # a few words: numpy's fixed costs per call would be most of the time
            return reference_vector(text, self._dimension, self._bigram_weight)
        return self.embed_documents([text])[0]

    def _word_ids(self, words: list[str]) -> np.ndarray:
        """The id of every word, new words hashed and remembered."""
        import numpy as np

        ids = np.fromiter(map(self._ids.get, words, itertools.repeat(-1)), dtype=np.int64, count=len(words))
        for i in np.flatnonzero(ids < 0).tolist():
            known = self._ids.get(words[i])  # a new word seen twice in the batch is remembered once
            ids[i] = self._remember_word(words[i]) if known is None else known
        return ids

    def _remember_word(self, word: str) -> int:
        import numpy as np

        new = len(self._words)
        if new >= self._word_bucket.size:
            self._word_bucket = np.resize(self._word_bucket, 2 * new)
            self._word_sign = np.resize(self._word_sign, 2 * new)
        self._ids[word] = new
        self._words.append(word)
        self._word_bucket[new], self._word_sign[new] = feature_bucket(word, self._dimension)
        return new

    def _weights(self, counts: np.ndarray) -> np.ndarray:
        """1 + log(count) as math.log computes it (a table, so numpy's own log cannot differ)."""
        import numpy as np

        top = int(counts.max(initial=0))
        if top > self._log_weight.size:
            self._log_weight = np.array([1.0 + math.log(c) for c in range(1, max(top, 1024) + 1)])
        return self._log_weight[counts - 1]

    def _add_unigrams(self, matrix: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> None:
        import numpy as np

        keys, counts = first_occurrence_counts((rows << _ID_BITS) | ids)
        word = keys & _LOW
        values = (self._word_sign[word] * self._weights(counts)).astype(np.float32)
        # ufunc.at adds one element after the other, in order: the same sums as `+=` per feature.
        np.add.at(matrix, (keys >> _ID_BITS) * self._dimension + self._word_bucket[word], values)

    def _add_bigrams(self, matrix: np.ndarray, rows: np.ndarray, ids: np.ndarray) -> None:
        import numpy as np

        within = rows[:-1] == rows[1:]  # no pair across two texts
        pairs = (ids[:-1][within] << _ID_BITS) | ids[1:][within]
        slots = self._pair_slots(pairs)
        keys, counts = first_occurrence_counts((rows[:-1][within] << _ID_BITS) | slots)
        code = self._pair_code.values[keys & _LOW]
        signs = np.where(code > 0, 1.0, -1.0) * self._bigram_weight
        values = (signs * self._weights(counts)).astype(np.float32)
        np.add.at(matrix, (keys >> _ID_BITS) * self._dimension + np.abs(code) - 1, values)

    def _pair_slots(self, pairs: np.ndarray) -> np.ndarray:
        """Each word pair's slot in the pair memo, whose value is the signed bucket (bucket + 1,
        negative for sign -1) of the feature "a b"; pairs not seen before are hashed and added."""
        import numpy as np

        slots = self._pair_code.find(pairs)
        missing = slots < 0
        if not missing.any():
            return slots
        new, where = np.unique(pairs[missing], return_inverse=True)
        codes = []
        for pair in new.tolist():
            bucket, sign = feature_bucket(
                f"{self._words[pair >> _ID_BITS]} {self._words[pair & _LOW]}", self._dimension
            )
            codes.append(bucket + 1 if sign > 0 else -(bucket + 1))
        if self._pair_code.add(new, np.array(codes, dtype=np.int64)):
            return self._pair_code.find(pairs)  # the table grew: every slot moved
        slots[missing] = self._pair_code.find(new)[where.reshape(-1)]
        return slots
