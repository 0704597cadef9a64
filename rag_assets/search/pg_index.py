"""Hybrid search over a tier's PostgreSQL store: pgvector HNSW candidates, the SQLite path's BM25.

:class:`PgSearchIndex` is a :class:`~rag_assets.search.retrieval.SearchIndex` whose rows come
from PostgreSQL, so it returns the very JSON the SQLite path does (hybrid, filters, pages,
relevance):

- **Rows**: the tier's PostgreSQL schema is copied into a local SQLite mirror
  (:mod:`rag_assets.index.pg_mirror`) when its contents change; every search first compares
  the store's stamp (one query) and re-copies after a sync.
- **Vector candidates**: ``ORDER BY embedding <=> q LIMIT depth`` on the HNSW cosine index,
  with ``hnsw.ef_search`` at least the depth (``store.ef_search``, default 400); filters go
  into the query as the allowed document ids, with pgvector's iterative scan so a filter
  that rejects most neighbours still fills the list. ``exact=True`` turns index scans off:
  the same query then scans every row (exact search, for measuring the index's recall).
  The candidates are then scored with the loaded float32 vectors, as the SQLite path
  scores them, so equal candidates mean equal scores to the last digit. With
  ``vector_search="exact"`` (``store.vector_search: exact``) the candidates come from those
  loaded vectors instead, scanned whole as the SQLite path scans them: exact at any size,
  PostgreSQL then serving the rows and the mirror.
- **BM25**: FTS5 over the mirror, with the same field weights (PostgreSQL's ``tsvector``
  column is kept for other readers; its ranking is not BM25).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rag_assets.index import pg_mirror, pg_schema
from rag_assets.index.params import SearchError
from rag_assets.search.retrieval import LoadedIndex, SearchIndex


class PgSearchIndex(SearchIndex):
    """A tier's PostgreSQL store, searchable; ``path`` is its local mirror's file."""

    def __init__(
        self,
        mirror_path: Path,
        weights: Mapping[str, float] | None = None,
        *,
        url: str,
        tier: str,
        ef_search: int = 400,
        exact: bool = False,
        vector_search: str = "hnsw",
        **kwargs: Any,
    ) -> None:
        super().__init__(mirror_path, weights, **kwargs)
        if vector_search not in ("hnsw", "exact"):
            raise ValueError(f"vector_search must be hnsw or exact, not {vector_search!r}")
        self.vector_search = vector_search
        self.url = url
        self.tier = tier
        self.schema = pg_schema.schema_name(tier)
        self.ef_search = ef_search
        self.exact = exact
        self._pg_local = threading.local()
        self._mirror_lock = threading.Lock()
        self._ids: tuple[Any, dict[str, int]] | None = None  # (loaded data, chunk id -> matrix row)
        self._mirrored: list | None = None  # the store stamp the mirror was last checked against

    # ------------------------------------------------------------------ the store
    def _pg(self) -> Any:
        """This thread's connection (psycopg connections serialise their queries)."""
        conn = getattr(self._pg_local, "conn", None)
        if conn is None or conn.closed:
            conn = pg_schema.connect(self.url, self.tier)
            pg_schema.register_types(conn)
            self._pg_local.conn = conn
        return conn

    def exists(self) -> bool:
        """True when the PostgreSQL store has been synced at least once (SearchError when the
        server cannot be reached: that is not "not built yet")."""
        try:
            return pg_mirror.pg_stamp(self._pg(), self.schema) is not None
        except pg_schema.PostgresStoreError as exc:
            raise SearchError(str(exc)) from None

    def refresh(self) -> None:
        """Copy the store into the mirror when it changed since the mirror was written."""
        stamp = pg_mirror.pg_stamp(self._pg(), self.schema)
        if stamp is None:
            raise SearchError(f"the {self.tier} tier's PostgreSQL store ({self.schema}) is empty; run `rag build`")
        if self._loaded is not None and self._mirrored == stamp:
            return
        with self._mirror_lock:
            if pg_mirror.mirror_stamp(self.path) != stamp:
                pg_mirror.write_mirror(self._pg(), self.schema, self.path, stamp)
            self._mirrored = stamp

    def loaded(self) -> LoadedIndex:
        try:
            self.refresh()
        except pg_schema.PostgresStoreError as exc:
            raise SearchError(str(exc)) from None
        return super().loaded()

    # ------------------------------------------------------------------ vectors
    def _row_of_id(self, data: LoadedIndex) -> dict[str, int]:
        if self._ids is None or self._ids[0] is not data:
            rowid_to_id = dict(self._connection().execute("SELECT rowid, id FROM chunks WHERE embedding IS NOT NULL"))
            self._ids = (data, {rowid_to_id[int(r)]: i for i, r in enumerate(data.rowids)})
        return self._ids[1]

    def _vector_ranks(
        self, data: LoadedIndex, qvec: np.ndarray, mask: np.ndarray | None, depth: int
    ) -> dict[int, tuple[int, float]]:
        if self.vector_search == "exact":  # the loaded vectors, scanned as the SQLite path scans them
            return super()._vector_ranks(data, qvec, mask, depth)
        allowed = None
        if mask is not None:
            allowed = sorted({data.document_ids[r] for r in np.flatnonzero(mask)})
            if not allowed:
                return {}
        ids = self.nearest_ids(qvec, depth, allowed)
        row_of = self._row_of_id(data)
        rows = np.array([row_of[i] for i in ids if i in row_of], dtype=np.int64)
        if not len(rows):
            return {}
        scores = data.matrix[rows] @ qvec  # the SQLite path's own float32 scores
        order = np.argsort(-scores, kind="stable")
        return {int(rows[i]): (rank, float(scores[i])) for rank, i in enumerate(order, start=1)}

    def nearest_ids(self, qvec: np.ndarray, depth: int, documents: list[str] | None = None) -> list[str]:
        """The ``depth`` chunk ids nearest to ``qvec`` by cosine (HNSW, or exact with ``exact``),
        among ``documents``' chunks when given."""
        return [r[0] for r in self._nearest(qvec, depth, documents)]

    def query_plan(self, qvec: np.ndarray, depth: int, documents: list[str] | None = None) -> str:
        """PostgreSQL's plan for :meth:`nearest_ids` (which index it scans, if any)."""
        return "\n".join(r[0] for r in self._nearest(qvec, depth, documents, explain=True))

    def _nearest(self, qvec: np.ndarray, depth: int, documents: list[str] | None, explain: bool = False) -> list[tuple]:
        dimension = int(qvec.shape[0])
        column = pg_schema.vector_type(dimension)[0]
        where = "WHERE embedding IS NOT NULL" + (" AND document_id = ANY(%(docs)s)" if documents is not None else "")
        sql = (
            "EXPLAIN " if explain else ""
        ) + f"SELECT id FROM {self.schema}.chunks {where} ORDER BY embedding <=> %(q)s::{column} LIMIT %(n)s"
        conn = self._pg()
        with conn.transaction():
            settings = {
                "hnsw.ef_search": str(min(max(self.ef_search, depth), 1000)),  # pgvector's ceiling is 1,000
                # Past ef_search rows, or when a filter rejects neighbours, keep walking the graph
                # (pgvector 0.8); "relaxed" order is fine: the candidates are re-sorted exactly.
                "hnsw.iterative_scan": "relaxed_order",
            }
            # Exact: no index scan, every row's distance. Else no sequential scan: the planner
            # would pick one (exact, and slow on large stores) when a high ef_search makes the
            # HNSW scan look dearer on a small store; a filter may still use the document index.
            settings["enable_indexscan" if self.exact else "enable_seqscan"] = "off"
            for name, value in settings.items():
                conn.execute("SELECT set_config(%s, %s, true)", (name, value))
            return conn.execute(
                sql, {"q": np.asarray(qvec, dtype=np.float32), "n": depth, "docs": documents}
            ).fetchall()

    def close(self) -> None:
        super().close()
        conn = getattr(self._pg_local, "conn", None)
        if conn is not None:
            conn.close()
            self._pg_local.conn = None
