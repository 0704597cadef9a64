#!/usr/bin/env python3
"""One-command set-up and tasks; needs only Python 3.11+ on the machine.

    python3 tasks.py build   # create .venv, install, build the sample index, print the summary
    python3 tasks.py test    # create .venv, install with test extras, run the whole test suite
    python3 tasks.py lint    # the same .venv; check the package's layers (lint-imports)
    python3 tasks.py ui      # create .venv, install, start `dagster dev`

`build` and `ui` share one Dagster instance, DAGSTER_HOME=.dagster_home (its dagster.yaml
links to the project's), so the builds show in the UI's run history and asset catalog.
The virtual environment is (re)installed only when pyproject.toml changed since
the last install, so repeated runs start in a second.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
STAMP = VENV / ".installed-from"
DAGSTER_HOME = ROOT / ".dagster_home"


def ensure_venv(extras: str = "dev") -> None:
    if sys.version_info < (3, 11):
        sys.exit(f"rag-assets needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    if not (BIN / "python").exists():
        print(f"Creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest() + f" [{extras}]"
    if STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    print("Installing rag-assets and its dependencies (first run takes a minute or two) ...", flush=True)
    pip = [str(BIN / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", f"{ROOT}[{extras}]"], check=True)
    STAMP.write_text(wanted)


def run(*cmd: str, env: dict[str, str] | None = None) -> int:
    return subprocess.call(list(cmd), cwd=ROOT, env={**os.environ, **(env or {})})


def dagster_home() -> dict[str, str]:
    """The environment that points `rag build` and `dagster dev` at the project's instance."""
    DAGSTER_HOME.mkdir(exist_ok=True)
    return {"DAGSTER_HOME": str(DAGSTER_HOME)}


def main(argv: list[str]) -> int:
    task = argv[0] if argv else "help"
    rest = argv[1:]
    if task not in ("build", "test", "lint", "ui"):
        print(__doc__)
        return 0 if task in ("help", "-h", "--help") else 2
    # The tests also need the postgres extra (small: dagster-postgres, psycopg2-binary): the
    # Dagster instance tests run on PostgreSQL as well as on SQLite; and the distributed (Celery
    # workers) and k8s (the Kubernetes configuration is validated) extras.
    # lint shares test's extras so that CI, which runs both, installs once.
    ensure_venv("dev,postgres,distributed,k8s" if task in ("test", "lint") else "dev")
    if task == "build":
        return run(str(BIN / "rag"), "build", *rest, env=dagster_home())
    if task == "lint":
        # The layers contract in pyproject.toml: no stage imports one above it.
        return run(str(BIN / "lint-imports"), *rest)
    if task == "test":
        # One worker per core: the suite is CPU-bound (real builds, real Dagster runs).
        return run(str(BIN / "python"), "-m", "pytest", "-n", "auto", *rest)
    return run(str(BIN / "dagster"), "dev", *rest, env=dagster_home())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
