"""Resources: the configuration, which embedder turns content into vectors, and the tiers.

``RagSettings`` carries the validated configuration whole; ``EmbedderResource`` and
``TiersResource`` are views of parts of it that the launchpad can override for one run.
"""


import dataclasses
import json
from pathlib import Path
from typing import Optional

import dagster as dg
from pydantic import Field

from rag_assets.config import (
    RagConfig,
    VaultConfig,
    config_digest,
    config_from_dict,
    config_to_dict,
)
from rag_assets.embed.ollama import DEFAULT_DIMENSION as OLLAMA_DIMENSION
from rag_assets.embed.ollama import DEFAULT_MODEL as OLLAMA_MODEL
from rag_assets.embed.ollama import OllamaHealth, ollama_health, ollama_host
from rag_assets.embed.openai_compat import DEFAULT_DIMENSION as OPENAI_DIMENSION
from rag_assets.embed.openai_compat import DEFAULT_MODEL as OPENAI_MODEL
from rag_assets.embed.openai_compat import OPENROUTER_BASE_URL
from rag_assets.embed.selection import (
    EmbedderSettings,
    OllamaSettings,
    OpenAISettings,
    Selection,
    select_embedder,
)
from rag_assets.privacy.local_only import select_private_embedder
from rag_assets.privacy.sanitize import Sanitizer


class VaultSpec(dg.Config):
    """One note vault from rag.yaml."""

    name: str = Field(description="Vault name: its partition key and the collection name in the stores.")
    path: str = Field(description="Folder of Markdown notes.")
    tier: str = Field(description="safe (sanitised, any embedder) or private (raw, local embedders only).")
    templates_folder: Optional[str] = Field(
        default="Templates", description="The vault's templates folder, skipped and reported (null: indexed)."
    )


class RagSettings(dg.ConfigurableResource):
    """The whole validated configuration, exactly as ``rag`` loaded it (file, environment, flags).

    It travels as JSON of every :class:`RagConfig` field rather than as a few chosen fields,
    so assets, checks and sensors see what the CLI sees (collections, vaults, identity map,
    symlink and size limits included) and a new setting cannot be dropped on the way.
    """

    settings_json: str = Field(description="Every RagConfig field as JSON (rag_assets.config.config_to_dict).")
    config_file: Optional[str] = Field(default=None, description="The rag.yaml the settings were read from.")
    config_digest: str = Field(default="", description="SHA-256 of that file when it was read.")

    @classmethod
    def from_config(cls, cfg: RagConfig) -> "RagSettings":
        return cls(
            settings_json=json.dumps(config_to_dict(cfg)),
            config_file=str(cfg.config_path) if cfg.config_path else None,
            config_digest=config_digest(cfg.config_path),
        )

    def to_config(self) -> RagConfig:
        return config_from_dict(json.loads(self.settings_json))

    def stale_reason(self) -> Optional[str]:
        """Why these settings may be out of date: rag.yaml was edited after they were read.

        The partitions and sensors were built from the old file too, so the fix is a reload
        of the code location, not a re-read here.
        """
        if self.config_file and config_digest(Path(self.config_file)) != self.config_digest:
            return (
                f"{self.config_file} changed since the definitions were loaded; this run uses the settings "
                "read then: reload the code location (or restart dagster dev) to apply the edit"
            )
        return None

    @property
    def embedding_cache_path(self) -> Path:
        return self.to_config().embedding_cache_path


class OpenAICompatibleResource(dg.ConfigurableResource):
    """An OpenAI-compatible /v1/embeddings API: OpenRouter by default; OpenAI, vLLM, LM Studio, llama.cpp too."""

    base_url: str = Field(default=OPENROUTER_BASE_URL, description="API base URL; $RAG_OPENAI_BASE_URL overrides it.")
    model: str = Field(default=OPENAI_MODEL, description="Embedding model name.")
    dimension: int = Field(default=OPENAI_DIMENSION, description="Vector dimension the model returns.")
    api_key_env: str = Field(default="OPENROUTER_API_KEY", description="Environment variable holding the key.")
    send_dimensions: bool = Field(default=False, description="Send `dimensions` (text-embedding-3 models only).")
    price_per_million_tokens: Optional[float] = Field(default=None, description="USD per 1M tokens, for cost estimates.")

    def settings(self) -> OpenAISettings:
        return OpenAISettings(**{k: getattr(self, k) for k in OpenAISettings.__dataclass_fields__})


class OllamaResource(dg.ConfigurableResource):
    """An Ollama server (POST /api/embed; GET /api/tags for health)."""

    host: Optional[str] = Field(default=None, description="Base URL; default $OLLAMA_HOST, else http://localhost:11434.")
    model: str = Field(default=OLLAMA_MODEL, description="Embedding model (pulled with `ollama pull`).")
    dimension: int = Field(default=OLLAMA_DIMENSION, description="Vector dimension the model returns.")

    def settings(self) -> OllamaSettings:
        return OllamaSettings(**{k: getattr(self, k) for k in OllamaSettings.__dataclass_fields__})

    def health(self) -> OllamaHealth:
        return ollama_health(ollama_host(self.host), timeout=2.0)


_NESTED = ("openai", "ollama")  # provider sections that are resources of their own


class EmbedderResource(dg.ConfigurableResource):
    """Which embedding provider runs (``auto`` picks the best available) and how it behaves."""

    name: str = Field(default="auto", description="auto, openai (OpenRouter), ollama, local or hashing.")
    batch_size: int = Field(default=50, description="Chunks sent per embedding request.")
    max_retries: int = Field(default=3, description="Retries per batch on 429, 5xx, timeouts, bad answers.")
    timeout: float = Field(default=30.0, description="Seconds to wait for one request.")
    retry_after_cap: float = Field(default=60.0, description="Longest Retry-After honoured, in seconds.")
    backoff: float = Field(default=0.5, description="Longest wait before the first retry (doubles each retry).")
    local_model_path: Optional[str] = Field(default=None, description="Folder of a sentence-transformers model.")
    hashing_dimension: int = Field(default=384, description="Dimension of the offline hashing embedder.")
    openai: OpenAICompatibleResource = Field(default_factory=OpenAICompatibleResource)
    ollama: OllamaResource = Field(default_factory=OllamaResource)

    @classmethod
    def from_settings(cls, s: EmbedderSettings) -> "EmbedderResource":
        flat = {k: v for k, v in dataclasses.asdict(s).items() if k not in _NESTED}
        return cls(
            **flat,
            openai=OpenAICompatibleResource(**dataclasses.asdict(s.openai)),
            ollama=OllamaResource(**dataclasses.asdict(s.ollama)),
        )

    def settings(self) -> EmbedderSettings:
        flat = {k: getattr(self, k) for k in EmbedderSettings.__dataclass_fields__ if k not in _NESTED}
        return EmbedderSettings(**flat, openai=self.openai.settings(), ollama=self.ollama.settings())

    def select(self) -> Selection:
        """The embedder to use now, and why (``auto`` probes the services)."""
        return select_embedder(self.settings())


class TiersResource(dg.ConfigurableResource):
    """The note vaults and the rules of the Safe and Private tiers."""

    vaults: list[VaultSpec] = Field(default_factory=list, description="Vaults and their tiers (rag.yaml `vaults:`).")
    identity_map: Optional[str] = Field(
        default=None, description="JSON file of identifying values the Safe tier replaces with placeholders."
    )
    private_embedder: EmbedderResource = Field(
        default_factory=lambda: EmbedderResource(name="auto"),
        description="The Private tier's embedder: auto (local only), ollama, local or hashing; never a remote API.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Non-loopback Ollama hosts trusted with private text."
    )

    @classmethod
    def from_config(cls, cfg: RagConfig) -> "TiersResource":
        return cls(
            vaults=[VaultSpec(name=v.name, path=str(v.path), tier=v.tier, templates_folder=v.templates_folder) for v in cfg.vaults],
            identity_map=str(cfg.identity_map_path) if cfg.identity_map_path else None,
            private_embedder=EmbedderResource.from_settings(cfg.private_embedding),
            allowed_hosts=list(cfg.private_hosts),
        )

    def apply(self, cfg: RagConfig, embedding: EmbedderSettings) -> RagConfig:
        """``cfg`` with this resource's vaults and Private-tier settings."""
        return dataclasses.replace(
            cfg,
            embedding=embedding,
            vaults=tuple(VaultConfig(v.name, Path(v.path), v.tier, v.templates_folder) for v in self.vaults),
            identity_map_path=Path(self.identity_map) if self.identity_map else None,
            private_embedding=self.private_embedder.settings(),
            private_hosts=tuple(self.allowed_hosts),
        )

    def sanitizer(self) -> Sanitizer:
        return Sanitizer.from_file(Path(self.identity_map) if self.identity_map else None)

    def select_private(self) -> Selection:
        """The Private tier's embedder, proven local (PrivacyError otherwise)."""
        return select_private_embedder(self.private_embedder.settings(), self.allowed_hosts)
