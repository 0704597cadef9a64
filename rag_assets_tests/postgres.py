"""A throw-away PostgreSQL database on the machine's server, and Dagster instances kept in one.

The machines (and CI) run PostgreSQL on 127.0.0.1:5432 with trust authentication; every test
gets a database of its own, created here and dropped after. Where no server answers or the
``postgres`` extra is not installed, the PostgreSQL variants skip with the reason, except
under CI (``CI=true``), where that is a failure: CI must run them.
"""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from .skip_allowlist import under_ci

REPO_ROOT = Path(__file__).resolve().parents[1]
PG_YAML = REPO_ROOT / "dagster.postgres.yaml"
PG_HOST = os.environ.get("RAG_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("RAG_TEST_PG_PORT", "5432"))
PG_ENV = ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD")


def unavailable(
    reason: str, ci_provides: str = f"runs PostgreSQL on {PG_HOST}:{PG_PORT} and installs the postgres extra"
) -> None:
    """Skip on a laptop without the service; fail under CI, where the service always runs."""
    if under_ci():
        pytest.fail(f"{reason} (CI {ci_provides})")
    pytest.skip(reason)


def require_service(modules: Sequence[str], extra: str, service: str, host: str, port: int) -> None:
    """``modules`` import (the ``extra`` is installed) and ``service`` answers on host:port; else skip
    with the reason, or fail under CI, which provides both."""
    ci_provides = f"runs {service} on {host}:{port} and installs the {extra} extra"
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as exc:
        unavailable(f"the {extra} extra is not installed ({exc.name}): pip install -e '.[dev,{extra}]'", ci_provides)
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError as exc:
        unavailable(f"no {service} server answers on {host}:{port} ({exc})", ci_provides)


def require_postgres():
    """The psycopg2 module, once the extra is installed and the server answers."""
    require_service(("dagster_postgres", "psycopg2"), "postgres", "PostgreSQL", PG_HOST, PG_PORT)
    import psycopg2

    return psycopg2


@contextmanager
def scratch_database() -> Iterator[tuple[dict[str, str], Callable]]:
    """A new database; yields (its DAGSTER_PG_* settings, a function that connects to it)."""
    psycopg2 = require_postgres()
    user = os.environ.get("DAGSTER_PG_USER", "postgres")
    password = os.environ.get("DAGSTER_PG_PASSWORD", "")
    name = f"rag_assets_test_{uuid.uuid4().hex[:12]}"

    def connect(dbname: str = name):
        return psycopg2.connect(host=PG_HOST, port=PG_PORT, user=user, password=password, dbname=dbname)

    def admin(statement: str) -> None:
        conn = connect("postgres")
        try:
            conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
            conn.cursor().execute(statement)
        finally:
            conn.close()

    admin(f'CREATE DATABASE "{name}"')
    try:
        yield dict(zip(PG_ENV, (PG_HOST, str(PG_PORT), name, user, password))), connect
    finally:
        admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # FORCE: PostgreSQL 13+


def postgres_home(folder: Path) -> Path:
    """A DAGSTER_HOME whose dagster.yaml is the project's PostgreSQL variant."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(PG_YAML, folder / "dagster.yaml")
    return folder


def postgres_instance_overrides() -> dict:
    """dagster.postgres.yaml as instance settings (its ``env:`` fields read DAGSTER_PG_*)."""
    import yaml

    return yaml.safe_load(PG_YAML.read_text(encoding="utf-8"))
