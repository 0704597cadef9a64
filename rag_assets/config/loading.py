"""Reading ``rag.yaml`` with its environment and command-line overrides into a validated
``RagConfig``; every problem reported with its key path, file line, value and a suggestion.

Precedence, lowest to highest: built-in defaults, the config file, environment variables
(``RAG_CONTENT_DIR``, ``RAG_OUTPUT_DIR``, ``RAG_EMBEDDER``, ``RAG_PRIVATE_EMBEDDER``,
``RAG_STORE_URL``),
explicit overrides (CLI flags). Relative paths in the file are resolved against the file's
folder, so ``rag`` works from any working directory."""

from __future__ import annotations

import copy
import difflib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ValidationError,
)

from rag_assets.config.errors import ConfigError
from rag_assets.config.masking import shown_value
from rag_assets.config.path_checks import path_problems
from rag_assets.config.providers import private_provider_problem
from rag_assets.config.schema import (
    DEFAULT_COLLECTION_WEIGHTS,
    POSTGRES_SCHEMES,
    ConfigFile,
    Loc,
    first_model,
)
from rag_assets.config.serving import serve_settings
from rag_assets.config.settings import (
    EvaluationConfig,
    RagConfig,
    VaultConfig,
    chunking_params,
    default_question_files,
    private_embedder_settings,
)
from rag_assets.config.source import ConfigSource, display_path, dotted, read_config_source
from rag_assets.config.store_url import private_store_problem

CONFIG_FILE_NAME = "rag.yaml"
# The environment variables that override the file, lowest precedence first; CLI flags of
# the same names (--content-dir, ...) override them in turn.
ENV_OVERRIDES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("RAG_CONTENT_DIR", ("content_dir",)),
    ("RAG_OUTPUT_DIR", ("output_dir",)),
    ("RAG_EMBEDDER", ("embedder", "name")),
    ("RAG_PRIVATE_EMBEDDER", ("private_tier", "embedder")),
    ("RAG_STORE_URL", ("store", "url")),
)
# Overrides naming a folder are relative to where the user typed them, not to the file.
_PATH_KEYS = {("content_dir",), ("output_dir",)}


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


@dataclass(frozen=True)
class Override:
    """A value from the environment or a flag that replaces the file's, and where it came from."""

    label: str  # "$RAG_EMBEDDER", "--embedder"
    path: tuple[str, ...]
    value: str


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
    if env.get("RAG_STORE_URL", "").startswith(POSTGRES_SCHEMES):
        # A PostgreSQL URL in the environment selects that backend, whatever the file says.
        found.append(Override("$RAG_STORE_URL", ("store", "backend"), "postgres"))
    flags = (
        ("--content-dir", ("content_dir",), content_dir),
        ("--output-dir", ("output_dir",), output_dir),
        ("--embedder", ("embedder", "name"), embedder),
        ("--private-embedder", ("private_tier", "embedder"), private_embedder),
    )
    found += [Override(label, path, str(value)) for label, path, value in flags if value is not None]
    # Flags and env vars name folders relative to where the user typed them, not to the file.
    return [
        replace(o, value=str(resolved_path(Path(os.path.expanduser(o.value)), o.label))) if o.path in _PATH_KEYS else o
        for o in found
    ]


def resolved_path(path: Path, given_by: str) -> Path:
    """``path`` made absolute with its symlinks resolved; a ConfigError naming ``given_by``
    (a flag, a variable, the file) when a symlink loop makes that impossible."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: pathlib's "Symlink loop from ..."
        raise ConfigError(
            f"{given_by}: {path} cannot be resolved ({exc}); a symlink on the way points back at itself, "
            "so point it at a real folder"
        ) from None


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
        model = first_model(field_info.annotation) if field_info else None
    return model


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
    found = _environment_problems(cfg, env) + path_problems(cfg)
    problems = [f"{locator.where(loc)}: {message}" for loc, message in found]
    if problems:
        raise ConfigError.from_problems(problems)
    return cfg


def config_from_text(path: Path, text: str, environ: Mapping[str, str] | None = None) -> RagConfig:
    """The configuration ``path`` would give if it held ``text`` (no overrides applied): the same
    validation as :func:`load_config`, so a file about to be rewritten is checked before it is."""
    env = os.environ if environ is None else environ
    source = read_config_source(path, text)
    model = validate_config_data(source.data, _Locator(source))
    cfg = build_config(model, base_dir=path.parent, config_path=path)
    problems = [
        f"{display_path(path)}: {message}" for _, message in _environment_problems(cfg, env) + path_problems(cfg)
    ]
    if problems:
        raise ConfigError.from_problems(problems)
    return cfg


def build_config(model: ConfigFile, *, base_dir: Path, config_path: Path | None = None) -> RagConfig:
    """The pipeline's view of a validated file: paths resolved against ``base_dir``."""

    def resolve(value: str) -> Path:
        p = Path(os.path.expanduser(value))
        return resolved_path(
            p if p.is_absolute() else base_dir / p, display_path(config_path) if config_path else "rag.yaml"
        )

    vaults = tuple(
        VaultConfig(
            name=v.name,
            path=resolve(v.path),
            tier=v.tier,
            templates_folder=v.templates_folder,
            transclude_embeds=v.transclude_embeds,
        )
        for v in model.vaults
    )
    identity_map = resolve(model.identity_map) if model.identity_map else None
    if identity_map and not identity_map.is_file() and not any(v.tier == "safe" for v in vaults):
        identity_map = None  # only the Safe tier needs it (and _environment_problems insists then)
    content_dir = resolve(model.content_dir)
    questions = model.evaluation.questions
    evaluation = EvaluationConfig(
        questions=tuple(resolve(q) for q in questions)
        if questions is not None
        else default_question_files(content_dir),
        hit_at_5_floor=model.evaluation.hit_at_5_floor,
    )
    return RagConfig(
        content_dir=content_dir,
        output_dir=resolve(model.output_dir),
        embedding=model.embedder,
        collections=tuple(model.collections) if model.collections is not None else None,
        collection_weights={**DEFAULT_COLLECTION_WEIGHTS, **model.weights},
        collection_shards=dict(model.shards),
        chunking=chunking_params(model.chunking),
        vaults=vaults,
        # The provider sections (hosts, models) are shared with the main embedder; only the
        # choice of provider is the Private tier's own.
        private_embedding=private_embedder_settings(model.embedder, model.private_tier.embedder),
        private_hosts=tuple(model.private_tier.allowed_hosts),
        identity_map_path=identity_map,
        vector_decimals=model.vector_decimals,
        vector_encoding=model.public_index.vector_encoding,
        automation=model.automation,
        reranker=model.reranker,
        config_path=config_path,
        follow_symlinks=model.follow_symlinks,
        max_file_bytes=model.max_file_bytes,
        workers=model.workers,
        evaluation=evaluation,
        llm=model.llm,
        store=model.store,
        serve=serve_settings(model.serve, resolve),
    )


def _environment_problems(cfg: RagConfig, env: Mapping[str, str]) -> list[tuple[Loc, str]]:
    """Problems that depend on more than the file: $OLLAMA_HOST, files on disk."""
    problems: list[tuple[Loc, str]] = []
    problem = private_provider_problem(
        cfg.private_embedding.name, cfg.private_embedding.ollama.host, cfg.private_hosts, env
    )
    if problem:
        problems.append((("private_tier", "embedder"), f"private_tier.embedder: {problem}"))
    if cfg.store.postgres and cfg.vaults:  # the Private tier indexes every vault
        problem = private_store_problem(cfg.store.url, env)
        if problem:
            problems.append((("store", "url"), f"store.url: {problem}"))
    if cfg.identity_map_path is not None and not cfg.identity_map_path.is_file() and cfg.tier_vaults("safe"):
        problems.append(
            (
                ("identity_map",),
                f"identity map {cfg.identity_map_path} does not exist; the Safe tier needs it to replace hostnames, "
                "users and addresses (create it, or set identity_map: null to rely on secret detection alone)",
            )
        )
    return problems
