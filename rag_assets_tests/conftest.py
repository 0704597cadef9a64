"""Shared fixtures: small content trees on disk and configs that point at them."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from rag_assets.config import RagConfig, load_config

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


@pytest.fixture
def embedding_server():
    """A real HTTP server on 127.0.0.1 speaking the OpenAI and Ollama embedding protocols."""
    from .embedding_server import EmbeddingServer

    with EmbeddingServer() as server:
        yield server


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
    for var in (
        "RAG_CONFIG", "RAG_CONTENT_DIR", "RAG_OUTPUT_DIR", "DAGSTER_HOME",
        "OPENROUTER_API_KEY", "OPENAI_API_KEY", "RAG_OPENAI_BASE_URL", "OLLAMA_HOST",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RAG_EMBEDDER", "hashing")
    monkeypatch.setenv("RAG_PRIVATE_EMBEDDER", "hashing")
    monkeypatch.chdir(tmp_path)
