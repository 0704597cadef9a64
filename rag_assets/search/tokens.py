"""Counting tokens offline, for context budgets: the local model's WordPiece tokenizer when
it is installed, else a measured estimate.

Token counting
--------------
A :class:`TokenCounter` has ``name`` and ``count(text)``. :func:`default_token_counter`
picks, in this order, the first that works here, offline:

1. ``wordpiece:sentence-transformers/all-MiniLM-L6-v2``: the tokenizer of the local
   embedding model (``tokenizer.json`` read with the ``tokenizers`` library, or
   ``transformers.AutoTokenizer`` with ``local_files_only=True``), found like the local
   embedder finds its model (:func:`rag_assets.embed.local.find_local_model`).
   Special tokens, truncation (128 in that file) and padding are off.
2. ``estimate``: :class:`EstimateTokenCounter`, below.

tiktoken is not used. Its public way to load an encoding, ``tiktoken.get_encoding``,
downloads the encoding's file when its cache lacks it, with no offline switch; keeping
it offline would take replacing one of its functions at run time or relying on its
private cache layout (file names, URLs), either of which a tiktoken release may break,
and a download attempt here would hang or fail. WordPiece is a real tokenizer that is
always offline, and the estimate needs nothing.

WordPiece (an uncased BERT vocabulary) is a real tokenizer but not the LLM's. It splits
every punctuation character, so paths and code tend to cost it more tokens than the
byte-level BPE tokenizers of current LLMs, which merge runs like ``://`` or a fence;
a budget met with it is likely (not guaranteed) to be met by the LLM's count too.

The estimate counts *pieces*: every run of letters/digits/underscores is one token
plus one per further 5 characters (long or rare words split into subwords), every
punctuation character is one token, every CJK character is one token. Measured
against the WordPiece tokenizer on all 102 chunks of the sample ``content/`` (technical
Markdown: prose, shell, YAML, tables): total +1.6%, mean per-chunk error +2.9%, mean
absolute error 5.1%, range -27% (a runbook full of SSH key fingerprints) to +22%;
72% of chunks are over- rather than under-estimated. The rules of thumb did much worse
on this content: ``ceil(len/4)`` -15% mean (MAE 16%, under in 91% of chunks),
``words*1.3`` -32%, their mean -24%.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rag_assets.embed.local import has_module

TOKENIZER_KINDS = ("auto", "wordpiece", "estimate")


# --------------------------------------------------------------------------- token counters


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that counts the tokens of a text; ``name`` says which tokenizer it is.

    A counter may also set ``additive = True`` to promise that no token spans whitespace,
    so that ``count(a + "\\n\\n" + b) == count(a) + count("\\n\\n") + count(b)``;
    :func:`pack_context` then prices tries passage by passage without recounting.
    """

    name: str

    def count(self, text: str) -> int: ...


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_PIECE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")


class EstimateTokenCounter:
    """Tokenizer-free estimate; see the module docstring for the rule and its measured error."""

    name = "estimate"
    additive = True  # pieces never span whitespace: count(a + "\n\n" + b) == count(a) + count(b)
    chars_per_subword = 5

    def count(self, text: str) -> int:
        total = 0
        per = self.chars_per_subword
        for piece in _PIECE.findall(text):
            if len(piece) > 1:  # a word run (CJK and punctuation pieces are one character)
                total += 1 + (len(piece) - 1) // per
            else:
                total += 1
        return total


class _HuggingFaceCounter:
    """A ``tokenizers.Tokenizer`` (or a transformers tokenizer) counting without special tokens."""

    def __init__(self, name: str, encode: Any, additive: bool = False) -> None:
        self.name = name
        self.additive = additive  # see pack_context: True when no token can span whitespace
        self._encode = encode

    def count(self, text: str) -> int:
        return self._encode(text) if text else 0


def wordpiece_token_counter(model_path: str | os.PathLike[str] | None = None) -> TokenCounter | None:
    """The local embedding model's own tokenizer, or None when it cannot be loaded offline.

    ``model_path`` as for the local embedder (None: the shipped all-MiniLM-L6-v2). Reads
    ``tokenizer.json`` with the ``tokenizers`` library (fast, no PyTorch); falls back to
    ``transformers.AutoTokenizer`` with ``local_files_only=True``. Never downloads.
    """
    from rag_assets.embed.local import MODEL_NAME, find_local_model, shipped_model_path

    folder = find_local_model(model_path)
    if folder is None:
        return None
    label = MODEL_NAME if folder == shipped_model_path() else folder.name
    tokenizer_file = folder / "tokenizer.json"
    if tokenizer_file.is_file() and has_module("tokenizers"):
        try:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            tokenizer.no_truncation()
            tokenizer.no_padding()
            kind, pre_tokenizer = _tokenizer_kinds(tokenizer_file)

            def encode(text: str) -> int:
                return len(tokenizer.encode(text, add_special_tokens=False).ids)

            return _HuggingFaceCounter(f"{kind}:{label}", encode, additive=pre_tokenizer in _SPLITS_ON_WHITESPACE)
        except Exception:  # unreadable or unsupported file: try transformers below
            pass
    if has_module("transformers"):
        return _transformers_counter(folder, label)
    return None


# Pre-tokenizers that always split at whitespace (and drop it): no token spans a blank line.
_SPLITS_ON_WHITESPACE = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})


def _tokenizer_kinds(tokenizer_file: Path) -> tuple[str, str]:
    """The model type (``wordpiece``, ``bpe``...) and pre-tokenizer type of a tokenizer.json."""
    try:
        data = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    except Exception:
        return "hf", ""
    model = data.get("model") or {}
    pre = data.get("pre_tokenizer") or {}
    kind = str(model.get("type") or "hf").lower() if isinstance(model, dict) else "hf"
    return kind, str(pre.get("type") or "") if isinstance(pre, dict) else ""


def _transformers_counter(folder: Path, label: str) -> TokenCounter | None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        tokenizer.model_max_length = 1 << 40  # counting only: no "sequence too long" warning
    except Exception:
        return None
    bert = "bert" in type(tokenizer).__name__.lower()

    def encode(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return _HuggingFaceCounter(f"{'wordpiece' if bert else 'hf'}:{label}", encode, additive=bert)


def token_counter(kind: str = "auto", model_path: str | os.PathLike[str] | None = None) -> TokenCounter:
    """The counter of one kind (``auto``, ``wordpiece``, ``estimate``), cached per process.

    ``auto`` is :func:`default_token_counter`. A named kind that is not available here
    raises ValueError saying why (for a ``--tokenizer`` option).
    """
    if kind == "tiktoken":  # a kind of earlier versions: say why it went
        raise ValueError(
            "tiktoken is not supported: it downloads encodings it has not cached; use wordpiece or estimate"
        )
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"unknown tokenizer {kind!r}: choose one of {', '.join(TOKENIZER_KINDS)}")
    key = None if model_path is None else str(Path(model_path).expanduser())
    return _cached_counter(kind, key)


def default_token_counter(model_path: str | os.PathLike[str] | None = None) -> TokenCounter:
    """The best counter available offline: WordPiece, else the estimate.

    Its ``name`` says which was chosen. Loaded once per process (about 0.2 s for the
    WordPiece tokenizer).
    """
    return token_counter("auto", model_path)


@functools.cache
def _cached_counter(kind: str, model_path: str | None) -> TokenCounter:
    if kind == "estimate":
        return EstimateTokenCounter()
    if kind in ("auto", "wordpiece"):
        counter = wordpiece_token_counter(model_path)
        if counter is not None:
            return counter
        if kind == "wordpiece":
            raise ValueError(
                "the local model's tokenizer is not available offline (install the 'local' extra with a "
                "CPU-only torch: docs/configuration.md, Embedders; or give the path of a local model folder)"
            )
    return EstimateTokenCounter()
