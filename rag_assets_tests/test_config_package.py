"""``rag_assets.config`` imports its names on first use (PEP 562): each public name must still
be the object its own module defines, and a name that only needs a constant must not build the
pydantic models."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import rag_assets.config as config_package

from .conftest import REPO_ROOT


@pytest.mark.parametrize("name", config_package.__all__)
def test_every_public_name_resolves_to_its_modules_own_object(name):
    value = getattr(config_package, name)
    assert name in dir(config_package)
    home = getattr(value, "__module__", None)  # classes and functions say where they live
    if home and home.startswith("rag_assets.config."):
        assert getattr(importlib.import_module(home), name, value) is value


def test_the_package_exports_what_it_did_before_it_was_lazy():
    assert set(config_package.__all__) == {
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
    }


def test_an_unknown_name_is_an_import_error():
    with pytest.raises(AttributeError, match="no attribute 'load_confg'"):
        config_package.load_confg  # noqa: B018
    with pytest.raises(ImportError):
        from rag_assets.config import load_confg  # noqa: F401


def test_the_tier_names_build_no_models():
    """In a fresh interpreter: TIERS comes without pydantic; RagConfig then brings it."""
    code = (
        "import sys\n"
        "from rag_assets.config import TIERS, VAULTS_FOLDER\n"
        "assert TIERS == ('public', 'safe', 'private') and VAULTS_FOLDER == 'vaults'\n"
        "before = 'pydantic' in sys.modules\n"
        "from rag_assets.config import RagConfig\n"
        "print(before, 'pydantic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
