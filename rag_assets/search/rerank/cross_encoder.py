"""A local cross-encoder (sentence-transformers ``CrossEncoder``) from a folder on disk.

The model reads query and passage together, which is what makes it a better judge than
the embeddings that found the candidates. It runs in this process on the CPU, so it is a
local reranker: the Private tier may use it. Like the local embedder
(:mod:`rag_assets.embed.local`) it never downloads: ``model_path`` must be a folder holding
a saved model (``config.json``), the Hub is switched off before sentence-transformers is
imported, and the folder is opened with ``local_files_only=True``.

sentence-transformers and PyTorch come with the ``local`` extra (``pip install
'.[local]'``); without them this module still imports, and the first ``rerank`` raises
:class:`~rag_assets.search.rerank.base.RerankerUnavailable` saying what to install. The
model loads on first use, once. A model with one output (ms-marco, bge-reranker) scores
through its sigmoid, in [0, 1]; a model with several labels is refused, since which label
means "relevant" is unknown.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rag_assets.embed.local import INSTALL_HINT, has_module, set_offline_mode
from rag_assets.search.rerank.base import RerankError, RerankerUnavailable


def cross_encoder_status(model_path: str | None) -> tuple[bool, str]:
    """Whether the cross-encoder can run here, without importing PyTorch or loading weights.
    The folder is checked first: a wrong path is the same mistake with or without the extra."""
    if not model_path or not (Path(model_path).expanduser() / "config.json").is_file():
        return False, f"reranker.model_path {model_path!r} is not a folder holding a model (no config.json in it)"
    if not has_module("sentence_transformers") or not has_module("torch"):
        return False, f"sentence-transformers and PyTorch are not installed: {INSTALL_HINT}"
    return True, f"cross-encoder from {Path(model_path).expanduser()}"


class CrossEncoderReranker:
    """Scores (query, passage) pairs with a local CrossEncoder, ``batch_size`` pairs at a time."""

    local = True

    def __init__(self, model_path: str, *, batch_size: int = 16, device: str = "cpu") -> None:
        self.model_path = str(Path(model_path).expanduser())
        self.batch_size = batch_size
        self.device = device
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"cross_encoder:{Path(self.model_path).name}"

    def rerank(self, query: str, passages: Sequence[str]) -> list[float]:
        if not passages:
            return []
        model = self._load()
        try:
            scores = model.predict(
                [(query, p) for p in passages],
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
            )
        except Exception as exc:  # a tokenizer or torch failure on some input: the search goes on without it
            raise RerankError(f"the cross-encoder {self.name} failed: {type(exc).__name__}: {exc}") from exc
        scores = np.asarray(scores, dtype=np.float64).reshape(len(passages), -1)
        if scores.shape[1] != 1:
            raise RerankError(
                f"the cross-encoder {self.name} gives {scores.shape[1]} labels per pair; a reranker needs one relevance score"
            )
        return [float(s) for s in scores[:, 0]]

    def close(self) -> None:
        self._model = None

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                self._model = self._open()
            return self._model

    def _open(self) -> Any:
        available, why = cross_encoder_status(self.model_path)
        if not available:
            raise RerankerUnavailable(f"the cross-encoder reranker cannot run: {why}")
        set_offline_mode()
        from sentence_transformers import CrossEncoder

        try:
            return CrossEncoder(self.model_path, device=self.device, local_files_only=True)
        except Exception as exc:  # corrupt weights, unknown architecture: one clear error
            raise RerankerUnavailable(f"could not load the cross-encoder from {self.model_path}: {exc}") from exc
