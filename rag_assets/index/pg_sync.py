"""Sync a tier's PostgreSQL store from its SQLite store, by diff, in one transaction.

The SQLite store stays the build's working copy (the publishing generations, the browser
search's BM25 data and the per-vault syncs are written there as before); right after a tier's
store is written, the same asset calls :func:`sync_tier`, which makes the tier's PostgreSQL
schema hold exactly the same rows:

- one transaction, under an advisory lock per tier, so a reader sees the old or the new
  contents, never half, and two builds do not interleave;
- rows are compared by a hash of what they hold (``row_hash``; vectors are not compared:
  with the model unchanged the same text has the same vector, as in the SQLite sync), and
  only chunks and documents that changed are deleted, inserted or updated;
- a store built with another model (or dimension) is rewritten whole, the embedding column
  retyped and the HNSW index rebuilt after the rows are in.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag_assets.index import pg_schema, store

_DOCUMENT_COLUMNS = store.DOCUMENT_COLUMNS
_JSON_COLUMNS = ("tags", "frontmatter", "links", "backlinks", "aliases")  # json in PostgreSQL, read back as text
_CHUNK_COLUMNS = ("document_id", "chunk_index", "text", "heading_path", "word_count")


@dataclass(frozen=True)
class PgSyncResult:
    """What one sync changed in the tier's PostgreSQL schema."""

    tier: str
    documents_written: int
    documents_deleted: int
    chunks_written: int
    chunks_deleted: int
    full_rewrite: bool
    schema_version: int

    def as_metadata(self) -> dict[str, int | bool | str]:
        """For the asset that synced it: what changed in PostgreSQL."""
        return {
            "postgres_schema": pg_schema.schema_name(self.tier),
            "postgres_schema_version": self.schema_version,
            "postgres_chunks_written": self.chunks_written,
            "postgres_chunks_deleted": self.chunks_deleted,
            "postgres_documents_written": self.documents_written,
            "postgres_documents_deleted": self.documents_deleted,
            "postgres_full_rewrite": self.full_rewrite,
        }


def row_hash(document_id: str, chunk_index: int, text: str, heading_path: str | None, word_count: int | None) -> str:
    """A chunk row's fingerprint, its vector aside."""
    payload = json.dumps([document_id, chunk_index, text, heading_path, word_count], ensure_ascii=False)
    return hashlib.blake2b(payload.encode("utf-8"), digest_size=16).hexdigest()


def sync_tier(url: str, tier: str, sqlite_path: Path, hnsw: tuple[int, int] = pg_schema.DEFAULT_HNSW) -> PgSyncResult:
    """Make the tier's PostgreSQL schema hold what the SQLite store at ``sqlite_path`` holds;
    its HNSW index is (re)built with ``hnsw`` = (m, ef_construction) when it has other settings."""
    with closing(pg_schema.connect(url, tier)) as pg:
        version = pg_schema.ensure_schema(pg, tier)
        with closing(store.connect(sqlite_path, readonly=True)) as lite:
            lite.execute("BEGIN")  # one snapshot of the working copy for the whole sync
            try:
                return _sync(pg, tier, lite, version, hnsw)
            finally:
                lite.execute("COMMIT")


def sync_if_configured(cfg: Any, tier: str, sqlite_path: Path | None = None) -> PgSyncResult | None:
    """:func:`sync_tier` when the configuration's store backend is PostgreSQL, else None."""
    if not cfg.store.postgres:
        return None
    path = sqlite_path or cfg.store_path(tier)
    if not path.is_file():
        store.create_empty(path)
    return sync_tier(cfg.store.url, tier, path, cfg.store.hnsw)


def _sync(pg: Any, tier: str, lite: sqlite3.Connection, version: int, hnsw: tuple[int, int]) -> PgSyncResult:
    s = pg_schema.schema_name(tier)
    meta = lite.execute("SELECT model, dimension, built_at, provider FROM embeddings_meta LIMIT 1").fetchone()
    new_docs = {r[0]: tuple(r[1:]) for r in lite.execute(f"SELECT id, {', '.join(_DOCUMENT_COLUMNS)} FROM documents")}
    new_hashes = {r[0]: row_hash(*r[1:]) for r in lite.execute(f"SELECT id, {', '.join(_CHUNK_COLUMNS)} FROM chunks")}
    with pg.transaction():
        pg.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (s + ":sync",))
        old_meta = pg.execute(f"SELECT model, dimension FROM {s}.embeddings_meta LIMIT 1").fetchone()
        full = meta is None or old_meta is None or tuple(old_meta) != (meta[0], meta[1])
        if full:
            deleted_chunks = pg.execute(f"DELETE FROM {s}.chunks").rowcount
            deleted_docs = pg.execute(f"DELETE FROM {s}.documents").rowcount
            if meta is not None:
                pg_schema.set_vector_dimension(pg, tier, meta[1])
            old_docs: dict[str, tuple] = {}
            old_hashes: dict[str, str] = {}
        else:
            old_docs = {r[0]: tuple(r[1:]) for r in pg.execute(f"SELECT id, {_document_select()} FROM {s}.documents")}
            old_hashes = dict(pg.execute(f"SELECT id, row_hash FROM {s}.chunks"))
        stale = [cid for cid, h in old_hashes.items() if new_hashes.get(cid) != h]
        fresh = {cid for cid, h in new_hashes.items() if old_hashes.get(cid) != h}
        gone = [did for did in old_docs if did not in new_docs]
        changed = [did for did, row in new_docs.items() if old_docs.get(did) != row]
        if stale:
            pg.execute(f"DELETE FROM {s}.chunks WHERE id = ANY(%s)", (stale,))
        if gone:
            pg.execute(f"DELETE FROM {s}.documents WHERE id = ANY(%s)", (gone,))
        _upsert_documents(pg, s, [(did, *new_docs[did]) for did in changed])
        if fresh:
            _copy_chunks(pg, s, _fresh_rows(lite, fresh), meta[1])
        _replace_small_tables(pg, s, lite, meta)
        if meta is not None and (full or pg_schema.vector_index_settings(pg, tier) != hnsw):
            pg.execute(f"DROP INDEX IF EXISTS {s}.chunks_embedding_hnsw")
            pg_schema.create_vector_index(pg, tier, meta[1], len(new_hashes), hnsw)
    if full:
        return PgSyncResult(tier, len(new_docs), deleted_docs, len(fresh), deleted_chunks, True, version)
    return PgSyncResult(tier, len(changed), len(gone), len(fresh), len(stale), False, version)


def _document_select() -> str:
    """The document columns as the SQLite store holds them (json columns as their text)."""
    return ", ".join(f"{c}::text" if c in _JSON_COLUMNS else c for c in _DOCUMENT_COLUMNS)


def _upsert_documents(pg: Any, s: str, rows: list[tuple]) -> None:
    if not rows:
        return
    values = ", ".join("%s::json" if c in _JSON_COLUMNS else "%s" for c in _DOCUMENT_COLUMNS)
    updates = ", ".join(f"{c} = excluded.{c}" for c in _DOCUMENT_COLUMNS)
    with pg.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {s}.documents (id, {', '.join(_DOCUMENT_COLUMNS)}) VALUES (%s, {values})"
            f" ON CONFLICT (id) DO UPDATE SET {updates}",
            rows,
        )


def _fresh_rows(lite: sqlite3.Connection, fresh: set[str]) -> Iterator[tuple]:
    """The SQLite rows of these chunks, with their hash and vector, in rowid order."""
    for cid, *row, blob in lite.execute(
        f"SELECT id, {', '.join(_CHUNK_COLUMNS)}, embedding FROM chunks ORDER BY rowid"
    ):
        if cid in fresh:
            vector = np.frombuffer(blob, dtype=np.float32) if blob is not None else None
            yield (cid, *row, row_hash(*row), vector)


def _copy_chunks(pg: Any, s: str, rows: Iterator[tuple], dimension: int) -> None:
    """COPY in binary: vectors go as pgvector's binary format, the JSON columns as their text
    (json's binary form is its text, so it is stored exactly as SQLite holds it)."""
    vector_type = pg_schema.vector_type(dimension)[0].split("(")[0]
    wrap = _halfvec if vector_type == "halfvec" else (lambda v: v)
    columns = "id, document_id, chunk_index, text, heading_path, word_count, row_hash, embedding"
    with pg.cursor() as cur, cur.copy(f"COPY {s}.chunks ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["text", "text", "int4", "text", "text", "int4", "text", vector_type])
        for cid, document_id, chunk_index, text, heading_path, word_count, digest, vector in rows:
            embedding = wrap(vector) if vector is not None else None
            copy.write_row((cid, document_id, chunk_index, text, heading_path, word_count, digest, embedding))


def _halfvec(vector: np.ndarray) -> Any:
    from pgvector import HalfVector

    return HalfVector(vector)


def _replace_small_tables(pg: Any, s: str, lite: sqlite3.Connection, meta: tuple | None) -> None:
    """embeddings_meta, sources, search_profile and publication: a few rows, replaced whole."""
    for table in ("embeddings_meta", "sources", "search_profile", "publication"):
        pg.execute(f"DELETE FROM {s}.{table}")
    if meta is not None:
        pg.execute(
            f"INSERT INTO {s}.embeddings_meta (model, dimension, built_at, provider) VALUES (%s, %s, %s, %s)", meta
        )
    with pg.cursor() as cur:
        cur.executemany(
            f"INSERT INTO {s}.sources (collection, content_hash, documents, indexed_at) VALUES (%s, %s, %s, %s)",
            lite.execute("SELECT collection, content_hash, documents, indexed_at FROM sources").fetchall(),
        )
        cur.executemany(
            f"INSERT INTO {s}.search_profile (profile) VALUES (%s::json)",
            lite.execute("SELECT profile FROM search_profile").fetchall(),
        )
        cur.executemany(
            f"INSERT INTO {s}.publication (generation) VALUES (%s)",
            lite.execute("SELECT generation FROM publication").fetchall(),
        )
