"""One configuration per entry point, from the path given: never read at import, never from
the working folder unless that is the path given.

Each case runs in a fresh Python process (as a user would), so that nothing imported by an
earlier test hides an import-time read of the configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import PROXMOX_POST, REPO_ROOT

# Valid YAML that no rag.yaml may hold: min_words above the target size fails validation.
BROKEN_CONFIG = "chunking: {min_words: 900, target_words: 400}\n"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: this checkout first on the path, no RAG_CONFIG or DAGSTER_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "DAGSTER_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**env, **extra}


def broken_folder(tmp_path: Path) -> Path:
    """A folder whose own rag.yaml does not validate: where the user stands."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "rag.yaml").write_text(BROKEN_CONFIG, encoding="utf-8")
    return here


def test_build_with_config_elsewhere_ignores_the_broken_rag_yaml_of_the_working_folder(tmp_path):
    here = broken_folder(tmp_path)
    site = tmp_path / "site"
    (site / "content" / "posts").mkdir(parents=True)
    (site / "content" / "posts" / "a.md").write_text(PROXMOX_POST, encoding="utf-8")
    (site / "rag.yaml").write_text(
        "content_dir: content\noutput_dir: out\nidentity_map: null\nembedder: {name: hashing}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "rag_assets.serve.cli", "build", "--config", "../site/rag.yaml"],
        cwd=here,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[posts] 1 documents" in proc.stdout
    assert (site / "out" / "public" / "embeddings-index.json").is_file()


def test_importing_the_code_location_reads_no_configuration(tmp_path):
    here = broken_folder(tmp_path)
    code = "import rag_assets.definitions, rag_assets.definitions_k8s; print('imported')"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=here, env=clean_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "imported" in proc.stdout
