"""Hybrid search over one tier's SQLite store: vectors (numpy) + BM25 (FTS5), fused.

The Python API the CLI, the HTTP server and the evaluation share::

    index = SearchIndex(cfg.public_store_path, weights=cfg.collection_weights)
    result = index.search("how do I set up vlans on proxmox", embedder, SearchParams(k=5))

- **Vector**: cosine similarity of the query vector against every chunk: one float32 matrix
  product over a matrix loaded once per process and reloaded when the store file changes.
- **BM25**: FTS5 ``bm25()`` over the store's ``porter unicode61`` table, whose columns are
  the chunk's text, its document's title, its headings and its document's tags, each with
  its weight (``fields``, :mod:`rag_assets.index.fields`). User text is never passed as
  FTS syntax: it is split into words, English stop words are dropped, and every word is
  quoted, joined with OR. CJK words are matched as n-gram phrases in ``fts_cjk``. A long
  query (a pasted paragraph) is capped at ``MAX_QUERY_TERMS`` (128) distinct words, those that
  weigh most (:func:`rag_assets.search.bm25_terms.capped_words`), so its cost is bounded.
  With ``lexical="memory"`` or ``"auto"`` the same scores come from postings held in memory
  (:mod:`rag_assets.search.bm25`), which is what keeps BM25 fast on large stores.
- **Fusion** (``fusion="zscore"``, the default): both lists' scores standardised over the
  union of their candidates (a BM25 candidate the vector list did not reach gets its true
  cosine; a chunk BM25 did not return scores 0 there), ``(wv*z_v + wb*z_b)/(wv+wb)``,
  rescaled to [0, 1] (1.0 = the best candidate); or ``fusion="rrf"``: weighted Reciprocal
  Rank Fusion, ``(wv/(k+rank_v) + wb/(k+rank_b)) / ((wv+wb)/(k+1))`` (1.0 = first in both
  lists; a list a chunk is missing from adds 0); or ``fusion="convex"``: each list's scores
  min-max normalised over its candidates, ``(wv*v + wb*b)/(wv+wb)``. Fusion and weights not
  given come from the store's search profile (:mod:`rag_assets.index.profiles`, chosen per embedder on SciFact's train
  split).
- **Relevance**: each candidate gets a calibrated relevance (:mod:`rag_assets.search.relevance`),
  comparable across queries, from the fused lists' scores and the page's title; the
  collection's priority weight multiplies its odds. **Hits are ranked by it**, the figure every
  surface shows (the fused score only breaks ties); ``min_score`` filters on it, so a query
  nothing answers gets no hits.
- **Pages**: by default hits are pages, each with its matching chunks as ``sections``
  (:mod:`rag_assets.search.pages`); ``view="chunks"`` gives one hit per chunk.
- **Filters** (collections, tags, frontmatter fields, slug prefix) apply before ranking.
- **Diversity**: optional MMR re-ranking and a cap on chunks per document.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from rag_assets.base import cjk
from rag_assets.embed.base import Embedder
from rag_assets.index import store, tier_logs
from rag_assets.index.fields import FieldWeights, bm25_call
from rag_assets.index.params import (
    LEXICAL,
    Hit,
    SearchError,
    SearchParams,
    SearchResult,
    damaged_store_error,
)
from rag_assets.index.profiles import apply_profile
from rag_assets.index.query import fts_match_of_words
from rag_assets.search.bm25_terms import capped_words, query_words, stems_of
from rag_assets.search.fusion import fuse, mmr
from rag_assets.search.link_signal import boost_linked
from rag_assets.search.loaded import DOCUMENT_LOADS, LoadedIndex, read_loaded
from rag_assets.search.pages import group_pages
from rag_assets.search.relevance import candidate_features, shipped_models, title_shares, weighted

log = logging.getLogger(__name__)


class SearchIndex:
    """One store, searchable; safe to share between threads (the HTTP server does).

    ``lexical`` picks where BM25 scores come from (the same numbers either way):
    ``"fts5"`` asks FTS5 at every query; ``"memory"`` builds in-memory postings
    (:class:`rag_assets.search.bm25.MemoryBm25`) whenever the store is (re)loaded, before the
    load returns; ``"auto"`` builds them in a background thread after each (re)load and
    uses FTS5 until they are ready (for ``rag serve``). Both memory modes cache the
    postings in ``<store>.bm25.npz`` beside the store, so a restart does not rebuild; that
    file holds the store's vocabulary and is as private as the store itself.

    ``fields``: how much a BM25 match counts in each column of ``fts_chunks`` (text, title,
    headings, tags); ``weights``: the collections' priority weights.

    ``documents``: ``"all"`` reads every document's record (title, tags, frontmatter, links) at
    each load, for a process that answers many searches; ``"on_demand"`` reads each when a
    search first needs it (:class:`rag_assets.search.loaded.StoredDocuments`), for a one-shot
    search (``rag search``, ``rag context``, ``rag ask``), whose load then grows far less with
    the store. The same hits and scores either way.
    """

    def __init__(
        self,
        path: Path,
        weights: Mapping[str, float] | None = None,
        *,
        log_searches: bool = True,
        lexical: str = "fts5",
        fields: FieldWeights = FieldWeights(),
        documents: str = "all",
    ) -> None:
        if lexical not in LEXICAL:
            raise ValueError(f"lexical must be one of {', '.join(LEXICAL)}, not {lexical!r}")
        if documents not in DOCUMENT_LOADS:
            raise ValueError(f"documents must be one of {', '.join(DOCUMENT_LOADS)}, not {documents!r}")
        self.documents = documents
        self.path = Path(path)
        self.weights = dict(weights or {})
        self.log_searches = log_searches
        self.lexical = lexical
        self.fields = fields
        self._loaded: LoadedIndex | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self._generation = 0  # bumped at every load: an older background BM25 build gives up

    # ------------------------------------------------------------------ loading
    def _stamp(self, conn: sqlite3.Connection | None = None) -> tuple:
        """What identifies the store's indexed contents: what a build changes, not the file's
        mtime (which the move of an older store's logs out of it also changes). Every build moves ``built_at`` (and usually the highest chunk rowid or the document count)."""
        try:
            inode = self.path.stat().st_ino
        except FileNotFoundError:
            return ("missing",)
        row = (
            (conn or self._connection())
            .execute(
                "SELECT (SELECT built_at FROM embeddings_meta LIMIT 1), (SELECT max(rowid) FROM chunks),"
                " (SELECT count(*) FROM documents)"
            )
            .fetchone()
        )
        return (inode, *row)

    def _connection(self) -> sqlite3.Connection:
        # One connection per thread: sqlite3 connections must not cross threads. A publish
        # swaps the store's file (a new generation behind the same path): a new inode means
        # the connection must follow it.
        conn = getattr(self._local, "conn", None)
        try:
            inode = self.path.stat().st_ino
        except FileNotFoundError:
            inode = None
        if conn is not None and getattr(self._local, "inode", None) != inode:
            conn.close()
            conn = None
        if conn is None:
            conn = store.connect(self.path)
            store.ensure_schema(conn)
            self._local.conn, self._local.inode = conn, inode
        return conn

    def exists(self) -> bool:
        """True when there is a store to search (``rag build`` has written it)."""
        return self.path.is_file()

    def loaded(self) -> LoadedIndex:
        """The in-memory matrix, reloaded when the store's files changed since the last load."""
        if not self.path.is_file():
            raise SearchError(f"no store at {self.path}; run `rag build` first")
        try:
            return self._loaded_now()
        except sqlite3.DatabaseError as exc:
            raise damaged_store_error(self.path, exc) from None

    def _loaded_now(self) -> LoadedIndex:
        stamp = self._stamp()
        current = self._loaded
        if current is not None and current.stamp == stamp:
            return current
        with self._lock:
            if self._loaded is None or self._loaded.stamp != stamp:
                self._loaded = self._load(stamp)
            return self._loaded

    def _load(self, stamp: tuple) -> LoadedIndex:
        conn = self._connection()
        data = read_loaded(conn, stamp, self._connection, self.documents)
        self._generation += 1
        if self.lexical == "memory":
            self._build_bm25(data, conn, self._generation)
        elif self.lexical == "auto":
            threading.Thread(
                target=self._build_bm25, args=(data, None, self._generation), name="rag-bm25-postings", daemon=True
            ).start()
        else:
            data.bm25_done.set()
        return data

    def _build_bm25(self, data: LoadedIndex, conn: sqlite3.Connection | None, generation: int) -> None:
        """Give ``data`` its in-memory BM25 postings (from the cache beside the store, or built
        from its FTS5 index), read in one transaction that must still show the loaded rows.
        Any failure leaves ``data.bm25`` None: searches go on with FTS5."""
        from rag_assets.search.bm25 import MemoryBm25, describe

        own = conn is None
        try:
            if conn is None:  # own
                conn = store.connect(self.path)
            conn.execute("BEGIN")
            try:
                if self._stamp(conn) != data.stamp:
                    log.info("the store changed while loading; BM25 stays on FTS5 until the next load")
                    return
                bm25 = MemoryBm25.load_or_build(
                    conn,
                    data.rowids,
                    data.stamp,
                    cache=self.path.with_name(self.path.name + ".bm25.npz"),
                    like=self.path,
                    connect=self._connection,
                    should_stop=lambda: self._generation != generation,
                    fields=self.fields,
                )
            finally:
                conn.execute("COMMIT")
            data.bm25 = bm25
            log.info("%s: %s", self.path.name, describe(bm25))
        except Exception:
            if self._generation == generation:
                log.warning("could not make the in-memory BM25 postings of %s; using FTS5", self.path, exc_info=True)
        finally:
            if own and conn is not None:
                conn.close()
            data.bm25_done.set()

    # ------------------------------------------------------------------ search
    def search(self, query: str, embedder: Embedder | None, params: SearchParams = SearchParams()) -> SearchResult:
        """Search the store; ``embedder`` must be the store's model (None: BM25 only)."""
        try:
            return self._search(query, embedder, params)
        except sqlite3.DatabaseError as exc:
            raise damaged_store_error(self.path, exc) from None

    def _search(self, query: str, embedder: Embedder | None, params: SearchParams) -> SearchResult:
        started = time.perf_counter()
        params.validate()
        if not query or not query.strip():
            raise SearchError("the query is empty")
        data = self.loaded()
        mode = params.mode if embedder is not None or params.mode == "bm25" else None
        if mode is None:
            raise SearchError("vector and hybrid search need the store's embedder; use mode=bm25")
        if embedder is not None and data.model and embedder.model != data.model:
            raise SearchError(f"the store was embedded with {data.model}; the query embedder is {embedder.model}")
        mask = self._filter_mask(data, params)
        depth = max(params.candidates, params.k)
        vector: dict[int, tuple[int, float]] = {}  # row -> (rank, score)
        lexical: dict[int, tuple[int, float]] = {}
        qvec = None
        embed_ms = 0.0
        if mode in ("hybrid", "vector") and embedder is not None and len(data.rowids):  # (mode says it is)
            t0 = time.perf_counter()
            qvec = np.asarray(embedder.embed_query(query), dtype=np.float32)
            embed_ms = (time.perf_counter() - t0) * 1000
            vector = self._vector_ranks(data, qvec, mask, depth)
        words = self._query_words(data, query) if mode != "vector" else None
        if words is not None:
            lexical = self._bm25_ranks(data, query, mask, depth, words[0])
        cosines: dict[int, float] = {}
        if mode == "hybrid" and qvec is not None:
            # BM25 candidates below the vector list's depth still have a cosine: fusion
            # (zscore) and relevance use it.
            missing = [row for row in lexical if row not in vector]
            if missing:
                cosines = dict(zip(missing, (data.matrix[missing] @ qvec).tolist()))
        params = apply_profile(params, data.profile)
        scored = fuse(vector, lexical, params, mode, cosines)
        candidates = sorted(scored, key=lambda row: (-scored[row], row))
        data.documents.fetch(data.document_ids[row] for row in candidates)  # on demand: in one query
        relevance, features = self._relevance(data, query, mode, candidates, vector, lexical, cosines, words, scored)
        if params.collection_weights:
            relevance = {
                row: weighted(p, self.weights.get(str(data.collections[row]), 1.0)) for row, p in relevance.items()
            }
        relevance = boost_linked(relevance, data.document_ids, data.documents, params.link_boost)
        # One ranking: by the relevance every hit shows (the fused score only breaks ties).
        ordered = sorted(candidates, key=lambda row: (-relevance[row], -scored[row], row))
        pool = ordered[: max(params.k * params.sections * 2, 60)]
        ranked = [row for row in pool if relevance[row] >= params.min_score]
        ranked = self._diversify(data, ranked, scored, params)
        if params.view == "pages":
            groups = group_pages(ranked, data.document_ids, params.k, params.sections)
        else:
            groups = [[row] for row in ranked[: params.k]]
        hits = self._hits(data, groups, scored, relevance, vector, lexical, features)
        result = SearchResult(
            query,
            hits,
            params,
            (time.perf_counter() - started) * 1000,
            data.model,
            embed_ms,
            best_relevance=max(relevance.values(), default=0.0),
            dropped=len(pool) - len(ranked),
        )
        if self.log_searches:
            self._log(result)
        return result

    def _query_words(self, data: LoadedIndex, query: str) -> tuple[list[str], list[str]]:
        """(the words BM25 searches, all the query's words): a long query's capped ones, or all."""
        every = query_words(query)
        conn = self._connection()
        searched = capped_words(
            every, lambda terms: data.term_statistics.frequencies(conn, data.stamp, terms), len(data.rowids)
        )
        return searched, every

    def _relevance(
        self,
        data: LoadedIndex,
        query: str,
        mode: str,
        rows: list[int],
        vector,
        lexical,
        cosines,
        words,
        fused: Mapping[int, float],
    ):
        """(row -> calibrated relevance, the rows' features) for ``rows`` (rag_assets.search.relevance);
        ``words``: :meth:`_query_words`' (None: found again); ``fused``: row -> fused score (required:
        a hybrid model that reads it would take a missing score for the worst candidate's)."""
        if not rows:
            return {}, _FeatureTable([], {})
        ceiling, unknown, title = 0.0, 0.0, None
        if mode != "vector":
            words = words or self._query_words(data, query)
            stems, every = stems_of(words[0]), stems_of(words[1])
            # CJK words are matched in fts_cjk as n-gram phrases, not as fts_chunks terms:
            # they are neither unknown words nor part of fts_chunks's ceiling. Their share of
            # the ceiling is the best BM25 score any candidate reached (a CJK match counts as full).
            terms = [t for t in stems if not cjk.has_cjk(t)]
            conn, n_rows = self._connection(), len(data.rowids)
            ceiling, unknown = data.term_statistics.ceiling(
                conn, data.stamp, terms, n_rows, [t for t in every if not cjk.has_cjk(t)]
            )
            if len(terms) < len(stems) and lexical:
                ceiling += max(score for _, score in lexical.values())
            shares = data.term_statistics.term_ceilings(conn, data.stamp, terms, n_rows)
            title = title_shares(
                [data.document_ids[row] for row in rows], data.documents, data.title_terms, terms, shares, ceiling
            )
        features = candidate_features(rows, vector, lexical, cosines, ceiling, unknown, title, fused)
        model = shipped_models().model(data.profile.embedder, mode)
        return dict(zip(rows, model.predict(features).tolist())), _FeatureTable(rows, features)

    def _filter_mask(self, data: LoadedIndex, params: SearchParams) -> np.ndarray | None:
        """Rows allowed by the filters, or None when nothing is filtered."""
        if not (params.collections or params.tags or params.filters or params.slug_prefix):
            return None
        key = (params.collections, params.tags, params.filters, params.slug_prefix)
        allowed = data.allowed_cache.get(key)
        if allowed is None:
            allowed = np.zeros(len(data.documents) + 1, dtype=bool)  # the last: rows without a document
            allowed[:-1] = np.isin(data.doc_collections, params.collections) if params.collections else True
            if params.tags or params.filters or params.slug_prefix:
                tags = {t.lower() for t in params.tags}
                documents = data.documents.every()  # every record, read in one query when on demand
                doc_ids = list(data.documents)
                for i in np.flatnonzero(allowed[:-1]):
                    doc_id = doc_ids[i]
                    doc = documents[doc_id]
                    allowed[i] = (
                        (not tags or tags <= {t.lower() for t in doc["tags"]})
                        and (
                            not params.slug_prefix
                            or doc["slug"].startswith(params.slug_prefix)
                            or doc_id.startswith(params.slug_prefix)
                        )
                        and all(_frontmatter_matches(doc["frontmatter"].get(k), value) for k, value in params.filters)
                    )
            if len(data.allowed_cache) >= 256:
                data.allowed_cache.clear()
            data.allowed_cache[key] = allowed
        return allowed[data.doc_index]

    def _vector_ranks(
        self, data: LoadedIndex, qvec: np.ndarray, mask: np.ndarray | None, depth: int
    ) -> dict[int, tuple[int, float]]:
        scores = data.matrix @ qvec
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        n = min(depth, len(scores))
        if n == 0:
            return {}
        top = np.argpartition(-scores, n - 1)[:n]
        top = top[np.argsort(-scores[top], kind="stable")]
        return {
            int(row): (rank, float(scores[row])) for rank, row in enumerate(top, start=1) if np.isfinite(scores[row])
        }

    def _bm25_ranks(
        self, data: LoadedIndex, query: str, mask: np.ndarray | None, depth: int, words: list[str] | None = None
    ) -> dict[int, tuple[int, float]]:
        """Row -> (rank, score) of the ``depth`` best chunks for the query's searched words
        (``words``, :meth:`_query_words`; None: found here) in fts_chunks, and for its CJK
        text in fts_cjk."""
        if words is None:
            words = self._query_words(data, query)[0]
        conn = self._connection()
        found: list[tuple[int, float]] = []
        memory = data.bm25
        if memory is not None:  # the same scores as fts_chunks's bm25(), from memory
            found.extend((row, score) for row, (_, score) in memory.ranks(query, depth, mask, words).items())
        weighted = (bm25_call("fts_chunks"), self.fields.as_tuple())  # fts_chunks's field weights
        for table, match in (("fts_chunks", fts_match_of_words(words)), ("fts_cjk", cjk.fts_query(query))):
            if not match or (memory is not None and table == "fts_chunks"):
                continue
            bm25, weights = weighted if table == "fts_chunks" else (f"bm25({table})", ())
            limit = depth if mask is None else -1  # filtered: read on until enough rows pass
            cursor = conn.execute(
                f"SELECT rowid, -{bm25} AS score FROM {table} WHERE {table} MATCH ? ORDER BY score DESC LIMIT ?",
                (*weights, match, limit),
            )
            taken = 0
            for rowid, score in cursor:
                row = data.row_of.get(rowid)
                if row is None or (mask is not None and not mask[row]):
                    continue
                found.append((row, float(score)))
                taken += 1
                if taken >= depth:
                    break
        best: dict[int, float] = {}
        for row, score in found:  # a chunk matched in both tables keeps its better score
            best[row] = max(score, best.get(row, float("-inf")))
        ordered = sorted(best.items(), key=lambda kv: -kv[1])[:depth]
        return {row: (rank, score) for rank, (row, score) in enumerate(ordered, start=1)}

    def _diversify(
        self, data: LoadedIndex, ranked: list[int], scored: dict[int, float], params: SearchParams
    ) -> list[int]:
        if params.mmr_lambda is not None and len(ranked) > 1:
            ranked = mmr(data.matrix, ranked, scored, params.mmr_lambda, limit=max(params.k * 3, params.k))
        if params.max_per_document:
            per_doc: dict[str, int] = {}
            kept = []
            for row in ranked:
                doc = data.document_ids[row]
                if per_doc.get(doc, 0) < params.max_per_document:
                    per_doc[doc] = per_doc.get(doc, 0) + 1
                    kept.append(row)
            ranked = kept
        return ranked

    def _hits(self, data, groups: list[list[int]], scored, relevance, vector, lexical, features) -> list[Hit]:
        """One Hit per group: its first row's chunk, the group's chunks as its sections."""
        rows = [row for group in groups for row in group]
        if not rows:
            return []
        rowids = [int(data.rowids[r]) for r in rows]
        marks = ",".join("?" * len(rowids))
        details = {
            r[0]: r[1:]
            for r in self._connection().execute(
                f"SELECT rowid, id, text, heading_path, chunk_index, document_id FROM chunks WHERE rowid IN ({marks})",
                rowids,
            )
        }

        def chunk_hit(row: int) -> Hit:
            chunk_id, text, heading_path, chunk_index, doc_id = details[int(data.rowids[row])]
            doc = data.documents.get(doc_id, {})
            return Hit(
                id=chunk_id,
                collection=doc.get("collection", ""),
                slug=doc.get("slug", ""),
                title=doc.get("title", ""),
                heading_path=json.loads(heading_path or "[]"),
                text=text,
                score=scored[row],
                vector_score=vector[row][1] if row in vector else None,
                bm25_score=lexical[row][1] if row in lexical else None,
                chunk_index=chunk_index,
                document_id=doc_id,
                relevance=relevance.get(row, 0.0),
                features=features.of(row),
            )

        hits = []
        for group in groups:
            sections = [chunk_hit(row) for row in group]
            head = replace(sections[0], sections=sections)
            hits.append(head)
        return hits

    def _log(self, result: SearchResult) -> None:
        params = {k: v for k, v in asdict(result.params).items() if v not in (None, (), [])}
        record = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            result.query,
            json.dumps(params),
            json.dumps([[h.id, round(h.score, 4)] for h in result.hits]),
            result.hits[0].score if result.hits else 0.0,
            round(result.latency_ms, 3),
            round(result.best_relevance, 4),
        )
        try:
            self._log_connection().execute(
                "INSERT INTO search_log(at, query, params, results, top_score, latency_ms, top_relevance)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                record,
            )
        except sqlite3.OperationalError:
            pass  # a read-only or busy log file must not fail the search itself
        except sqlite3.DatabaseError:  # damaged: set aside, the next search starts a new file
            self._close_local("log_conn")
            tier_logs.recover(self.path)

    def _log_connection(self) -> sqlite3.Connection:
        # The log file beside the store (rag_assets.index.tier_logs), not the store: a search
        # leaves the store's file as the build verified it. One connection per thread, as above.
        conn = getattr(self._local, "log_conn", None)
        if conn is None:
            conn = self._local.log_conn = tier_logs.connect(self.path)
        return conn

    def close(self) -> None:
        self._close_local("conn")
        self._close_local("log_conn")

    def _close_local(self, name: str) -> None:
        conn = getattr(self._local, name, None)
        if conn is not None:
            conn.close()
            setattr(self._local, name, None)


class _FeatureTable:
    """The relevance features of a search's candidates; a hit reads its own row only."""

    def __init__(self, rows: list[int], features: Mapping[str, np.ndarray]) -> None:
        self._position = {row: i for i, row in enumerate(rows)}
        self._features = features

    def of(self, row: int) -> dict[str, float]:
        i = self._position.get(row)
        return {} if i is None else {name: float(values[i]) for name, values in self._features.items()}


def _frontmatter_matches(value: Any, wanted: str) -> bool:
    """``key=value`` against a frontmatter value: scalars compare as text (case-insensitive),
    lists match when any element does."""
    if isinstance(value, list):
        return any(_frontmatter_matches(v, wanted) for v in value)
    if value is None:
        return False
    return str(value).lower() == wanted.lower()


def tier_embedder(cfg, tier: str, index: SearchIndex) -> Embedder:
    """The query embedder for a tier's store: the provider and model that built it. For the
    Private tier it must be local (a query about private notes is private text too)."""
    from rag_assets.embed.selection import query_embedder
    from rag_assets.privacy.local_only import PrivateEgress, enforce_local_only

    data = index.loaded()
    if not data.model or not data.dimension:
        raise SearchError(f"the {tier} store at {index.path} holds no embeddings yet; run `rag build`")
    provider = data.provider or _provider_from_model(data.model)
    if tier != "private":
        return query_embedder(provider, data.model, data.dimension, cfg.embedding)
    # Even the health probe before the first query goes through the private egress client.
    egress = PrivateEgress(tuple(cfg.private_hosts))
    embedder = query_embedder(provider, data.model, data.dimension, cfg.private_embedding, egress=egress)
    return enforce_local_only(embedder, cfg.private_hosts)


def _provider_from_model(model: str) -> str:
    """Stores written before the provider column: the two built-in models are recognisable."""
    from rag_assets.embed.hashing import MODEL_NAME

    if model == MODEL_NAME:
        return "hashing"
    if model.endswith("all-MiniLM-L6-v2"):
        return "local"
    return "ollama" if ":" in model or "nomic" in model else "openai"
