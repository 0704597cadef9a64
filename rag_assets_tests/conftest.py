"""Shared fixtures: small content trees on disk and configs that point at them."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.config import RagConfig, load_config
from rag_assets.defs.jobs import MAX_RUNS_PER_BUILD
from rag_assets.defs.runner import run_build

# pytester: test_skip_allowlist.py runs small suites of its own under the CI skip policy.
pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE_CONTENT = REPO_ROOT / "content"
CORPORA = REPO_ROOT.parent / "shared" / "corpora"

PROXMOX_POST = """---
title: Proxmox on a small box
description: Installing Proxmox VE and wiring VLANs.
tags: [proxmox, vlan]
date: 2026-01-10
---
# Proxmox on a small box

Intro paragraph about the machine and why Proxmox was chosen for the homelab.

## Installation

Download the ISO, write it to a stick and boot the installer.

### Network configuration

Make the bridge vlan-aware so that guests can be tagged per VLAN.

```bash
# this is a comment, not a heading
auto vmbr0
iface vmbr0 inet manual
    bridge-vlan-aware yes
```
"""


# A memory-backed file system for the tests' Dagster instances, where the machine has one with
# room to spare (a container's default /dev/shm is only 64 MB).
SHM = Path("/dev/shm")
SHM_MIN_FREE = 512 * 1024 * 1024


def shm_usable() -> bool:
    try:
        return os.access(SHM, os.W_OK) and shutil.disk_usage(SHM).free >= SHM_MIN_FREE
    except OSError:
        return False


@contextmanager
def instance_for_test(*, persistent: bool = False, **kwargs) -> Iterator[dg.DagsterInstance]:
    """A Dagster instance for an in-process build: ephemeral (in memory) unless the test needs
    storage on disk, as ``persistent=True`` or any ``dg.instance_for_test`` argument says.

    An ephemeral instance (``dg.DagsterInstance.ephemeral``, Dagster's in-memory run and event-log
    storage) answers the same API the tests read (runs, event logs, materialisations, checks),
    at half the cost: a sample build takes 2.0-3.1 CPU s on it against 3.9-4.9 on SQLite storage
    (three builds each, 2026-12-03, load 0.5). SQLite storage commits every event through a new
    connection; those commits were most of a small build. The instances that must be files (a
    `rag` subprocess or `dagster dev` reading the same runs, Dagster's own SQLite and PostgreSQL
    storage under test) are asked for with ``persistent=True`` or made by the tests themselves;
    ``DAGSTER_HOME`` names the instance's folder in both cases, so code that looks for it finds one.

    The persistent one keeps its storage on tmpfs (/dev/shm) where there is one: SQLite commits
    on the 2-core machine's disk were over half of a small build (one file: a median 9.1 s with
    the instance under /tmp, 4.0 s on /dev/shm, 6 builds each at load 10-13). The project's own
    outputs stay under tmp_path (the config refuses folders in /dev).
    """
    if not persistent and not kwargs:
        with tempfile.TemporaryDirectory(prefix="rag-tests-dagster-") as folder:
            with pytest.MonkeyPatch.context() as env:
                env.setenv("DAGSTER_HOME", folder)
                with dg.DagsterInstance.ephemeral(tempdir=folder) as instance:
                    yield instance
        return
    if "temp_dir" in kwargs or not shm_usable():
        with dg.instance_for_test(**kwargs) as instance:
            yield instance
        return
    with tempfile.TemporaryDirectory(dir=SHM, prefix="rag-tests-dagster-") as folder:
        with dg.instance_for_test(temp_dir=folder, **kwargs) as instance:
            yield instance


@pytest.fixture
def embedding_server():
    """A real HTTP server on 127.0.0.1 speaking the OpenAI and Ollama embedding protocols."""
    from .embedding_server import EmbeddingServer

    with EmbeddingServer() as server:
        yield server


@pytest.fixture
def non_loopback_address() -> Iterator[str]:
    """A non-loopback IPv4 address of this machine, whatever network it has (none, in a sandboxed
    CI): the host side of a veth pair to a network namespace made for the test (netns.py; needs
    root and iproute2, and fails loudly without them). Connections to it from this process come
    from that address too, so a server sees a peer that is not loopback."""
    from .netns import network_namespace

    with network_namespace() as namespace:
        yield namespace.host_address


@pytest.fixture
def write_tree(tmp_path: Path) -> Callable[[dict[str, str | bytes]], Path]:
    """Write ``{relative path: text or bytes}`` under tmp_path/content and return that folder."""

    def write(files: dict[str, str | bytes]) -> Path:
        root = tmp_path / "content"
        root.mkdir(exist_ok=True)
        for rel, data in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, bytes):
                path.write_bytes(data)
            else:
                path.write_text(data, encoding="utf-8")
        return root

    return write


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., RagConfig]:
    """A config for a content folder, with outputs under tmp_path/out and no rag.yaml involved."""

    def make(content_dir: Path, **overrides) -> RagConfig:
        return load_config(
            None,
            content_dir=content_dir,
            output_dir=overrides.pop("output_dir", tmp_path / "out"),
            embedder=overrides.pop("embedder", "hashing"),
            private_embedder=overrides.pop("private_embedder", "hashing"),
            environ={},
            **overrides,
        )

    return make


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests never read the developer's rag.yaml, RAG_*/provider variables or DAGSTER_HOME.

    They build with the offline hashing embedder unless a test chooses otherwise, so that
    an installed local model or a running Ollama on the developer's machine changes nothing.
    """
    isolate(monkeypatch, tmp_path)


def isolate(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """What every test runs in (see _isolated_env), with ``folder`` as the working folder; for
    module-scoped builds too: ``with pytest.MonkeyPatch.context() as mp: isolate(mp, tmp)``
    (the default vaults, for one, are looked for under the working folder)."""
    for var in (
        "RAG_CONFIG",
        "RAG_CONTENT_DIR",
        "RAG_OUTPUT_DIR",
        "DAGSTER_HOME",
        "RAG_STORE_URL",
        "PGHOST",
        "PGHOSTADDR",
        "PGSERVICE",
        "OPENROUTER_API_KEY",
        "OPENAI_API_KEY",
        "RAG_OPENAI_BASE_URL",
        "OLLAMA_HOST",
        "RAG_TOKEN_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    # `rag token` and `rag serve` keep tokens under $XDG_CONFIG_HOME: never the developer's own.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder / "xdg-config"))
    monkeypatch.setenv("RAG_EMBEDDER", "hashing")
    monkeypatch.setenv("RAG_PRIVATE_EMBEDDER", "hashing")
    monkeypatch.chdir(folder)


def build_files_once(tmp_path_factory: pytest.TempPathFactory, name: str, files: dict[str, str]) -> Path:
    """``files`` written under a new folder's content/ and built through the real pipeline (hashing
    embedder, no vaults) into its out/: for a module fixture whose tests each take a copy
    (:func:`copy_built`) instead of building the same tree again."""
    base = tmp_path_factory.mktemp(name)
    for rel, text in files.items():
        path = base / "content" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        isolate(mp, base)
        cfg = load_config(
            None,
            content_dir=base / "content",
            output_dir=base / "out",
            embedder="hashing",
            private_embedder="hashing",
            environ={},
        )
        with instance_for_test() as instance:
            assert run_build(cfg, instance, vaults=[]).success
    return base


def copy_built(base: Path, tmp_path: Path, make_config: Callable[..., RagConfig]) -> RagConfig:
    """A test's own copy of a :func:`build_files_once` folder (content and outputs), as make_config's config."""
    shutil.copytree(base / "content", tmp_path / "content")
    shutil.copytree(base / "out", tmp_path / "out")
    return make_config(tmp_path / "content")


def check_sample_build(instance, outcome, collections) -> list:
    """A full build of the sample in ``instance``: at most MAX_RUNS_PER_BUILD successful runs,
    and every asset's materialisations per partition with that partition's own metadata.
    Returns the runs."""
    assert outcome.success, outcome.error or outcome.failed_checks
    runs = instance.get_runs()
    assert len(runs) <= MAX_RUNS_PER_BUILD == 3
    assert {r.job_name for r in runs} == {"update_collection", "update_safe_vaults", "update_private_vaults"}
    assert all(r.is_success for r in runs)

    def latest(asset: str) -> dict[str, dict]:
        records = instance.fetch_materializations(dg.AssetKey(asset), limit=100).records
        return {r.partition_key: {k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records}

    for asset in ("content_hash", "parsed_documents", "chunks", "embeddings"):
        assert set(latest(asset)) == set(collections), asset
    documents = {key: meta["documents"] for key, meta in latest("parsed_documents").items()}
    assert documents == {name: len(list((SAMPLE_CONTENT / name).rglob("*.md*"))) for name in collections}
    assert len(set(documents.values())) > 1  # each partition carries its own figures, not the run's
    chunks = latest("chunks")
    assert sum(meta["chunks"] for meta in chunks.values()) == outcome.publish_metadata["public_index"]["chunks"]
    # Each tier's asset lists its own vaults only.
    assert set(latest("safe_vault_chunks")) == {"homelab-notes"}
    assert set(latest("private_vault_chunks")) == {"homelab-notes", "personal"}
    return runs


# Browser fixtures (Debian's Chromium through Playwright) for the web-page tests.
from .browser import chromium, page  # noqa: E402,F401

# Under CI=true a skip is a failure unless skip_allowlist.py lists the test (issue 29).
from .skip_allowlist import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402,F401

# The costliest modules first, so that xdist's workers end together (tasks.py test; suite_order.py).
from .suite_order import pytest_collection_modifyitems  # noqa: E402,F401


@pytest.fixture(params=["sqlite", "postgres"])
def make_instance(request, monkeypatch) -> Callable:
    """``with make_instance() as instance``: a test Dagster instance on each storage the project
    supports, the default SQLite one and dagster.postgres.yaml in a throw-away database."""
    if request.param == "sqlite":
        return partial(instance_for_test, persistent=True)
    from .postgres import postgres_instance_overrides, scratch_database

    @contextmanager
    def postgres_instance():
        with scratch_database() as (settings, _connect):
            for key, value in settings.items():
                monkeypatch.setenv(key, value)
            with instance_for_test(overrides=postgres_instance_overrides()) as instance:
                assert type(instance.run_storage).__name__ == "PostgresRunStorage"
                yield instance

    return postgres_instance
