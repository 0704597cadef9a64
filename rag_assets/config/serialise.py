"""The configuration as people read it (``rag config``), and the digest that notices an edit.

Dagster carries the configuration itself through pydantic (``CONFIG_ADAPTER``, and
rag_assets/defs/config_schema.py), not through a serialiser of its own."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rag_assets.config.masking import mask_secrets
from rag_assets.config.settings import LlmSettings, RagConfig, RerankerSettings


def config_digest(path: Path | None) -> str:
    """The file's SHA-256 ('' without a file), to notice an edit after the configuration was read."""
    if path is None or not path.is_file():
        return ""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def effective_settings(cfg: RagConfig, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``cfg`` in rag.yaml's shape, paths absolute, for people to read: secrets masked, and the
    API key variable shown with whether it is set (never its value)."""
    env = os.environ if environ is None else environ
    e = cfg.embedding
    key_env = e.openai.api_key_env
    data: dict[str, Any] = {
        "content_dir": str(cfg.content_dir),
        "output_dir": str(cfg.output_dir),
        "collections": list(cfg.collections) if cfg.collections is not None else None,
        "weights": dict(cfg.collection_weights),
        "shards": dict(cfg.collection_shards),
        "chunking": asdict(cfg.chunking),
        "embedder": {
            "name": e.name,
            "batch_size": e.batch_size,
            "max_retries": e.max_retries,
            "timeout": e.timeout,
            "retry_after_cap": e.retry_after_cap,
            "backoff": e.backoff,
            "openai": {
                **e.openai.model_dump(),
                "api_key_env": f"{key_env} ({'set' if env.get(key_env) else 'not set'})",
            },
            "ollama": e.ollama.model_dump(),
            "local": {"model_path": e.local_model_path},
            "hashing": {"dimension": e.hashing_dimension},
        },
        "vaults": [{"name": v.name, "path": str(v.path), "tier": v.tier} for v in cfg.vaults],
        "identity_map": str(cfg.identity_map_path) if cfg.identity_map_path else None,
        "private_tier": {"embedder": cfg.private_embedding.name, "allowed_hosts": list(cfg.private_hosts)},
        "vector_decimals": cfg.vector_decimals,
        "public_index": {"vector_encoding": cfg.vector_encoding},
        "automation": cfg.automation.model_dump(),
        "reranker": _reranker_shown(cfg.reranker, env),
        "llm": _llm_shown(cfg.llm, env),
        "follow_symlinks": cfg.follow_symlinks,
        "max_file_bytes": cfg.max_file_bytes,
        "workers": cfg.workers,
        "evaluation": {
            "questions": [str(q) for q in cfg.evaluation.questions],
            "hit_at_5_floor": cfg.evaluation.hit_at_5_floor,
        },
        "store": cfg.store.model_dump(),
        "serve": _serve_shown(cfg),
    }
    return mask_secrets(data)


def _llm_shown(settings: LlmSettings, env: Mapping[str, str]) -> dict[str, Any]:
    """The llm section, its API key variable shown with whether it is set."""
    data = settings.model_dump()
    key_env = settings.openai.api_key_env
    data["openai"]["api_key_env"] = f"{key_env} ({'set' if env.get(key_env) else 'not set'})"
    return data


def _reranker_shown(settings: RerankerSettings, env: Mapping[str, str]) -> dict[str, Any]:
    """The reranker section, its API key variable shown with whether it is set."""
    data = settings.model_dump()
    key_env = settings.api_key_env
    if key_env:
        data["api_key_env"] = f"{key_env} ({'set' if env.get(key_env) else 'not set'})"
    return data


def _serve_shown(cfg: RagConfig) -> dict[str, Any]:
    """The serve section; the token file shown as configured (None: the default place)."""
    data = asdict(cfg.serve)
    data["token_file"] = str(cfg.serve.token_file) if cfg.serve.token_file else None
    data["admin_vault_roots"] = [str(root) for root in cfg.serve.admin_vault_roots]
    return data
