"""Parity: the numpy minilm provider gives sentence-transformers' all-MiniLM-L6-v2 vectors.

1,000 passages (SciFact abstracts, many past the 256-word-piece limit, and Hugo docs
paragraphs with code and shortcodes) and 300 SciFact queries from the shared corpora
(``../shared/corpora``): every vector's cosine similarity to sentence-transformers' must
be at least 0.9999, and the word pieces fed to the encoder identical. Needs torch and
sentence-transformers (the ``local`` extra); skipped, on the CI allow-list, without them.
"""

from __future__ import annotations

import json
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from rag_assets.embed.local import LocalEmbedder, has_module, local_model_status, set_offline_mode, shipped_model_path
from rag_assets.embed.minilm import MiniLMEmbedder, minilm_status

from .conftest import CORPORA

if not has_module("torch") or not local_model_status()[0]:
    pytest.skip(f"parity needs torch and sentence-transformers: {local_model_status()[1]}", allow_module_level=True)

SCIFACT = CORPORA / "beir-scifact"
HUGO = CORPORA / "hugo-docs" / "content"
MIN_COSINE = 0.9999


def _jsonl(path: Path, limit: int) -> list[dict]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in islice(handle, limit)]


def _hugo_paragraphs(limit: int) -> list[str]:
    """The first ``limit`` paragraphs of 40+ characters of the Hugo docs, files in sorted order."""
    found: list[str] = []
    for path in sorted(HUGO.rglob("*.md")):
        found.extend(p.strip() for p in path.read_text(encoding="utf-8").split("\n\n") if len(p.strip()) >= 40)
        if len(found) >= limit:
            break
    return found[:limit]


@pytest.fixture(scope="module")
def texts() -> tuple[list[str], list[str]]:
    if not (SCIFACT / "corpus.jsonl").is_file() or not HUGO.is_dir():
        pytest.fail(f"the shared corpora are missing at {CORPORA}")
    passages = [f"{d['title']} {d['text']}" for d in _jsonl(SCIFACT / "corpus.jsonl", 600)] + _hugo_paragraphs(400)
    queries = [q["text"] for q in _jsonl(SCIFACT / "queries.jsonl", 300)]
    assert (len(passages), len(queries)) == (1000, 300)
    return passages, queries


def test_the_corpus_reaches_past_the_truncation_limit(texts: tuple[list[str], list[str]]) -> None:
    numpy_model = MiniLMEmbedder()
    lengths = [len(ids) for ids in numpy_model.token_ids(texts[0])]
    assert max(lengths) == 256 and sum(n == 256 for n in lengths) >= 100  # truncation is exercised


def test_word_pieces_match_sentence_transformers(texts: tuple[list[str], list[str]]) -> None:
    sample = texts[0][::10] + texts[1][::10]
    ours = MiniLMEmbedder().token_ids(sample)
    from sentence_transformers import SentenceTransformer

    set_offline_mode()
    model = SentenceTransformer(str(shipped_model_path()), device="cpu", local_files_only=True)
    features = model.tokenize(sample)  # sentence-transformers' own tokenizer settings and limit
    theirs = [
        [token for token, keep in zip(ids.tolist(), mask.tolist()) if keep]
        for ids, mask in zip(features["input_ids"], features["attention_mask"])
    ]
    assert ours == theirs


def test_vectors_match_sentence_transformers(texts: tuple[list[str], list[str]]) -> None:
    assert minilm_status()[0]
    numpy_model, torch_model = MiniLMEmbedder(), LocalEmbedder()
    assert numpy_model.model == torch_model.model  # one recorded name: the indexes are interchangeable
    passages, queries = texts
    ours = np.vstack([numpy_model.embed_documents(passages), np.stack([numpy_model.embed_query(q) for q in queries])])
    theirs = np.vstack([torch_model.embed_documents(passages), np.stack([torch_model.embed_query(q) for q in queries])])
    cosines = np.sum(ours * theirs, axis=1)  # both L2-normalised
    worst = int(np.argmin(cosines))
    assert cosines.min() >= MIN_COSINE, f"text {worst}: cosine {cosines[worst]:.6f}"
    assert np.abs(ours - theirs).max() < 1e-4
