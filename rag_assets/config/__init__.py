"""Configuration: ``rag.yaml`` and its overrides, validated whole, as one ``RagConfig``.

The schema (pydantic) says which keys exist and their defaults; loading reports every
problem with its key path and line; the settings are what the pipeline carries. This
package imports nothing of the pipeline.
"""

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
from rag_assets.config.serialise import (
    config_digest,
    effective_settings,
)
from rag_assets.config.settings import (
    CONFIG_ADAPTER,
    TIERS,
    VAULTS_FOLDER,
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

__all__ = [
    "CONFIG_FILE_NAME", "DEFAULT_COLLECTION_WEIGHTS", "SHARD_MARK", "ENV_OVERRIDES", "TIERS", "VAULTS_FOLDER", "AutomationConfig",
    "ChunkingParams", "ConfigError", "ConfigFile", "EmbedderSettings", "EvaluationConfig", "OllamaSettings", "OpenAISettings",
    "Override", "RagConfig", "RerankerSettings", "VaultConfig", "build_config", "chunking_params", "collect_overrides",
    "CONFIG_ADAPTER", "config_digest", "default_question_files", "describe_error", "effective_settings",
    "find_config_file", "invalid_collection_reason", "load_config", "mask_secrets", "read_config_source",
    "shard_mark_problem", "validate_config_data",
]
