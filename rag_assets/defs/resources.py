"""Resources: where content lives and which embedder turns it into vectors."""


import dataclasses
from pathlib import Path
from typing import Optional

import dagster as dg
from pydantic import Field

from rag_assets.chunking import ChunkingParams
from rag_assets.config import RagConfig, VaultConfig
from rag_assets.embedders.ollama import DEFAULT_DIMENSION as OLLAMA_DIMENSION
from rag_assets.embedders.ollama import DEFAULT_MODEL as OLLAMA_MODEL
from rag_assets.embedders.ollama import OllamaHealth, ollama_health, ollama_host
from rag_assets.embedders.openai_compat import DEFAULT_DIMENSION as OPENAI_DIMENSION
from rag_assets.embedders.openai_compat import DEFAULT_MODEL as OPENAI_MODEL
from rag_assets.embedders.openai_compat import OPENROUTER_BASE_URL
from rag_assets.embedders.selection import EmbedderSettings, OllamaSettings, OpenAISettings, Selection, select_embedder
from rag_assets.privacy import select_private_embedder
from rag_assets.sanitize import Sanitizer


class VaultSpec(dg.Config):
    """One note vault from rag.yaml."""

    name: str = Field(description="Vault name: its partition key and the collection name in the stores.")
    path: str = Field(description="Folder of Markdown notes.")
    tier: str = Field(description="safe (sanitised, any embedder) or private (raw, local embedders only).")


class RagSettings(dg.ConfigurableResource):
    """Paths, chunking and publishing settings, filled from rag.yaml at load time."""

    content_dir: str = Field(description="Folder whose top-level folders are the collections.")
    output_dir: str = Field(description="Folder that receives public/ and data/.")
    target_words: int = Field(default=400, description="Words of new text per chunk.")
    overlap_words: int = Field(default=50, description="Words repeated from the previous chunk.")
    min_words: int = Field(default=100, description="Shorter fragments merge with a neighbour.")
    max_chars: int = Field(default=3000, description="Hard cap for text without spaces (CJK).")
    vector_decimals: int = Field(default=5, description="Decimals kept per vector component in the JSON index.")
    collection_weights: dict[str, float] = Field(default_factory=dict, description="Search priority per collection.")
    follow_symlinks: bool = Field(
        default=False, description="Follow symlinks out of the content folder (never into a note vault)."
    )
    max_file_bytes: int = Field(default=20_000_000, description="Larger files are skipped and reported, never read.")
    # The same list as the tiers resource's: the public collections must know the vaults to
    # stay out of them (a symlink into a vault is refused).
    vaults: list[VaultSpec] = Field(default_factory=list, description="Note vaults, which no collection may read.")

    @classmethod
    def from_config(cls, cfg: RagConfig) -> "RagSettings":
        p = cfg.chunking
        return cls(
            content_dir=str(cfg.content_dir),
            output_dir=str(cfg.output_dir),
            target_words=p.target_words,
            overlap_words=p.overlap_words,
            min_words=p.min_words,
            max_chars=p.max_chars,
            vector_decimals=cfg.vector_decimals,
            collection_weights=dict(cfg.collection_weights),
            follow_symlinks=cfg.follow_symlinks,
            max_file_bytes=cfg.max_file_bytes,
            vaults=[VaultSpec(name=v.name, path=str(v.path), tier=v.tier) for v in cfg.vaults],
        )

    def to_config(self) -> RagConfig:
        return RagConfig(
            content_dir=Path(self.content_dir),
            output_dir=Path(self.output_dir),
            collection_weights=dict(self.collection_weights),
            chunking=self.chunking_params(),
            vector_decimals=self.vector_decimals,
            follow_symlinks=self.follow_symlinks,
            max_file_bytes=self.max_file_bytes,
            vaults=tuple(VaultConfig(v.name, Path(v.path), v.tier) for v in self.vaults),
        )

    @property
    def embedding_cache_path(self) -> Path:
        return self.to_config().embedding_cache_path

    def chunking_params(self) -> ChunkingParams:
        return ChunkingParams(
            target_words=self.target_words,
            overlap_words=self.overlap_words,
            min_words=self.min_words,
            max_chars=self.max_chars,
        )


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
            vaults=[VaultSpec(name=v.name, path=str(v.path), tier=v.tier) for v in cfg.vaults],
            identity_map=str(cfg.identity_map_path) if cfg.identity_map_path else None,
            private_embedder=EmbedderResource.from_settings(cfg.private_embedding),
            allowed_hosts=list(cfg.private_hosts),
        )

    def apply(self, cfg: RagConfig, embedding: EmbedderSettings) -> RagConfig:
        """``cfg`` with this resource's vaults and Private-tier settings."""
        return dataclasses.replace(
            cfg,
            embedding=embedding,
            vaults=tuple(VaultConfig(v.name, Path(v.path), v.tier) for v in self.vaults),
            identity_map_path=Path(self.identity_map) if self.identity_map else None,
            private_embedding=self.private_embedder.settings(),
            private_hosts=tuple(self.allowed_hosts),
        )

    def sanitizer(self) -> Sanitizer:
        return Sanitizer.from_file(Path(self.identity_map) if self.identity_map else None)

    def select_private(self) -> Selection:
        """The Private tier's embedder, proven local (PrivacyError otherwise)."""
        return select_private_embedder(self.private_embedder.settings(), self.allowed_hosts)
