"""The configuration the pipeline uses: frozen dataclasses built from the validated schema,
resolved to absolute paths (``RagConfig`` and the settings it carries)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from rag_assets.config.providers import (
    OLLAMA_DEFAULT_DIMENSION,
    OLLAMA_DEFAULT_MODEL,
    OPENAI_DEFAULT_DIMENSION,
    OPENAI_DEFAULT_MODEL,
    OPENROUTER_BASE_URL,
)
from rag_assets.config.serving import ServeSettings
from rag_assets.config.schema import (
    DEFAULT_COLLECTION_WEIGHTS,
    FILE_DEFAULTS,
    ChunkingSection,
    EmbedderSection,
    LlmSection,
    RerankerSection,
)

# A folder of this name in the content dir holds note vaults: never a public collection,
# even when no vault is configured (yet), so private notes cannot leak into the public index.
VAULTS_FOLDER = "vaults"
TIERS = ("public", "safe", "private")



@dataclass(frozen=True)
class ChunkingParams:
    """Size knobs; defaults suit ~512-token embedding models.

    ``target_words`` bounds the *new* (non-overlap) body words of a chunk;
    ``min_words`` must not exceed it.
    """

    target_words: int = 400
    overlap_words: int = 50
    min_words: int = 100
    max_chars: int = 3000

    def __post_init__(self) -> None:
        if self.target_words < 1:
            raise ValueError("target_words must be >= 1")
        if self.overlap_words < 0 or self.min_words < 0:
            raise ValueError("overlap_words and min_words must be >= 0")
        if self.min_words > self.target_words:
            raise ValueError("min_words must not exceed target_words")
        if self.max_chars < 100:
            raise ValueError("max_chars must be >= 100")




@dataclass(frozen=True)
class OpenAISettings:
    base_url: str = OPENROUTER_BASE_URL
    model: str = OPENAI_DEFAULT_MODEL
    dimension: int = OPENAI_DEFAULT_DIMENSION
    api_key_env: str = "OPENROUTER_API_KEY"
    send_dimensions: bool = False
    price_per_million_tokens: float | None = None


@dataclass(frozen=True)
class OllamaSettings:
    host: str | None = None  # None: $OLLAMA_HOST, else http://localhost:11434
    model: str = OLLAMA_DEFAULT_MODEL
    dimension: int = OLLAMA_DEFAULT_DIMENSION


@dataclass(frozen=True)
class EmbedderSettings:
    """Everything that decides which embedder runs and how it behaves."""

    name: str = "auto"
    batch_size: int = 50
    max_retries: int = 3
    timeout: float = 30.0
    retry_after_cap: float = 60.0
    backoff: float = 0.5  # first retry waits up to this long (full jitter), then doubling
    openai: OpenAISettings = field(default_factory=OpenAISettings)
    ollama: OllamaSettings = field(default_factory=OllamaSettings)
    local_model_path: str | None = None
    hashing_dimension: int = 384


@dataclass(frozen=True)
class RerankerSettings:
    """The optional reranking stage (``reranker:`` in rag.yaml; defaults: :class:`RerankerSection`)."""

    name: str = "none"  # none, chat, http, cross_encoder
    top_n: int = 20
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    model_path: str | None = None
    timeout: float = 30.0
    max_retries: int = 2
    batch_size: int = 10

    @property
    def enabled(self) -> bool:
        return self.name != "none"


def reranker_settings(section: RerankerSection) -> RerankerSettings:
    return RerankerSettings(**section.model_dump())


@dataclass(frozen=True)
class LlmOpenAISettings:
    base_url: str | None = None  # None: $RAG_OPENAI_BASE_URL, else OpenRouter
    model: str = "openai/gpt-4o-mini"
    api_key_env: str = "OPENROUTER_API_KEY"


@dataclass(frozen=True)
class LlmOllamaSettings:
    host: str | None = None  # None: $OLLAMA_HOST, else http://localhost:11434
    model: str = "llama3.2"


@dataclass(frozen=True)
class LlmSettings:
    """The chat model that answers (``llm:`` in rag.yaml; defaults: :class:`LlmSection`)."""

    name: str = "auto"  # auto, openai (alias openrouter), ollama, none
    context_budget: int = 3000
    max_answer_tokens: int = 800
    temperature: float = 0.1
    timeout: float = 60.0
    max_retries: int = 2
    retry_after_cap: float = 30.0
    backoff: float = 0.5
    openai: LlmOpenAISettings = field(default_factory=LlmOpenAISettings)
    ollama: LlmOllamaSettings = field(default_factory=LlmOllamaSettings)


def llm_settings(section: LlmSection) -> LlmSettings:
    data = section.model_dump()
    return LlmSettings(
        **{k: v for k, v in data.items() if k not in ("openai", "ollama")},
        openai=LlmOpenAISettings(**data["openai"]),
        ollama=LlmOllamaSettings(**data["ollama"]),
    )


@dataclass(frozen=True)
class StoreSettings:
    """Where the tier stores live (``store:`` in rag.yaml; defaults: :class:`StoreSection`)."""

    backend: str = "sqlite"  # sqlite | postgres
    url: str | None = None  # postgresql://...; each tier in its own schema (rag_public, ...)
    ef_search: int = 400
    vector_search: str = "hnsw"  # hnsw | exact (the search process's own copy of the vectors)
    hnsw_m: int = 16
    hnsw_ef_construction: int = 64

    @property
    def hnsw(self) -> tuple[int, int]:
        """(m, ef_construction) of the HNSW index."""
        return self.hnsw_m, self.hnsw_ef_construction

    @property
    def postgres(self) -> bool:
        return self.backend == "postgres"


# --- The configuration the pipeline uses ------------------------------------------------


@dataclass(frozen=True)
class VaultConfig:
    """A note vault listed in ``rag.yaml`` (indexed by the privacy-tier assets)."""

    name: str
    path: Path
    tier: str
    # Obsidian's templates folder, relative to the vault: skipped and reported (None: indexed).
    templates_folder: str | None = "Templates"


@dataclass(frozen=True)
class AutomationConfig:
    """The change sensor and the nightly rebuild (defaults: :class:`AutomationSection`)."""

    sensor_interval_seconds: int = FILE_DEFAULTS.automation.sensor_interval_seconds
    sensor_enabled: bool = FILE_DEFAULTS.automation.sensor_enabled
    nightly_cron: str = FILE_DEFAULTS.automation.nightly_cron
    timezone: str = FILE_DEFAULTS.automation.timezone


# The sample content shipped in this repository and the question set written for it.
REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CONTENT_DIR = REPO_ROOT / "content"
SAMPLE_QUESTIONS = REPO_ROOT / "eval" / "questions" / "sample.jsonl"


@dataclass(frozen=True)
class EvaluationConfig:
    """Question sets scored by ``retrieval_eval`` (defaults: :class:`EvaluationSection`)."""

    questions: tuple[Path, ...] = ()
    hit_at_5_floor: float = FILE_DEFAULTS.evaluation.hit_at_5_floor


def default_question_files(content_dir: Path) -> tuple[Path, ...]:
    """The shipped sample question set when ``content_dir`` is the repository's sample content."""
    if content_dir.resolve() == SAMPLE_CONTENT_DIR.resolve() and SAMPLE_QUESTIONS.is_file():
        return (SAMPLE_QUESTIONS,)
    return ()


def chunking_params(section: ChunkingSection) -> ChunkingParams:
    return ChunkingParams(**section.model_dump())


def embedder_settings(section: EmbedderSection, name: str | None = None) -> EmbedderSettings:
    """The pipeline's settings for a validated ``embedder:`` section (``name`` replaces its name)."""
    return EmbedderSettings(
        name=name or section.name,
        batch_size=section.batch_size,
        max_retries=section.max_retries,
        timeout=section.timeout,
        retry_after_cap=section.retry_after_cap,
        backoff=section.backoff,
        openai=OpenAISettings(**section.openai.model_dump()),
        ollama=OllamaSettings(**section.ollama.model_dump()),
        local_model_path=section.local.model_path,
        hashing_dimension=section.hashing.dimension,
    )


@dataclass(frozen=True)
class RagConfig:
    """Everything a build needs to know, resolved to absolute paths.

    Built from a validated :class:`ConfigFile` by :func:`load_config`; its defaults are that
    model's, so a RagConfig made by hand (tests, benchmarks) agrees with an empty rag.yaml.
    """

    content_dir: Path
    output_dir: Path
    embedding: EmbedderSettings = field(default_factory=lambda: embedder_settings(FILE_DEFAULTS.embedder))
    collections: tuple[str, ...] | None = None  # None: discover the content dir's folders
    collection_weights: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_COLLECTION_WEIGHTS)
    )
    chunking: ChunkingParams = field(default_factory=lambda: chunking_params(FILE_DEFAULTS.chunking))
    # Shards of the collections split into several partitions; a collection not listed has one.
    collection_shards: Mapping[str, int] = field(default_factory=dict)
    vaults: tuple[VaultConfig, ...] = ()
    # The Private tier embeds only locally (Ollama on loopback or a listed host, the local
    # model, hashing); `private_hosts` lists the non-loopback Ollama hosts trusted with it.
    private_embedding: EmbedderSettings = field(
        default_factory=lambda: embedder_settings(FILE_DEFAULTS.embedder, FILE_DEFAULTS.private_tier.embedder)
    )
    private_hosts: tuple[str, ...] = ()
    identity_map_path: Path | None = None  # Safe-tier placeholders for hostnames, users, ...
    vector_decimals: int = FILE_DEFAULTS.vector_decimals
    vector_encoding: str = FILE_DEFAULTS.public_index.vector_encoding  # float | float16 | int16 | int8 | int16-bin
    automation: AutomationConfig = AutomationConfig()
    # Off unless rag.yaml names a reranker; the Private tier uses only a local one.
    reranker: RerankerSettings = field(default_factory=RerankerSettings)
    config_path: Path | None = None
    # A symlink whose target lies outside its content folder (or vault) is skipped unless
    # this is set; even then it never leads into another tier's folders.
    follow_symlinks: bool = FILE_DEFAULTS.follow_symlinks
    # A larger file is skipped and reported: one huge file must not exhaust a build.
    max_file_bytes: int = FILE_DEFAULTS.max_file_bytes
    evaluation: EvaluationConfig = EvaluationConfig()
    # The chat model of `rag ask` and POST /ask; the Private tier answers only with a local one.
    llm: LlmSettings = field(default_factory=LlmSettings)
    # SQLite files (the default), or PostgreSQL + pgvector synced from them (rag_assets.index.pg_sync).
    store: StoreSettings = field(default_factory=StoreSettings)
    # Tokens, per-client limits and the other sites' origins of `rag serve` (rag_assets.serve.access).
    serve: ServeSettings = field(default_factory=ServeSettings)

    @property
    def embedder(self) -> str:
        return self.embedding.name

    @property
    def embedding_cache_path(self) -> Path:
        return self.data_dir / "embedding-cache.db"

    @property
    def document_cache_path(self) -> Path:
        return self.data_dir / "document-cache.db"

    @property
    def indexed_ledger_path(self) -> Path:
        return self.data_dir / "indexed-collections.json"

    @property
    def stat_cache_path(self) -> Path:
        return self.data_dir / "stat-cache.json"

    @property
    def public_dir(self) -> Path:
        return self.output_dir / "public"

    @property
    def data_dir(self) -> Path:
        return self.output_dir / "data"

    @property
    def index_path(self) -> Path:
        return self.public_dir / "embeddings-index.json"

    @property
    def meta_path(self) -> Path:
        return self.public_dir / "embeddings-meta.json"

    @property
    def public_store_path(self) -> Path:
        return self.data_dir / "rag-store-public.db"

    @property
    def manifest_path(self) -> Path:
        return self.data_dir / "rag-manifest.json"

    @property
    def safe_store_path(self) -> Path:
        """The Safe tier: sanitised notes of the vaults marked safe."""
        return self.data_dir / "rag-store-blog.db"

    @property
    def private_store_path(self) -> Path:
        """The Private tier: every vault, raw; embedded only locally."""
        return self.data_dir / "rag-store.db"

    @property
    def private_embedding_cache_path(self) -> Path:
        """Kept apart from the shared cache so nothing derived from private text sits in a
        file the other tiers use."""
        return self.data_dir / "embedding-cache-private.db"

    def store_path(self, tier: str) -> Path:
        return {"public": self.public_store_path, "safe": self.safe_store_path, "private": self.private_store_path}[tier]

    def tier_vaults(self, tier: str) -> tuple[VaultConfig, ...]:
        """The vaults a tier indexes: the safe ones for Safe, every vault for Private."""
        if tier == "private":
            return self.vaults
        if tier == "safe":
            return tuple(v for v in self.vaults if v.tier == "safe")
        return ()

    def shard_count(self, collection: str) -> int:
        """How many shards (partitions) the collection is split into; 1 unless ``shards:`` says more."""
        return self.collection_shards.get(collection, 1)

    def vault(self, name: str) -> VaultConfig:
        for v in self.vaults:
            if v.name == name:
                return v
        raise KeyError(f"no vault named {name!r} in the config; known: {', '.join(v.name for v in self.vaults) or 'none'}")

    @property
    def intermediate_dir(self) -> Path:
        """Where Dagster's IO manager keeps the per-collection records between assets."""
        return self.data_dir / "intermediate"
