"""The first hour of a new user (issue 26): the sample builds quietly, passes its own leak
audit, and the everyday commands start without loading what only a build or a server needs.

One build of the repository's sample (``content/`` with rag.yaml's vaults and identity map,
hashing embedder, an ephemeral Dagster instance) into a temporary output folder, in a fresh
process whose environment names no DAGSTER_HOME; the tests then run ``rag`` against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

# What `rag search`, `rag status` and `rag --help` must not import: the orchestrator, the web
# and MCP servers, a model runtime, and the build's own stages (planner, chunker, sanitiser).
HEAVY = ("dagster", "starlette", "uvicorn", "mcp", "torch", "sentence_transformers")
BUILD_ONLY = ("rag_assets.planning", "rag_assets.pipeline", "rag_assets.privacy.sanitize", "rag_assets.serve.cli_build")


def rag_env() -> dict[str, str]:
    """The process environment minus anything that would point `rag` elsewhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "DAGSTER_"))}
    env.update(RAG_EMBEDDER="hashing", RAG_PRIVATE_EMBEDDER="hashing", PYTHONPATH=str(REPO_ROOT))
    return env


def rag(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "rag_assets.serve.cli",
        *args,
        "--config",
        str(REPO_ROOT / "rag.yaml"),
        "--output-dir",
        str(out),
    ]
    return subprocess.run(command, env=rag_env(), cwd=out, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("sample")
    build = rag(out, "build")
    assert build.returncode == 0, build.stdout + build.stderr
    return out, build


def test_the_sample_passes_its_own_leak_audit(sample):
    """Public posts show `--target-host root@dns1…` and `admin@example.com`: neither is a leak."""
    out, _ = sample
    audit = rag(out, "audit", "--tier", "all", "--json")
    reports = json.loads(audit.stdout)
    assert [r["tier"] for r in reports] == ["safe", "public"]
    assert all(r["exists"] for r in reports)
    assert [f for r in reports for f in r["findings"]] == []
    assert audit.returncode == 0, audit.stderr


def test_building_the_sample_says_nothing_the_user_cannot_act_on(sample):
    """The vaults folder holds the configured vaults: leaving it out of the collections is no news."""
    _, build = sample
    assert "not a collection" not in build.stdout
    assert "warning" not in (build.stdout + build.stderr).lower()


def imported_by(out: Path, *args: str) -> set[str]:
    """The modules loaded by running `rag ARGS` to its end in a fresh process."""
    listing = out / "modules.json"
    code = (
        "import json, sys\n"
        "from rag_assets.serve.cli import main\n"
        "try:\n"
        f"    status = main({list(args)!r} + ['--config', {str(REPO_ROOT / 'rag.yaml')!r}, '--output-dir', {str(out)!r}])\n"
        "except SystemExit as exc:\n"
        "    status = exc.code\n"
        f"open({str(listing)!r}, 'w').write(json.dumps({{'status': status, 'modules': sorted(sys.modules)}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=rag_env(), cwd=out, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(listing.read_text())
    assert result["status"] == 0, done.stdout + done.stderr
    return set(result["modules"])


def test_a_search_that_sends_nothing_does_not_import_an_http_client(sample):
    """The offline embedder and no reranker: httpx (and the rich/click it brings) is not needed."""
    out, _ = sample
    modules = imported_by(out, "search", "wireguard")
    assert "rag_assets.search.retrieval" in modules
    assert loaded(modules, ("httpx", "httpcore")) == []


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("args", [("search", "wireguard"), ("status",), ("--help",)], ids=["search", "status", "help"])
def test_everyday_commands_do_not_import_the_build_or_the_servers(sample, args):
    """Start-up time is import time: checked by what loads, not by a clock (bench/startup.py times it)."""
    out, _ = sample
    modules = imported_by(out, *args)
    assert "rag_assets.serve.cli" in modules  # the control: the listing is of the command that ran
    assert loaded(modules, HEAVY) == []
    assert loaded(modules, BUILD_ONLY) == []


def test_status_reads_no_vectors(sample):
    """`rag status` reports counts, sizes and freshness: numpy (about as costly to import as
    httpx) is for the commands that make or compare vectors."""
    out, _ = sample
    modules = imported_by(out, "status")
    assert "rag_assets.serve.status" in modules  # the control: the status command ran
    assert loaded(modules, ("numpy",)) == []


def test_help_builds_no_configuration(sample):
    """`rag --help` reads no rag.yaml, so neither pydantic (the config models) nor PyYAML loads."""
    out, _ = sample
    modules = imported_by(out, "--help")
    assert "rag_assets.serve.cli_ask" in modules  # the control: every command's parser was built
    assert loaded(modules, ("pydantic", "pydantic_core", "yaml", "numpy", "httpx")) == []
