"""A local SQLite mirror of a tier's PostgreSQL store, for lexical search and the logs.

PostgreSQL's text ranking (``ts_rank``) is not BM25, and the search's scores, relevance
features and browser data are FTS5's BM25 with field weights (text, title, headings, tags).
So a search server reading a PostgreSQL store copies its rows into a SQLite file of the
store's own schema (:mod:`rag_assets.index.store`), whose FTS5 table then gives exactly the
SQLite path's BM25; vector candidates still come from pgvector's HNSW index
(:mod:`rag_assets.search.pg_index`).

The mirror is rewritten whole, into a new file swapped in atomically, whenever the store's
stamp (model, build time, row counts, generation) differs from the one it was copied at; a
restart with an unchanged store reuses it. The search log and answer log live in the log
file beside the mirror (:mod:`rag_assets.index.tier_logs`: each search server keeps its own),
which a new copy leaves as it is; a mirror of an older version moves its own logs there first.
The mirror and its logs are as private as the tier: they sit in the output's data folder on the
machine that searches.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from rag_assets.index import store, tier_logs, vector_blocks

MIRROR_TABLE = "CREATE TABLE IF NOT EXISTS pg_mirror (schema TEXT NOT NULL, stamp JSON NOT NULL)"
_BATCH = 2000
_JSON_COLUMNS = ("tags", "frontmatter", "links", "backlinks", "aliases")  # json in PostgreSQL, copied as their text


def pg_stamp(pg: Any, schema: str) -> list | None:
    """What identifies the PostgreSQL store's contents (None: it has never been synced)."""
    if pg.execute("SELECT to_regclass(%s)", (f"{schema}.embeddings_meta",)).fetchone()[0] is None:
        return None
    row = pg.execute(
        f"SELECT (SELECT json_build_array(model, dimension, built_at, provider) FROM {schema}.embeddings_meta LIMIT 1),"
        f" (SELECT count(*) FROM {schema}.documents), (SELECT count(*) FROM {schema}.chunks),"
        f" (SELECT max(generation) FROM {schema}.publication)"
    ).fetchone()
    return None if row[0] is None and not row[1] else [row[0], row[1], row[2], row[3]]


def mirror_stamp(path: Path) -> list | None:
    """The stamp the mirror at ``path`` was copied at (None: no usable mirror)."""
    if not path.is_file():
        return None
    try:
        with closing(store.connect(path, readonly=True)) as conn:
            row = conn.execute("SELECT stamp FROM pg_mirror LIMIT 1").fetchone()
    except sqlite3.DatabaseError:
        return None
    return json.loads(row[0]) if row else None


def write_mirror(pg: Any, schema: str, path: Path, stamp: list) -> None:
    """Copy the store's rows into a new SQLite file and swap it in at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        tier_logs.ensure(path)  # an older mirror's logs move out before it is replaced
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    store.remove_database(tmp)
    try:
        with closing(store.connect(tmp)) as lite:
            store.ensure_schema(lite)
            lite.execute(MIRROR_TABLE)
            with store.transaction(lite):
                _copy_rows(pg, schema, lite)
                lite.execute("INSERT INTO pg_mirror (schema, stamp) VALUES (?, ?)", (schema, json.dumps(stamp)))
            lite.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        os.replace(tmp, path)
    finally:
        store.remove_database(tmp)
    for suffix in ("-wal", "-shm"):  # the old file's; the new one was checkpointed whole
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _copy_rows(pg: Any, schema: str, lite: sqlite3.Connection) -> None:
    with pg.transaction():  # one snapshot of the PostgreSQL store (REPEATABLE READ below)
        pg.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        names = ", ".join(store.DOCUMENT_COLUMNS)
        texts = ", ".join(f"{c}::text" if c in _JSON_COLUMNS else c for c in store.DOCUMENT_COLUMNS)
        lite.executemany(
            f"INSERT INTO documents (id, {names}) VALUES (?{', ?' * len(store.DOCUMENT_COLUMNS)})",
            pg.execute(f"SELECT id, {texts} FROM {schema}.documents ORDER BY id"),
        )
        # Rows in the order they were written, so the mirror's rowids follow the store's.
        with pg.cursor(name="rag_mirror_chunks") as cur:
            cur.itersize = _BATCH
            cur.execute(
                f"SELECT id, document_id, chunk_index, text, heading_path::text, word_count, embedding"
                f" FROM {schema}.chunks ORDER BY ctid"
            )
            while rows := cur.fetchmany(_BATCH):
                lite.executemany(
                    "INSERT INTO chunks (id, document_id, chunk_index, text, heading_path, word_count, embedding)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(*r[:6], _blob(r[6])) for r in rows],
                )
        store.reindex_cjk(lite)
        vector_blocks.refresh(lite)
        for table, columns in (
            ("embeddings_meta", "model, dimension, built_at, provider"),
            ("sources", "collection, content_hash, documents, indexed_at"),
            ("search_profile", "profile::text"),
            ("publication", "generation"),
        ):
            rows = pg.execute(f"SELECT {columns} FROM {schema}.{table}").fetchall()
            if rows:
                names = columns.replace("::text", "")
                lite.executemany(f"INSERT INTO {table} ({names}) VALUES ({','.join('?' * len(rows[0]))})", rows)


def _blob(vector: Any) -> bytes | None:
    """pgvector's value (Vector, HalfVector or None) as the SQLite store's float32 BLOB."""
    if vector is None:
        return None
    return np.asarray(vector.to_numpy(), dtype=np.float32).tobytes()
