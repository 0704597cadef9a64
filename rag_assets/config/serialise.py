"""The whole configuration as data: how Dagster resources carry it unchanged, and what
``rag config`` prints."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping

from rag_assets.config.errors import ConfigError
from rag_assets.config.masking import mask_secrets
from rag_assets.config.serving import serve_from_dict
from rag_assets.config.settings import (
    AutomationConfig,
    ChunkingParams,
    EmbedderSettings,
    EvaluationConfig,
    LlmOllamaSettings,
    LlmOpenAISettings,
    LlmSettings,
    OllamaSettings,
    OpenAISettings,
    RagConfig,
    RerankerSettings,
    StoreSettings,
    VaultConfig,
)

# --- The whole configuration as data: for Dagster resources and `rag config` ---------------


def config_to_dict(cfg: RagConfig) -> dict[str, Any]:
    """Every field of ``cfg`` as JSON-ready data; :func:`config_from_dict` inverts it exactly."""
    return json.loads(json.dumps(asdict(cfg), default=str))


def config_from_dict(data: Mapping[str, Any]) -> RagConfig:
    def path(value: str | None) -> Path | None:
        return Path(value) if value is not None else None

    unknown = set(data) - set(RagConfig.__dataclass_fields__)
    if unknown:
        raise ConfigError(f"serialised configuration has unknown field(s) {', '.join(sorted(unknown))}")
    converters: dict[str, Callable[[Any], Any]] = {
        "content_dir": Path,
        "output_dir": Path,
        "embedding": _embedding_from_dict,
        "private_embedding": _embedding_from_dict,
        "collections": lambda v: tuple(v) if v is not None else None,
        "collection_weights": dict,
        "collection_shards": dict,
        "chunking": lambda v: ChunkingParams(**v),
        "vaults": lambda v: tuple(
            VaultConfig(e["name"], Path(e["path"]), e["tier"], e.get("templates_folder", "Templates")) for e in v
        ),
        "private_hosts": tuple,
        "identity_map_path": path,
        "automation": lambda v: AutomationConfig(**v),
        "reranker": lambda v: RerankerSettings(**v),
        "evaluation": lambda v: EvaluationConfig(tuple(Path(q) for q in v["questions"]), v["hit_at_5_floor"]),
        "config_path": path,
        "llm": _llm_from_dict,
        "store": lambda v: StoreSettings(**v),
        "serve": serve_from_dict,
    }
    return RagConfig(**{k: converters.get(k, lambda v: v)(v) for k, v in data.items()})


def _embedding_from_dict(data: Mapping[str, Any]) -> EmbedderSettings:
    return EmbedderSettings(
        **{k: v for k, v in data.items() if k not in ("openai", "ollama")},
        openai=OpenAISettings(**data["openai"]),
        ollama=OllamaSettings(**data["ollama"]),
    )


def _llm_from_dict(data: Mapping[str, Any]) -> LlmSettings:
    return LlmSettings(
        **{k: v for k, v in data.items() if k not in ("openai", "ollama")},
        openai=LlmOpenAISettings(**data["openai"]),
        ollama=LlmOllamaSettings(**data["ollama"]),
    )


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
            "openai": {**asdict(e.openai), "api_key_env": f"{key_env} ({'set' if env.get(key_env) else 'not set'})"},
            "ollama": asdict(e.ollama),
            "local": {"model_path": e.local_model_path},
            "hashing": {"dimension": e.hashing_dimension},
        },
        "vaults": [{"name": v.name, "path": str(v.path), "tier": v.tier} for v in cfg.vaults],
        "identity_map": str(cfg.identity_map_path) if cfg.identity_map_path else None,
        "private_tier": {"embedder": cfg.private_embedding.name, "allowed_hosts": list(cfg.private_hosts)},
        "vector_decimals": cfg.vector_decimals,
        "public_index": {"vector_encoding": cfg.vector_encoding},
        "automation": asdict(cfg.automation),
        "reranker": _reranker_shown(cfg.reranker, env),
        "llm": _llm_shown(cfg.llm, env),
        "follow_symlinks": cfg.follow_symlinks,
        "max_file_bytes": cfg.max_file_bytes,
        "evaluation": {
            "questions": [str(q) for q in cfg.evaluation.questions],
            "hit_at_5_floor": cfg.evaluation.hit_at_5_floor,
        },
        "store": asdict(cfg.store),
        "serve": _serve_shown(cfg),
    }
    return mask_secrets(data)


def _llm_shown(settings: LlmSettings, env: Mapping[str, str]) -> dict[str, Any]:
    """The llm section, its API key variable shown with whether it is set."""
    data = asdict(settings)
    key_env = settings.openai.api_key_env
    data["openai"]["api_key_env"] = f"{key_env} ({'set' if env.get(key_env) else 'not set'})"
    return data


def _reranker_shown(settings: RerankerSettings, env: Mapping[str, str]) -> dict[str, Any]:
    """The reranker section, its API key variable shown with whether it is set."""
    data = asdict(settings)
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
