"""Project configuration: ``rag.yaml``, environment overrides and collection discovery.

Precedence, lowest to highest: built-in defaults, the config file, environment
variables (``RAG_CONTENT_DIR``, ``RAG_OUTPUT_DIR``, ``RAG_EMBEDDER``), explicit
overrides (CLI flags). Relative paths in the file are resolved against the
file's folder, so ``rag`` works from any working directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from rag_assets.chunking import ChunkingParams
from rag_assets.embedders.selection import PROVIDERS, EmbedderSettings, OllamaSettings, OpenAISettings, canonical_name
from rag_assets.privacy import private_settings_problem

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


class ConfigError(ValueError):
    """The configuration is unusable; the message says what to fix."""


@dataclass(frozen=True)
class VaultConfig:
    """A note vault listed in ``rag.yaml`` (indexed by the privacy-tier assets)."""

    name: str
    path: Path
    tier: str


@dataclass(frozen=True)
class AutomationConfig:
    """The change sensor and the nightly rebuild."""

    sensor_interval_seconds: int = 30
    sensor_enabled: bool = True
    nightly_cron: str = "0 3 * * *"
    timezone: str = "UTC"


@dataclass(frozen=True)
class RagConfig:
    """Everything a build needs to know, resolved to absolute paths."""

    content_dir: Path
    output_dir: Path
    embedding: EmbedderSettings = EmbedderSettings()
    collections: tuple[str, ...] | None = None  # None: discover the content dir's folders
    collection_weights: Mapping[str, float] = field(
        default_factory=lambda: dict(DEFAULT_COLLECTION_WEIGHTS)
    )
    chunking: ChunkingParams = ChunkingParams()
    vaults: tuple[VaultConfig, ...] = ()
    # The Private tier embeds only locally (Ollama on loopback or a listed host, the local
    # model, hashing); `private_hosts` lists the non-loopback Ollama hosts trusted with it.
    private_embedding: EmbedderSettings = EmbedderSettings(name="auto")
    private_hosts: tuple[str, ...] = ()
    identity_map_path: Path | None = None  # Safe-tier placeholders for hostnames, users, ...
    vector_decimals: int = 5
    automation: AutomationConfig = AutomationConfig()
    config_path: Path | None = None
    # A symlink whose target lies outside its content folder (or vault) is skipped unless
    # this is set; even then it never leads into another tier's folders.
    follow_symlinks: bool = False
    # A larger file is skipped and reported: one huge file must not exhaust a build.
    max_file_bytes: int = 20_000_000

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


def load_config(
    config_file: str | os.PathLike[str] | None = None,
    *,
    content_dir: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    embedder: str | None = None,
    private_embedder: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> RagConfig:
    """Read the config file (if any) and apply environment and explicit overrides."""
    env = os.environ if environ is None else environ
    path = find_config_file(config_file)
    raw = _read_yaml_mapping(path) if path else {}
    base = path.parent if path else Path.cwd()

    def resolve(value: str | os.PathLike[str]) -> Path:
        p = Path(os.path.expanduser(str(value)))
        return (p if p.is_absolute() else base / p).resolve()

    def resolve_cli(value: str | os.PathLike[str]) -> Path:
        # Flags and env vars are relative to where the user typed them, not to the file.
        return Path(os.path.expanduser(str(value))).resolve()

    chunk_raw = _mapping(raw.get("chunking", {}), "chunking")
    embedding = _parse_embedder(raw.get("embedder", "auto"), path)
    weights = dict(DEFAULT_COLLECTION_WEIGHTS)
    weights.update({str(k): float(v) for k, v in _mapping(raw.get("weights", {}), "weights").items()})
    collections = raw.get("collections")
    if collections is not None:
        if not isinstance(collections, list) or not all(isinstance(c, str) for c in collections):
            raise ConfigError(f"{path}: 'collections' must be a list of folder names")
        collections = tuple(collections)

    private_raw = _mapping(raw.get("private_tier"), "private_tier")
    unknown_private = sorted(set(private_raw) - {"embedder", "allowed_hosts"})
    if unknown_private:
        raise ConfigError(f"{path}: unknown private_tier setting(s) {', '.join(unknown_private)}; known: embedder, allowed_hosts")
    hosts = private_raw.get("allowed_hosts") or []
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ConfigError(f"{path}: private_tier.allowed_hosts must be a list of host names or addresses")
    identity_raw = raw.get("identity_map", "identity_map.json")

    cfg = RagConfig(
        content_dir=resolve(raw.get("content_dir", "content")),
        output_dir=resolve(raw.get("output_dir", ".")),
        embedding=embedding,
        collections=collections,
        collection_weights=weights,
        chunking=_parse_chunking(chunk_raw, path),
        vaults=tuple(_parse_vaults(raw.get("vaults", []), resolve, path)),
        # The provider sections (hosts, models) are shared with the main embedder; only the
        # choice of provider is the Private tier's own.
        private_embedding=replace(embedding, name=str(private_raw.get("embedder", "auto"))),
        private_hosts=tuple(hosts),
        identity_map_path=resolve(identity_raw) if identity_raw else None,
        vector_decimals=int(raw.get("vector_decimals", 5)),
        automation=_parse_automation(raw.get("automation"), path),
        config_path=path,
        follow_symlinks=bool(raw.get("follow_symlinks", False)),
        max_file_bytes=int(raw.get("max_file_bytes", 20_000_000)),
    )
    if env.get("RAG_CONTENT_DIR"):
        cfg = replace(cfg, content_dir=resolve_cli(env["RAG_CONTENT_DIR"]))
    if env.get("RAG_OUTPUT_DIR"):
        cfg = replace(cfg, output_dir=resolve_cli(env["RAG_OUTPUT_DIR"]))
    if env.get("RAG_EMBEDDER"):
        cfg = replace(cfg, embedding=replace(cfg.embedding, name=env["RAG_EMBEDDER"]))
    if content_dir is not None:
        cfg = replace(cfg, content_dir=resolve_cli(content_dir))
    if output_dir is not None:
        cfg = replace(cfg, output_dir=resolve_cli(output_dir))
    if embedder is not None:
        cfg = replace(cfg, embedding=replace(cfg.embedding, name=embedder))
    if env.get("RAG_PRIVATE_EMBEDDER"):
        cfg = replace(cfg, private_embedding=replace(cfg.private_embedding, name=env["RAG_PRIVATE_EMBEDDER"]))
    if private_embedder is not None:
        cfg = replace(cfg, private_embedding=replace(cfg.private_embedding, name=private_embedder))
    if cfg.identity_map_path and not cfg.identity_map_path.is_file() and not cfg.tier_vaults("safe"):
        cfg = replace(cfg, identity_map_path=None)  # the default file, not needed without safe vaults
    _validate(cfg, env)
    return cfg


def _read_yaml_mapping(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings, not {type(data).__name__}")
    return data


def _mapping(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"'{name}' in the config must be a mapping")
    return value


def _parse_automation(raw: Any, path: Path | None) -> AutomationConfig:
    try:
        return AutomationConfig(**_mapping(raw, "automation"))
    except TypeError as exc:
        raise ConfigError(f"{path}: automation: {exc}") from None


def _parse_chunking(raw: dict[str, Any], path: Path | None) -> ChunkingParams:
    unknown = sorted(set(raw) - set(ChunkingParams.__dataclass_fields__))
    if unknown:
        known = ", ".join(ChunkingParams.__dataclass_fields__)
        raise ConfigError(f"{path}: unknown chunking setting(s) {', '.join(unknown)}; known: {known}")
    try:
        return ChunkingParams(**{k: int(v) for k, v in raw.items()})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: chunking: {exc}") from None


def _parse_embedder(raw: Any, path: Path | None) -> EmbedderSettings:
    """``embedder: NAME`` or a mapping with ``name`` and per-provider sections."""
    if isinstance(raw, str):
        return EmbedderSettings(name=raw)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: 'embedder' must be a name (auto, hashing, ...) or a mapping with 'name'")
    try:
        openai = OpenAISettings(**_mapping(raw.get("openai"), "embedder.openai"))
        ollama = OllamaSettings(**_mapping(raw.get("ollama"), "embedder.ollama"))
        local = _mapping(raw.get("local"), "embedder.local")
        hashing = _mapping(raw.get("hashing"), "embedder.hashing")
        return EmbedderSettings(
            name=str(raw.get("name", "auto")),
            batch_size=int(raw.get("batch_size", 50)),
            max_retries=int(raw.get("max_retries", 3)),
            timeout=float(raw.get("timeout", 30.0)),
            retry_after_cap=float(raw.get("retry_after_cap", 60.0)),
            backoff=float(raw.get("backoff", 0.5)),
            openai=openai,
            ollama=ollama,
            local_model_path=local.get("model_path"),
            hashing_dimension=int(hashing.get("dimension", 384)),
        )
    except TypeError as exc:
        raise ConfigError(f"{path}: embedder: {exc}") from None


def _parse_vaults(raw: Any, resolve, path: Path | None) -> list[VaultConfig]:
    if not raw:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: 'vaults' must be a list of {{name, path, tier}} entries")
    vaults = []
    for entry in raw:
        if not isinstance(entry, dict) or not {"name", "path"} <= entry.keys():
            raise ConfigError(f"{path}: each vault needs 'name' and 'path' (got {entry!r})")
        tier = str(entry.get("tier", "private"))
        if tier not in ("safe", "private"):
            raise ConfigError(f"{path}: vault {entry['name']!r} has tier {tier!r}; use safe or private")
        name = str(entry["name"])
        reason = invalid_collection_reason(name)
        if reason:
            raise ConfigError(f"{path}: vault name {name!r} cannot be a partition key: {reason.replace('folder', 'vault')}")
        vaults.append(VaultConfig(name=name, path=resolve(entry["path"]), tier=tier))
    return vaults


def _validate(cfg: RagConfig, env: Mapping[str, str]) -> None:
    p = cfg.chunking
    if not (0 < p.min_words <= p.target_words) or not (0 <= p.overlap_words < p.target_words):
        raise ConfigError(
            "chunking needs 0 < min_words <= target_words and 0 <= overlap_words < target_words"
        )
    e = cfg.embedding
    if min(e.hashing_dimension, e.openai.dimension, e.ollama.dimension, e.batch_size) <= 0:
        raise ConfigError("embedder dimensions and batch_size must be positive")
    if canonical_name(e.name) not in PROVIDERS:
        raise ConfigError(f"unknown embedder {e.name!r}; choose one of: {', '.join(PROVIDERS)}")
    problem = private_settings_problem(cfg.private_embedding, cfg.private_hosts, env)
    if problem:
        raise ConfigError(f"private_tier: {problem}")
    names = [v.name for v in cfg.vaults]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"vault name(s) {', '.join(duplicates)} appear more than once; each vault needs its own name")
    if cfg.identity_map_path is not None and not cfg.identity_map_path.is_file() and cfg.tier_vaults("safe"):
        raise ConfigError(
            f"identity map {cfg.identity_map_path} does not exist; the Safe tier needs it to replace hostnames, "
            "users and addresses (create it, or set identity_map: null to rely on secret detection alone)"
        )


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
    :mod:`rag_assets.boundaries`). When the config lists collections explicitly, only
    those are used; a listed collection whose folder is missing is reported, not fatal,
    so that the other collections still build, but a listed name that is a path or a
    folder discovery excludes is excluded with its reason.
    """
    # Imported here: boundaries builds on this module's config types.
    from rag_assets.boundaries import collection_name_problem
    from rag_assets.walker import readable_name

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
