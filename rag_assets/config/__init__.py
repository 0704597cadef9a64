"""Configuration: ``rag.yaml`` and its overrides, validated whole, as one ``RagConfig``.

The schema (pydantic) says which keys exist and their defaults; loading reports every
problem with its key path and line; the settings are what the pipeline carries. This
package imports nothing of the pipeline.

Its names are imported on first use (PEP 562): building the pydantic models is most of what
reading the configuration costs, and ``rag --help`` or a module that needs only
:data:`TIERS` should not pay for it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and readers see; at run time __getattr__ imports them
    from rag_assets.config.errors import ConfigError
    from rag_assets.config.loading import (
        CONFIG_FILE_NAME,
        ENV_OVERRIDES,
        Override,
        build_config,
        collect_overrides,
        describe_error,
        find_config_file,
        load_config,
        read_config_source,
        validate_config_data,
    )
    from rag_assets.config.masking import mask_secrets
    from rag_assets.config.schema import (
        DEFAULT_COLLECTION_WEIGHTS,
        SHARD_MARK,
        ConfigFile,
        invalid_collection_reason,
        shard_mark_problem,
    )
    from rag_assets.config.serialise import config_digest, effective_settings
    from rag_assets.config.settings import (
        CONFIG_ADAPTER,
        AutomationConfig,
        ChunkingParams,
        EmbedderSettings,
        EvaluationConfig,
        OllamaSettings,
        OpenAISettings,
        RagConfig,
        RerankerSettings,
        VaultConfig,
        chunking_params,
        default_question_files,
    )
    from rag_assets.config.tiers import TIERS, VAULTS_FOLDER

# Each public name and the module that defines it.
_HOMES = {
    "rag_assets.config.errors": ("ConfigError",),
    "rag_assets.config.loading": (
        "CONFIG_FILE_NAME",
        "ENV_OVERRIDES",
        "Override",
        "build_config",
        "collect_overrides",
        "describe_error",
        "find_config_file",
        "load_config",
        "read_config_source",
        "validate_config_data",
    ),
    "rag_assets.config.masking": ("mask_secrets",),
    "rag_assets.config.schema": (
        "DEFAULT_COLLECTION_WEIGHTS",
        "SHARD_MARK",
        "ConfigFile",
        "invalid_collection_reason",
        "shard_mark_problem",
    ),
    "rag_assets.config.serialise": ("config_digest", "effective_settings"),
    "rag_assets.config.settings": (
        "CONFIG_ADAPTER",
        "AutomationConfig",
        "ChunkingParams",
        "EmbedderSettings",
        "EvaluationConfig",
        "OllamaSettings",
        "OpenAISettings",
        "RagConfig",
        "RerankerSettings",
        "VaultConfig",
        "chunking_params",
        "default_question_files",
    ),
    "rag_assets.config.tiers": ("TIERS", "VAULTS_FOLDER"),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "CONFIG_FILE_NAME",
    "DEFAULT_COLLECTION_WEIGHTS",
    "SHARD_MARK",
    "ENV_OVERRIDES",
    "TIERS",
    "VAULTS_FOLDER",
    "AutomationConfig",
    "ChunkingParams",
    "ConfigError",
    "ConfigFile",
    "EmbedderSettings",
    "EvaluationConfig",
    "OllamaSettings",
    "OpenAISettings",
    "Override",
    "RagConfig",
    "RerankerSettings",
    "VaultConfig",
    "build_config",
    "chunking_params",
    "collect_overrides",
    "CONFIG_ADAPTER",
    "config_digest",
    "default_question_files",
    "describe_error",
    "effective_settings",
    "find_config_file",
    "invalid_collection_reason",
    "load_config",
    "mask_secrets",
    "read_config_source",
    "shard_mark_problem",
    "validate_config_data",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use, then keep it here."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
