"""A tier's PostgreSQL store: connecting (the Private tier only locally) and its versioned schema.

Each tier lives in its own schema (``rag_public``, ``rag_safe``, ``rag_private``) with the
SQLite store's tables (:mod:`rag_assets.index.store`; ``documents.links`` and ``backlinks``
since migration 2), plus:

- ``chunks.embedding``: a pgvector ``vector(d)`` (``halfvec(d)`` above pgvector's 2,000
  dimensions for HNSW) with an HNSW cosine index, typed when the store gets its model;
- ``chunks.tsv``: ``to_tsvector('english', text)``, generated, with a GIN index;
- ``chunks.row_hash``: what a chunk row holds besides its vector, so a sync compares hashes
  instead of reading every text back;
- ``schema_migrations(version, description, applied_at)``: the migrations applied, in order.

JSON columns are ``json`` (not ``jsonb``): the text is kept as written, so rows read back
are byte-for-byte the SQLite store's and searches over either return the same JSON.
psycopg 3 and pgvector are the ``postgres`` extra's; they are imported only here and in
the modules that connect.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from rag_assets.config.settings import TIERS
from rag_assets.config.store_url import is_local_host, private_store_problem

# pgvector indexes `vector` up to 2,000 dimensions with HNSW, `halfvec` up to 4,000.
VECTOR_MAX_DIMENSION = 2000

# (version, description, statements); {s} is the tier's schema. Append only: a store records
# the versions it has, and opening it applies the missing ones in one transaction.
MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "documents, chunks (pgvector embedding, tsvector + GIN), embeddings_meta, sources, search_profile, publication",
        """
        CREATE TABLE {s}.documents (
            id text PRIMARY KEY,
            collection text NOT NULL,
            slug text NOT NULL,
            title text,
            tags json,
            updated_at text,
            chunk_count integer,
            frontmatter json
        );
        CREATE INDEX documents_collection ON {s}.documents (collection);
        CREATE TABLE {s}.chunks (
            id text PRIMARY KEY,
            document_id text NOT NULL REFERENCES {s}.documents (id),
            chunk_index integer NOT NULL,
            text text NOT NULL,
            heading_path json,
            word_count integer,
            row_hash text NOT NULL,
            embedding vector,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', text)) STORED
        );
        CREATE INDEX chunks_document ON {s}.chunks (document_id);
        CREATE INDEX chunks_tsv ON {s}.chunks USING gin (tsv);
        CREATE TABLE {s}.embeddings_meta (
            model text NOT NULL,
            dimension integer NOT NULL,
            built_at text NOT NULL,
            provider text
        );
        CREATE TABLE {s}.sources (
            collection text PRIMARY KEY,
            content_hash text NOT NULL,
            documents integer NOT NULL,
            indexed_at text NOT NULL
        );
        CREATE TABLE {s}.search_profile (profile json NOT NULL);
        CREATE TABLE {s}.publication (generation text NOT NULL);
        """,
    ),
    (
        2,
        "documents.links and documents.backlinks: vault notes' resolved links (as the SQLite store's schema 4)",
        """
        ALTER TABLE {s}.documents ADD COLUMN links json;
        ALTER TABLE {s}.documents ADD COLUMN backlinks json;
        """,
    ),
    (
        3,
        "documents.aliases: a vault note's aliases, searched with its title (as the SQLite store's schema 5)",
        """
        ALTER TABLE {s}.documents ADD COLUMN aliases json;
        """,
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


class PostgresStoreError(RuntimeError):
    """The PostgreSQL store cannot be used as configured (the message says why)."""


def schema_name(tier: str) -> str:
    """``rag_<tier>`` for the three tiers; ``rag_eval_<name>`` for an eval store (``rag eval``)."""
    if tier not in TIERS and not re.fullmatch(r"eval_[a-z0-9_]{1,48}", tier):
        raise ValueError(f"unknown tier {tier!r}")
    return f"rag_{tier}"


def _psycopg():
    try:
        import psycopg
        from pgvector.psycopg import register_vector  # noqa: F401  (checked here, used below)
    except ImportError as exc:  # the default install has no PostgreSQL pieces
        raise PostgresStoreError(
            f"the PostgreSQL store needs the postgres extra (pip install '.[postgres]'): {exc}"
        ) from None
    return psycopg


def connect(url: str, tier: str, *, environ: Mapping[str, str] | None = None) -> Any:
    """An autocommit psycopg connection to ``url`` with pgvector's types registered.

    For the Private tier the URL must name only local servers (checked again here, not
    only when the configuration was loaded), and the server actually reached must be a Unix
    socket or a loopback address.
    """
    psycopg = _psycopg()
    env = os.environ if environ is None else environ
    if tier == "private":
        problem = private_store_problem(url, env)
        if problem:
            raise PostgresStoreError(problem)
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise PostgresStoreError(f"cannot connect to the {tier} tier's PostgreSQL store: {exc}") from None
    if tier == "private" and not _reached_locally(conn):
        conn.close()
        raise PostgresStoreError("the Private tier's PostgreSQL server was reached over a non-local address")
    return conn


def _reached_locally(conn: Any) -> bool:
    """The server this connection reached is a socket or loopback (libpq reports what it used)."""
    address = conn.info.hostaddr if hasattr(conn.info, "hostaddr") else ""
    return is_local_host(conn.info.host or "") and (not address or is_local_host(address))


def ensure_schema(conn: Any, tier: str) -> int:
    """Create the tier's schema or bring it up to date; returns its version."""
    from pgvector.psycopg import register_vector

    s = schema_name(tier)
    with conn.transaction():
        # One migrator at a time per tier (parallel vault runs, a search server starting).
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (s,))
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_migrations (version integer PRIMARY KEY,"
            " description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        applied = {r[0] for r in conn.execute(f"SELECT version FROM {s}.schema_migrations")}
        for version, description, statements in MIGRATIONS:
            if version in applied:
                continue
            conn.execute(statements.format(s=s))
            conn.execute(
                f"INSERT INTO {s}.schema_migrations (version, description) VALUES (%s, %s)", (version, description)
            )
    register_vector(conn)
    return max(applied | {v for v, _, _ in MIGRATIONS})


def register_types(conn: Any) -> None:
    """pgvector's types on a reader's connection, when the database has the extension (a
    database no build has synced has none). Readers never migrate: they may not be allowed to."""
    from pgvector.psycopg import register_vector

    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone():
        register_vector(conn)


def schema_version(conn: Any, tier: str) -> int | None:
    """The highest migration applied to the tier's schema, or None when it has none."""
    s = schema_name(tier)
    exists = conn.execute("SELECT to_regclass(%s)", (f"{s}.schema_migrations",)).fetchone()[0]
    if exists is None:
        return None
    return conn.execute(f"SELECT max(version) FROM {s}.schema_migrations").fetchone()[0]


def vector_type(dimension: int) -> tuple[str, str]:
    """(column type, HNSW operator class) for vectors of this dimension."""
    if dimension <= VECTOR_MAX_DIMENSION:
        return f"vector({dimension})", "vector_cosine_ops"
    return f"halfvec({dimension})", "halfvec_cosine_ops"


def set_vector_dimension(conn: Any, tier: str, dimension: int) -> None:
    """Drop the HNSW index and type the (emptied) embedding column for this model; call inside
    the transaction that rewrites the store, then :func:`create_vector_index` once the rows
    are in (building the graph once is much faster than growing it row by row)."""
    s = schema_name(tier)
    column, _ = vector_type(dimension)
    conn.execute(f"DROP INDEX IF EXISTS {s}.chunks_embedding_hnsw")
    conn.execute(f"ALTER TABLE {s}.chunks ALTER COLUMN embedding TYPE {column} USING NULL")


# The HNSW build is many times faster while its graph fits in maintenance_work_mem (64 MB by
# default, about 40,000 384-d vectors); the build raises it for itself, up to this much.
HNSW_BUILD_MEMORY_CAP_MB = 2048


DEFAULT_HNSW = (16, 64)  # (m, ef_construction): pgvector's defaults


def create_vector_index(
    conn: Any, tier: str, dimension: int, rows: int = 0, hnsw: tuple[int, int] = DEFAULT_HNSW
) -> None:
    """The HNSW cosine index over the tier's embeddings, built with ``hnsw`` = (m, ef_construction)."""
    _, opclass = vector_type(dimension)
    wanted_mb = min(HNSW_BUILD_MEMORY_CAP_MB, rows * (4 * dimension + 400) // 2**20 + 64)
    current_mb = conn.execute(
        "SELECT setting::bigint / 1024 FROM pg_settings WHERE name = 'maintenance_work_mem'"  # kB -> MB
    ).fetchone()[0]
    if wanted_mb > current_mb:
        conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (f"{wanted_mb}MB",))
    conn.execute(
        f"CREATE INDEX chunks_embedding_hnsw ON {schema_name(tier)}.chunks USING hnsw (embedding {opclass})"
        f" WITH (m = {int(hnsw[0])}, ef_construction = {int(hnsw[1])})"
    )


def vector_index_settings(conn: Any, tier: str) -> tuple[int, int] | None:
    """(m, ef_construction) the tier's HNSW index was built with, or None without one."""
    row = conn.execute(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = 'chunks_embedding_hnsw'",
        (schema_name(tier),),
    ).fetchone()
    if row is None:
        return None
    found = dict(re.findall(r"(m|ef_construction)='?(\d+)", row[0]))
    return int(found.get("m", DEFAULT_HNSW[0])), int(found.get("ef_construction", DEFAULT_HNSW[1]))
