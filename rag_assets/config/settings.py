"""The configuration the pipeline uses, resolved to absolute paths: ``RagConfig`` and the
settings it carries.

These are pydantic models (pydantic dataclasses: validated when made, by hand or with
``dataclasses.replace``); a section whose settings need no resolving is the schema's own model
(``LlmSettings`` is :class:`LlmSection`...), so each of its settings is written once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from pathlib import Path

from pydantic import TypeAdapter
from pydantic.dataclasses import dataclass

from rag_assets.config.schema import (
    DEFAULT_COLLECTION_WEIGHTS,
    FILE_DEFAULTS,
    AutomationSection,
    ChunkingSection,
    EmbedderSection,
    LlmOllamaSection,
    LlmOpenAISection,
    LlmSection,
    OllamaSection,
    OpenAISection,
    RerankerSection,
    StoreSection,
)
from rag_assets.config.serving import ServeSettings
from rag_assets.config.tiers import TIERS, VAULTS_FOLDER  # noqa: F401 (their home before tiers.py)


@dataclass(frozen=True)
class ChunkingParams:
    """Size knobs; defaults (:class:`ChunkingSection`'s) suit ~512-token embedding models.

    ``target_words`` bounds the *new* (non-overlap) body words of a chunk;
    ``min_words`` must not exceed it. Still apart from the section: its bounds are the chunker's,
    looser than rag.yaml's (a minimum of 0, an overlap up to the target).
    """

    target_words: int = FILE_DEFAULTS.chunking.target_words
    overlap_words: int = FILE_DEFAULTS.chunking.overlap_words
    min_words: int = FILE_DEFAULTS.chunking.min_words
    max_chars: int = FILE_DEFAULTS.chunking.max_chars

    def __post_init__(self) -> None:
        if self.target_words < 1:
            raise ValueError("target_words must be >= 1")
        if self.overlap_words < 0 or self.min_words < 0:
            raise ValueError("overlap_words and min_words must be >= 0")
        if self.min_words > self.target_words:
            raise ValueError("min_words must not exceed target_words")
        if self.max_chars < 100:
            raise ValueError("max_chars must be >= 100")


# The sections that need no resolving are the schema's models themselves.
EmbedderSettings = EmbedderSection  # which embedder runs and how it behaves (``embedder:``)
OpenAISettings = OpenAISection
OllamaSettings = OllamaSection
RerankerSettings = RerankerSection  # the optional reranking stage (``reranker:``)
LlmSettings = LlmSection  # the chat model that answers (``llm:``)
LlmOpenAISettings = LlmOpenAISection
LlmOllamaSettings = LlmOllamaSection
StoreSettings = StoreSection  # where the tier stores live (``store:``)
AutomationConfig = AutomationSection  # the change sensors and the nightly schedules (``automation:``)


# --- The configuration the pipeline uses ------------------------------------------------


@dataclass(frozen=True)
class VaultConfig:
    """A note vault listed in ``rag.yaml`` (indexed by the privacy-tier assets)."""

    name: str
    path: Path
    tier: str
    # Obsidian's templates folder, relative to the vault: skipped and reported (None: indexed).
    templates_folder: str | None = "Templates"
    # Note embeds bring the embedded text into the embedding note (rag_assets/ingest/transclusion.py).
    transclude_embeds: bool = False


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


def private_embedder_settings(section: EmbedderSection, name: str) -> EmbedderSettings:
    """The Private tier's embedder: the provider sections (hosts, models) are shared with the
    main embedder; only the choice of provider is the tier's own."""
    return section.model_copy(update={"name": name})


@dataclass(frozen=True)
class RagConfig:
    """Everything a build needs to know, resolved to absolute paths.

    Built from a validated :class:`ConfigFile` by :func:`load_config`; its defaults are that
    model's, so a RagConfig made by hand (tests, benchmarks) agrees with an empty rag.yaml.
    """

    content_dir: Path
    output_dir: Path
    embedding: EmbedderSettings = FILE_DEFAULTS.embedder
    collections: tuple[str, ...] | None = None  # None: discover the content dir's folders
    collection_weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_COLLECTION_WEIGHTS))
    chunking: ChunkingParams = field(default_factory=lambda: chunking_params(FILE_DEFAULTS.chunking))
    # Shards of the collections split into several partitions; a collection not listed has one.
    collection_shards: Mapping[str, int] = field(default_factory=dict)
    vaults: tuple[VaultConfig, ...] = ()
    # The Private tier embeds only locally (Ollama on loopback or a listed host, the local
    # model, hashing); `private_hosts` lists the non-loopback Ollama hosts trusted with it.
    private_embedding: EmbedderSettings = field(
        default_factory=lambda: private_embedder_settings(FILE_DEFAULTS.embedder, FILE_DEFAULTS.private_tier.embedder)
    )
    private_hosts: tuple[str, ...] = ()
    identity_map_path: Path | None = None  # Safe-tier placeholders for hostnames, users, ...
    vector_decimals: int = FILE_DEFAULTS.vector_decimals
    vector_encoding: str = FILE_DEFAULTS.public_index.vector_encoding  # float | float16 | int16 | int8 | int16-bin
    automation: AutomationConfig = field(default_factory=AutomationConfig)
    # Off unless rag.yaml names a reranker; the Private tier uses only a local one.
    reranker: RerankerSettings = field(default_factory=RerankerSettings)
    config_path: Path | None = None
    # A symlink whose target lies outside its content folder (or vault) is skipped unless
    # this is set; even then it never leads into another tier's folders.
    follow_symlinks: bool = FILE_DEFAULTS.follow_symlinks
    # A larger file is skipped and reported: one huge file must not exhaust a build.
    max_file_bytes: int = FILE_DEFAULTS.max_file_bytes
    # Processes that parse and chunk (rag_assets.base.work_pool): 0 is one per core.
    workers: int = FILE_DEFAULTS.workers
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
    def ledger_facts_path(self) -> Path:
        """The output check's facts of each manifest ledger segment (rag_assets.index.ledger_facts)."""
        return self.data_dir / "ledger-facts.json"

    @property
    def watch_dir(self) -> Path:
        """`rag watch`'s journal, lock, cookies and snapshots (rag_assets.ingest.change_journal)."""
        return self.data_dir / "watch"

    @property
    def shard_splits_path(self) -> Path:
        """The sharded collections' shard hashes by content hash (rag_assets.ingest.shards.ShardSplits)."""
        return self.data_dir / "shard-splits.json"

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
        return {"public": self.public_store_path, "safe": self.safe_store_path, "private": self.private_store_path}[
            tier
        ]

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
        raise KeyError(
            f"no vault named {name!r} in the config; known: {', '.join(v.name for v in self.vaults) or 'none'}"
        )

    @property
    def intermediate_dir(self) -> Path:
        """Where Dagster's IO manager keeps the per-collection records between assets."""
        return self.data_dir / "intermediate"


# Validates and dumps a RagConfig with pydantic, from the dataclasses' own types: how the whole
# configuration crosses into a Dagster run (rag_assets/defs/config_schema.py) and to a worker
# process (rag_assets/defs/distributed.py), with no serialiser of its own to keep up to date.
CONFIG_ADAPTER: TypeAdapter[RagConfig] = TypeAdapter(RagConfig)
