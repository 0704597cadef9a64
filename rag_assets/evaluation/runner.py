"""Retrieval quality on a BEIR dataset: nDCG@10, recall@10, recall@100 and MRR@10 per search mode.

The evaluation runner: the Evaluator (searching an eval store query by query) and run_evaluation.

The corpus is indexed into an eval store (:mod:`rag_assets.evaluation.eval_store`). Every
query of the split is then searched with :class:`~rag_assets.search.retrieval.SearchIndex`
(``log_searches=False``; BM25 from the in-memory postings, which give FTS5's scores) in
the three modes. Chunk hits become documents (a document scores its best chunk; the first occurrence in the ranked list keeps its place) and are scored with
the BEIR / trec_eval definitions (:mod:`rag_assets.evaluation.metrics`), after BEIR's rule
that drops a hit on the query's own ID (ArguAna, Quora: the queries are corpus documents).

Queries without a relevant judgement in the split are skipped (counted in the info).

Depth: the @10 metrics come from the search exactly as configured (``params.candidates``
per list, no relevance floor (it decides what a person sees, not the order); ``k`` raised to ``candidates``, since the top ten chunks may
hold fewer than ten documents). recall@100 comes from a deeper search (each list ``depth``
chunks deep, no score floor), so that a small ``candidates`` does not cap it. For bm25 and
vector only the deep search runs: a single list's shallower ranking is exactly its head.

Plain Python, no Dagster: ``rag_assets.defs.evaluation`` wraps it as an asset, and
``bench/tune_fusion.py`` runs the fusion grid with :class:`Evaluator`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from rag_assets.base.blas import blas_threads
from rag_assets.config import RagConfig
from rag_assets.embed.base import Embedder
from rag_assets.embed.selection import select_embedder
from rag_assets.evaluation.datasets import BeirDataset, EvaluationError, load_beir
from rag_assets.evaluation.eval_store import (
    Log,
    ensure_eval_store,
    safe_name,
    slugs_for,
)
from rag_assets.evaluation.metrics import score_rankings
from rag_assets.evaluation.report import EvalInfo, EvalReport
from rag_assets.index.fields import FieldWeights
from rag_assets.search.retrieval import SearchIndex, SearchParams

EVAL_MODES = ("bm25", "vector", "hybrid")
# Chunks each list reaches in the deep search that recall@100 is read from.
DEFAULT_DEPTH = 300


def documents_of(hits: Iterable[tuple[str, float]]) -> list[str]:
    """Chunk hits (best first) -> corpus ids, each at its best chunk's place."""
    seen: dict[str, None] = {}
    for doc, _ in hits:
        if doc and doc not in seen:
            seen[doc] = None
    return list(seen)


def configured_search(params: SearchParams, mode: str, *, collection_weights: bool = False) -> SearchParams:
    """One mode's search as configured, scored whole: ``k`` raised to its candidates (the top
    ten chunks may hold fewer than ten documents), chunks not pages, no relevance floor (it
    decides what a person is shown, not the order, and the metrics would only lose from a cut
    list), no MMR, no per-document cap, collection weights only if asked."""
    base = replace(
        params,
        mode=mode,
        collection_weights=collection_weights,
        mmr_lambda=None,
        max_per_document=None,
        min_score=0.0,
        view="chunks",
    )
    return replace(base, k=min(base.candidates, 1000))


class QueryMemo:
    """The embedder, with each query's vector computed once (three modes, many settings)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self._vectors: dict[str, np.ndarray] = {}

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        vector = self._vectors.get(text)
        if vector is None:
            vector = self._vectors[text] = np.asarray(self.inner.embed_query(text), dtype=np.float32)
        return vector


def _neutral(params: SearchParams, mode: str) -> SearchParams:
    """Params whose fusion fields cannot change a single-list mode's ranking, for caching."""
    if mode == "hybrid":
        return params
    base = SearchParams()
    return replace(
        params, fusion=base.fusion, rrf_k=base.rrf_k, vector_weight=base.vector_weight, bm25_weight=base.bm25_weight
    )


class Evaluator:
    """One eval store and dataset, searchable repeatedly with different params (the tuning grid)."""

    def __init__(
        self,
        store_path: Path,
        dataset: BeirDataset,
        embedder: Embedder,
        *,
        depth: int = DEFAULT_DEPTH,
        qrels: Mapping[str, Mapping[str, int]] | None = None,
        fields: FieldWeights = FieldWeights(),
        lexical: str = "fts5",
        index: SearchIndex | None = None,
    ) -> None:
        if depth < 100:
            raise ValueError("depth must be at least 100 (recall@100)")
        self.dataset = dataset
        self.embedder = QueryMemo(embedder)
        # ``index``: the same store read another way (its PostgreSQL copy, see postgres_eval_index).
        self.index = index or SearchIndex(store_path, log_searches=False, fields=fields, lexical=lexical)
        self.depth = depth
        prefix = f"{safe_name(dataset.name)}/"
        slugs = slugs_for(dataset.corpus)
        self.corpus_id_of = {prefix + slug: doc_id for doc_id, slug in slugs.items()}
        self._runs: dict[tuple, dict[str, list[tuple[str, float]]]] = {}
        self.use_qrels(qrels if qrels is not None else dataset.qrels)

    def use_qrels(self, qrels: Mapping[str, Mapping[str, int]]) -> None:
        """Evaluate against these judgements from now on (another split of the same corpus)."""
        self.qrels = {q: dict(r) for q, r in qrels.items()}
        self.query_ids = [
            q for q, r in self.qrels.items() if q in self.dataset.queries and any(v > 0 for v in r.values())
        ]
        self.skipped_queries = len(self.qrels) - len(self.query_ids)

    def chunk_hits(self, query_id: str, params: SearchParams) -> list[tuple[str, float]]:
        """(corpus id, score) of every chunk hit, best first, as SearchIndex returns them."""
        result = self.index.search(self.dataset.queries[query_id], self.embedder, params)
        return [(self.corpus_id_of.get(hit.document_id, ""), hit.score) for hit in result.hits]

    def ranking(self, query_id: str, params: SearchParams) -> list[str]:
        """Corpus ids, best first (each document at its best chunk)."""
        return documents_of(self.chunk_hits(query_id, params))

    def _run(self, params: SearchParams) -> dict[str, list[tuple[str, float]]]:
        key = (_neutral(params, params.mode), tuple(self.query_ids))
        run = self._runs.get(key)
        if run is None:
            run = {q: self.chunk_hits(q, params) for q in self.query_ids}
            self._runs[key] = run
        return run

    def mode_params(self, params: SearchParams, mode: str) -> tuple[SearchParams, SearchParams]:
        """The search as configured (k raised to its candidates), and the deep one recall@100
        is read from (the same search when the configured one already reaches ``depth``)."""
        shallow = configured_search(params, mode)
        if shallow.k >= self.depth:
            return shallow, shallow
        return shallow, replace(shallow, k=self.depth, candidates=max(shallow.candidates, self.depth))

    def rankings(self, params: SearchParams, mode: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Per query, the documents of the configured search and of the deep one."""
        shallow_params, deep_params = self.mode_params(params, mode)
        deep = self._run(deep_params)
        if shallow_params == deep_params:
            shallow = deep
        elif mode == "hybrid":
            shallow = self._run(shallow_params)
        else:
            # One list, no fusion: a shallower search returns exactly the deep one's first
            # `candidates` chunks (same scores).
            n = shallow_params.k
            shallow = {q: hits[:n] for q, hits in deep.items()}
        return (
            {q: documents_of(hits) for q, hits in shallow.items()},
            {q: documents_of(hits) for q, hits in deep.items()},
        )

    def evaluate(
        self, params: SearchParams = SearchParams(), modes: Sequence[str] = EVAL_MODES
    ) -> dict[str, dict[str, float]]:
        """``{mode: {metric: mean}}`` over the judged queries."""
        out: dict[str, dict[str, float]] = {}
        for mode in modes:
            shallow, deep = self.rankings(params, mode)
            out[mode] = score_rankings(shallow, deep, self.qrels)
        return out

    def close(self) -> None:
        self.index.close()


def postgres_eval_index(cfg: RagConfig, dataset_name: str, store_path: Path, log: Log = lambda _: None) -> SearchIndex:
    """The eval store synced (by diff) into its own PostgreSQL schema, ``rag_eval_<dataset>``,
    and searched there (pgvector candidates, the SQLite path's BM25 over a local mirror)."""
    from rag_assets.index import pg_sync
    from rag_assets.search.backends import open_postgres_index

    if not cfg.store.url:
        raise EvaluationError("--backend postgres needs a store URL: store.url in rag.yaml or $RAG_STORE_URL")
    name = "eval_" + re.sub(r"[^a-z0-9]+", "_", safe_name(dataset_name))[:43]
    sync = pg_sync.sync_tier(cfg.store.url, name, store_path, cfg.store.hnsw)
    log(f"PostgreSQL schema rag_{name}: {sync.chunks_written} chunks written, {sync.chunks_deleted} deleted")
    mirror = store_path.with_name(store_path.stem + "-pg-mirror.db")
    return open_postgres_index(
        cfg.store.url,
        name,
        mirror,
        log_searches=False,
        ef_search=cfg.store.ef_search,
        vector_search=cfg.store.vector_search,
    )


def select_eval_embedder(cfg: RagConfig, embedder_name: str | None) -> tuple[Embedder, str]:
    settings = cfg.embedding if not embedder_name else cfg.embedding.model_copy(update={"name": embedder_name})
    selection = select_embedder(settings)
    return selection.embedder, selection.provider


def run_evaluation(
    cfg: RagConfig,
    dataset_dir: str | Path,
    split: str = "test",
    embedder_name: str | None = None,
    params: SearchParams = SearchParams(),
    *,
    depth: int = DEFAULT_DEPTH,
    log: Log = lambda _: None,
    embedder: Embedder | None = None,
    provider: str | None = None,
    backend: str | None = None,
) -> EvalReport:
    """Index the dataset's corpus (or reuse its store) and score bm25, vector and hybrid search.

    ``embedder_name`` picks the provider (None or "": the configured one); an ``embedder``
    object, if given, is used as it is. ``backend`` (default: the configured store backend):
    ``postgres`` syncs the eval store into PostgreSQL and searches it there.
    """
    started = time.perf_counter()
    dataset = load_beir(dataset_dir, split)
    if not dataset.judged_queries():
        raise EvaluationError(f"no query of qrels/{split}.tsv has a relevant document and a text in queries.jsonl")
    owned = embedder is None
    if embedder is None:
        embedder, provider = select_eval_embedder(cfg, embedder_name)
    provider = provider or getattr(embedder, "provider", None) or "custom"
    try:
        log(f"evaluating {dataset.name} ({split}) with {provider}: {embedder.model}")
        built = ensure_eval_store(cfg, dataset, embedder, provider=provider, log=log)
        backend = backend or cfg.store.backend
        index = postgres_eval_index(cfg, dataset.name, built.path, log) if backend == "postgres" else None
        # The in-memory BM25 (FTS5's scores, from postings cached beside the eval store): a
        # paragraph-long query costs FTS5 tens to hundreds of ms, three times per query.
        evaluator = Evaluator(built.path, dataset, embedder, depth=depth, index=index, lexical="memory")
        t0 = time.perf_counter()
        try:
            with blas_threads(1):  # thousands of searches, one after the other (rag_assets.base.blas)
                metrics = evaluator.evaluate(params)
        finally:
            evaluator.close()
        search_seconds = time.perf_counter() - t0
    finally:
        close = getattr(embedder, "close", None) if owned else None
        if close is not None:
            close()
    info = EvalInfo(
        dataset=dataset.name,
        split=split,
        queries=len(evaluator.query_ids),
        model=embedder.model,
        provider=provider,
        seconds=round(time.perf_counter() - started, 3),
        index_seconds=round(built.seconds, 3),
        search_seconds=round(search_seconds, 3),
        store_path=str(built.path),
        rebuilt=built.rebuilt,
        documents=built.documents,
        chunks=built.chunks,
        skipped_queries=evaluator.skipped_queries,
        params={k: v for k, v in asdict(params).items() if v not in (None, (), [])},
        backend=backend,
    )
    log(f"{info.queries} queries x 3 modes searched in {search_seconds:.1f}s ({backend} store)")
    return EvalReport(metrics, info)
