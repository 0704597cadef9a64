"""``rag eval --questions``: hand-written questions scored against the index already built.

Every question (:mod:`rag_assets.evaluation.questions`) is searched in the public tier's
store (``cfg.public_store_path``) with :class:`~rag_assets.search.retrieval.SearchIndex`
(``log_searches=False``) in bm25, vector and hybrid mode, the query embedded by the model
that built the store (:func:`~rag_assets.search.retrieval.tier_embedder`). The search is
``rag search``'s default (the store's search profile, collection weights included) scored
whole, as the BEIR evaluation scores it: chunks, ``k`` raised to the candidates so that ten
pages fill, no relevance floor (:func:`~rag_assets.evaluation.runner.configured_search`).

Judged per page: chunk hits collapse to their page, each at its best chunk's place
(:func:`~rag_assets.evaluation.runner.documents_of`), and a question scores a hit at k when
any of its expected pages is among the first k (:func:`~rag_assets.evaluation.metrics.score_questions`).

An expected page the index does not hold is reported (file, line, page) and counts as a miss;
a set none of whose pages is in the index is an error: it was written for other content.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from rag_assets.config import RagConfig
from rag_assets.embed.errors import EmbeddingError
from rag_assets.evaluation.datasets import EvaluationError
from rag_assets.evaluation.eval_store import Log
from rag_assets.evaluation.metrics import score_questions
from rag_assets.evaluation.questions import Question, load_questions
from rag_assets.evaluation.report import QuestionInfo, QuestionReport, UnknownPage
from rag_assets.evaluation.runner import EVAL_MODES, QueryMemo, configured_search, documents_of
from rag_assets.index.params import SearchError, SearchParams
from rag_assets.index.profiles import SearchProfile, apply_profile
from rag_assets.search import backends
from rag_assets.search.pg_index import PgSearchIndex
from rag_assets.search.retrieval import SearchIndex, tier_embedder


def unknown_pages(questions: Sequence[Question], pages: set[str]) -> list[UnknownPage]:
    """Every expected page that is not in ``pages``, with the file and line that names it."""
    return [UnknownPage(q.source, q.line, page) for q in questions for page in q.expect if page not in pages]


def open_index(cfg: RagConfig, backend: str | None = None) -> SearchIndex:
    """The public tier's store (SQLite or PostgreSQL: ``backend``, default the configured one),
    built and holding pages; EvaluationError saying to build it otherwise."""
    index = backends.open_index(cfg, "public", backend=backend, log_searches=False)
    path = index.path if not isinstance(index, PgSearchIndex) else f"{cfg.store.url} (schema rag_public)"
    if not index.exists():
        index.close()
        raise EvaluationError(
            f"no index at {path}: run `rag build` first (the questions are searched in the index already built)"
        )
    try:
        if not index.loaded().documents:
            raise EvaluationError(f"the index at {path} holds no pages: run `rag build` first")
    except SearchError as exc:
        index.close()
        raise EvaluationError(str(exc)) from None
    except EvaluationError:
        index.close()
        raise
    return index


def check_pages(questions: Sequence[Question], index: SearchIndex) -> list[UnknownPage]:
    """The unknown expected pages; EvaluationError when the index holds none of the set's pages."""
    pages = set(index.loaded().documents)
    unknown = unknown_pages(questions, pages)
    expected = {page for q in questions for page in q.expect}
    if expected and not expected & pages:
        sources = ", ".join(dict.fromkeys(q.source for q in questions))
        sample = ", ".join(sorted(expected)[:3])
        raise EvaluationError(
            f"none of the {len(expected)} expected pages of {sources} is in the index at {index.path} "
            f"(e.g. {sample}): is the question set written for another content folder? "
            "Check --content-dir/--output-dir, or the pages' collection/slug in `rag search` output"
        )
    return unknown


def page_rankings(
    index: SearchIndex, questions: Sequence[Question], embedder: QueryMemo | None, params: SearchParams, mode: str
) -> dict[str, list[str]]:
    """Per question (``file:line``), the pages of one mode's search, best first."""
    search = configured_search(params, mode, collection_weights=params.collection_weights)
    rankings: dict[str, list[str]] = {}
    for q in questions:
        result = index.search(q.text, embedder if mode != "bm25" else None, search)
        rankings[q.key] = documents_of((hit.document_id, hit.score) for hit in result.hits)
    return rankings


def searched_with(params: SearchParams, profile: SearchProfile) -> dict:
    """The settings the questions were searched with: the store's search profile filling the
    fusion fields, as :func:`configured_search` runs them (k and mode vary, so they are left out)."""
    searched = apply_profile(configured_search(params, "hybrid", collection_weights=params.collection_weights), profile)
    return {k: v for k, v in asdict(searched).items() if v not in (None, (), []) and k not in ("mode", "k")}


def score_by_file(
    questions: Sequence[Question], rankings: dict[str, dict[str, list[str]]], qrels: dict[str, dict[str, int]]
) -> dict[str, dict[str, dict[str, float]]]:
    """file -> mode -> metric, each file's questions alone."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for source in dict.fromkeys(q.source for q in questions):
        keys = [q.key for q in questions if q.source == source]
        out[source] = {mode: score_questions({k: ranked[k] for k in keys}, qrels) for mode, ranked in rankings.items()}
    return out


def run_question_evaluation(
    cfg: RagConfig,
    paths: Sequence[str | Path],
    params: SearchParams = SearchParams(),
    *,
    log: Log = lambda _: None,
    backend: str | None = None,
) -> QuestionReport:
    """Score bm25, vector and hybrid search of the built index on the question files ``paths``."""
    started = time.perf_counter()
    questions = load_questions([Path(p) for p in paths])
    index = open_index(cfg, backend)
    embedder = None
    try:
        unknown = check_pages(questions, index)
        for page in unknown:
            log(f"warning: {page} is not in the index (the question can only miss)")
        data = index.loaded()
        embedder = tier_embedder(cfg, "public", index)
        memo = QueryMemo(embedder)
        log(f"searching {len(questions)} questions x {len(EVAL_MODES)} modes in {index.path} ({data.model})")
        rankings = {mode: page_rankings(index, questions, memo, params, mode) for mode in EVAL_MODES}
    except (SearchError, EmbeddingError) as exc:
        raise EvaluationError(str(exc)) from None
    finally:
        close = getattr(embedder, "close", None)
        if close is not None:
            close()
        index.close()
    qrels = {q.key: dict.fromkeys(q.expect, 1) for q in questions}
    metrics = {mode: score_questions(ranked, qrels) for mode, ranked in rankings.items()}
    hybrid = rankings["hybrid"]
    info = QuestionInfo(
        files=list(dict.fromkeys(q.source for q in questions)),
        questions=len(questions),
        pages=len({page for q in questions for page in q.expect}),
        unknown_pages=unknown,
        misses=[f"{q.key} {q.text}" for q in questions if not set(hybrid[q.key][:10]) & set(q.expect)],
        store_path=str(index.path),
        documents=len(data.documents),
        chunks=len(data.rowids),
        model=data.model or "",
        provider=data.provider or "",
        seconds=round(time.perf_counter() - started, 3),
        per_file=score_by_file(questions, rankings, qrels) if len({q.source for q in questions}) > 1 else {},
        params=searched_with(params, data.profile),
    )
    return QuestionReport(metrics, info)
