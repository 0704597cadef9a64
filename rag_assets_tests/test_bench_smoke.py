"""Every benchmark in bench/ runs once at a tiny size, so none breaks silently.

A bench is a script run from its own folder, outside the test suite: it broke twice unseen
(bench/secrets.py shadowing the standard library's ``secrets``; bench/incremental.py still
looking for the publish run after a build became one run). Each bench here runs as docs/benchmarks.md
runs it, as a child process, with arguments that keep it small (a few files, chunks, queries or
requests; a SciFact subset of a few dozen documents), and must exit 0. No figure it prints is
asserted and no time is: the deadline only stops a hang.

A bench that needs something this machine may lack is skipped with the reason (pytest's
``-ra`` summary lists it), only when that thing is missing: ``NEEDS``. Every bench/*.py must have
an entry in ``SMOKE`` (the first test fails otherwise), so a new bench cannot go untested, or be
a part of a bench that has one (``PART_OF``: bench/scale_update.py runs in bench/scale.py's).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import CORPORA, REPO_ROOT, SAMPLE_CONTENT

pytestmark = pytest.mark.bench_smoke

BENCH = REPO_ROOT / "bench"
HUGO_CONTENT = CORPORA / "hugo-docs" / "content"
SCIFACT = CORPORA / "beir-scifact"
DEADLINE_SECONDS = 600  # a hang, not a figure: a smoke run takes seconds

# Arguments of each bench's smoke run. {tmp}: a fresh folder; {content}: the sample content;
# {hugo}: the Hugo docs content; {scifact}: a SciFact subset (train and test splits); {tiny}: one
# collection of three sample notes (where a bench's fixed costs, workers and runs, dominate).
SMOKE: dict[str, list[str]] = {
    "access": ["--requests", "5", "--output-dir", "{tmp}/out"],
    "ask": [
        "--content",
        "{content}",
        "--questions",
        "2",
        "--tokens",
        "3",
        "--token-delay",
        "0",
        "--output-dir",
        "{tmp}/out",
    ],
    "bm25_reference": ["--dataset", "{scifact}", "--output-dir", "{tmp}/eval", "--reference-site", "{reference_site}"],
    "browser": [
        "--files",
        "20",
        "--dimension",
        "64",
        "--queries",
        "3",
        "--repeat",
        "1",
        "--encodings",
        "float",
        "int16-bin",
    ],
    "build": ["--corpus", "tiny={tiny}", "--repeat", "1"],
    "build_memory": [
        "build",
        "--force",
        "--content-dir",
        "{content}",
        "--output-dir",
        "{tmp}/out",
        "--embedder",
        "hashing",
        "--private-embedder",
        "hashing",
    ],
    "celery_build": ["--content", "{tiny}", "--workers", "1", "--repeat", "1"],
    "celery_queue": ["--content", "{tiny}", "--repeat", "1", "--runs", "1"],
    "embedders": ["--quick", "--batches", "2", "--total", "100", "--threads", "1", "--dimension", "64"],
    "fit_relevance": [
        "--embedder",
        "hashing",
        "--dataset",
        "{scifact}",
        "--output-dir",
        "{tmp}/eval",
        "--scifact-queries",
        "5",
        "--ood-claims",
        "5",
        "--gibberish",
        "5",
    ],
    "full_build": [
        "--chunks",
        "40",
        "--shards",
        "2",
        "--cache-dir",
        "{tmp}/cache",
        "--steps",
        "--profile",
        "{tmp}/build.prof",
        "--top",
        "3",
    ],
    "install_size": ["--top", "3"],
    "publish_memory": ["--files", "60", "--collections", "2", "--edits", "1"],
    "incremental": ["--files", "120", "--collections", "2", "--repeat", "1", "--full-repeat", "1", "--no-profile"],
    "obsidian_links": ["--vault", "{content}/vaults/homelab-notes", "--many", "100", "--loop", "10", "--repeat", "1"],
    "link_signal": ["--factors", "1,1.25", "--modes", "bm25"],
    "local_model": ["--passages", "4", "--batch-sizes", "2", "--repeat", "1"],
    "minilm_speed": ["--passages", "4", "--repeat", "1", "--queries", "3", "--batch-size", "2"],
    "long_queries": ["--dataset", "{scifact}", "--out", "{tmp}/long", "--per-split", "5"],
    "long_query_speed": [
        "--dataset",
        "{scifact}",
        "--output-dir",
        "{tmp}/eval",
        "--queries",
        "3",
        "--caps",
        "8,0",
        "--reference-site",
        "{reference_site}",
    ],
    "startup": ["--runs", "1", "--keep", "{tmp}/site"],
    "pg_store": ["--sizes", "300", "--queries", "3", "--cache-dir", "{tmp}/cache"],
    "precision": ["--corpus", "{content}", "--queries", "5", "--dimension", "64"],
    "rerank": [
        "--dataset",
        "{scifact}",
        "--embedder",
        "hashing",
        "--output-dir",
        "{tmp}/eval",
        "--limit",
        "3",
        "--top-n",
        "5",
        "--reranker",
        "chat",
        "--base-url",
        "{chat_url}",
        "--model",
        "smoke",
    ],
    "scale": [
        "--chunks",
        "300",
        "--queries",
        "3",
        "--parts",
        "store",
        "sqlite",
        "postgres",
        "update",
        "--sizes",
        "300",
        "--edits",
        "1",
        "--status-runs",
        "1",
        "--update-watch",
        "--cache-dir",
        "{tmp}/cache",
    ],
    "search": ["--sizes", "300", "--queries", "3", "--cache-dir", "{tmp}/cache", "--corpus", "{hugo}"],
    "secret_detection": ["--corpus", "{content}"],
    "sensor_tick": ["--files", "40", "--collections", "2"],
    "shards": ["--content", "{tiny}/notes", "--shards", "1", "2", "--repeat", "1"],
    "tune_bm25": ["--dataset", "{scifact}", "--output-dir", "{tmp}/eval"],
    "tune_fusion": ["--dataset", "{scifact}", "--embedder", "hashing", "--output-dir", "{tmp}/eval", "--top", "3"],
}


def _missing_module(name: str) -> Callable[[], str | None]:
    return lambda: None if importlib.util.find_spec(name) else f"the Python package {name} is not installed"


def _broker_down() -> str | None:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=2).close()
    except OSError:
        return "RabbitMQ is not listening on 127.0.0.1:5672"
    return None


def _no_reference_env() -> str | None:
    site = os.environ.get("RAG_BENCH_BM25_REFERENCE_SITE")
    if not site:
        return "set RAG_BENCH_BM25_REFERENCE_SITE to a site-packages with bm25s and PyStemmer (never a dependency)"
    return None


def _minilm_missing() -> str | None:
    from rag_assets.embed.minilm import minilm_status

    ok, why = minilm_status()
    return None if ok else why


# What a bench needs beyond the project's test dependencies: why it is skipped, when it is.
NEEDS: dict[str, Callable[[], str | None]] = {
    "bm25_reference": _no_reference_env,
    "long_query_speed": _no_reference_env,
    "celery_build": _broker_down,
    "celery_queue": _broker_down,
    "local_model": _missing_module("sentence_transformers"),
    "minilm_speed": _minilm_missing,
}


# Modules of bench/ that are parts of another bench, not run on their own: the bench whose
# smoke run runs them.
PART_OF: dict[str, str] = {"scale_update": "scale", "fit_order": "fit_relevance", "relevance_samples": "fit_relevance"}


def test_every_bench_has_a_smoke_run() -> None:
    assert sorted(p.stem for p in BENCH.glob("*.py")) == sorted([*SMOKE, *PART_OF])
    assert set(PART_OF.values()) <= set(SMOKE)


@pytest.fixture(scope="module")
def scifact_subset(tmp_path_factory) -> Path:
    """SciFact's first judged queries of each split, their documents and 40 others, as a BEIR folder."""
    folder = tmp_path_factory.mktemp("scifact-subset")
    (folder / "qrels").mkdir()
    wanted: set[str] = set()
    queries: set[str] = set()
    for split in ("train", "test"):
        lines = (SCIFACT / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        kept = lines[:13]  # the header and 12 judgements
        (folder / "qrels" / f"{split}.tsv").write_text("\n".join(kept) + "\n", encoding="utf-8")
        for line in kept[1:]:
            query, doc, _ = line.split("\t")
            queries.add(query)
            wanted.add(doc)
    corpus = []
    with (SCIFACT / "corpus.jsonl").open(encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            if index < 40 or json.loads(line)["_id"] in wanted:
                corpus.append(line)
    (folder / "corpus.jsonl").write_text("".join(corpus), encoding="utf-8")
    with (SCIFACT / "queries.jsonl").open(encoding="utf-8") as handle:
        kept_queries = [line for index, line in enumerate(handle) if index < 20 or json.loads(line)["_id"] in queries]
    (folder / "queries.jsonl").write_text("".join(kept_queries), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def chat_url():
    """The tests' loopback chat model (Ollama's /api/chat), for the reranking bench's chat reranker."""
    from .chat_server import ChatServer

    with ChatServer() as server:
        yield server.url


@pytest.fixture
def bench_tmp():
    """A fresh folder outside pytest's (whose parents are private): an embedded PostgreSQL the
    benches start runs as its own user and must reach its data folder."""
    folder = Path(tempfile.mkdtemp(prefix="rag-bench-smoke-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def tiny_content(folder: Path) -> Path:
    """One collection, ``notes``, of three notes of the sample content."""
    notes = folder / "tiny" / "notes"
    notes.mkdir(parents=True)
    for page in sorted((SAMPLE_CONTENT / "docs").rglob("*.md"))[:3]:
        shutil.copy(page, notes / page.name)
    return notes.parent


def bench_args(name: str, tmp_path: Path, scifact: Path, chat: str) -> list[str]:
    values = {
        "tiny": str(tiny_content(tmp_path)),
        "tmp": str(tmp_path),
        "content": str(SAMPLE_CONTENT),
        "hugo": str(HUGO_CONTENT),
        "scifact": str(scifact),
        "chat_url": chat,
        "reference_site": os.environ.get("RAG_BENCH_BM25_REFERENCE_SITE", ""),
    }
    return [arg.format(**values) for arg in SMOKE[name]]


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_the_bench_runs_at_a_tiny_size(name: str, bench_tmp: Path, request) -> None:
    if name in NEEDS and (reason := NEEDS[name]()):
        pytest.skip(f"bench/{name}.py needs what is missing here: {reason}")
    scifact = request.getfixturevalue("scifact_subset") if "{scifact}" in SMOKE[name] else SCIFACT
    chat = request.getfixturevalue("chat_url") if "{chat_url}" in SMOKE[name] else ""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_") and k != "DAGSTER_HOME"}
    env["TMPDIR"] = str(bench_tmp)  # the benches' default caches and temporary folders
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *bench_args(name, bench_tmp, scifact, chat)],
        cwd=bench_tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
    )
    assert done.returncode == 0, (
        f"bench/{name}.py exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def test_fit_relevance_orders_at_a_tiny_size(scifact_subset: Path, bench_tmp: Path) -> None:
    """bench/fit_relevance.py ``--order`` (bench/fit_order.py's path: the fused score's weight
    chosen on train), which the plain smoke run above returns before: it must run, and print
    the weight it chose, without ``--write`` (the shipped models stay as they are)."""
    shipped = REPO_ROOT / "rag_assets" / "search" / "relevance_models.json"
    before = shipped.read_bytes()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_") and k != "DAGSTER_HOME"}
    env["TMPDIR"] = str(bench_tmp)
    args = ["--embedder", "hashing", "--dataset", str(scifact_subset), "--output-dir", str(bench_tmp / "eval")]
    args += ["--scifact-queries", "5", "--ood-claims", "5", "--gibberish", "5", "--order"]
    done = subprocess.run(
        [sys.executable, str(BENCH / "fit_relevance.py"), *args],
        cwd=bench_tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS,
    )
    assert done.returncode == 0, f"exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert '"fused_weight"' in done.stdout
    assert shipped.read_bytes() == before
