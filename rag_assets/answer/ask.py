"""One question, answered: rewrite a follow-up, retrieve, abstain or ask the model, check, log.

Two steps, so a server can report a bad request before it starts streaming:

- :func:`prepare` rewrites a session's follow-up into a standalone query, searches the tier
  and packs the best chunks into numbered sources (``llm.context_budget`` tokens). When no
  hit passes the calibrated relevance threshold it *abstains*: the nearest pages become the
  sources and no model is called.
- :func:`generate` yields the events of the answer: ``sources`` first, then one ``token``
  per streamed piece and ``done`` (answer, citations, citation check, usage), or ``error``
  when the model fails (status 502) or none is available (503). Every outcome is written to
  the tier's ``answer_log``.

The events' data are the JSON documents of POST /ask's server-sent events (see
:mod:`rag_assets.serve.ask_routes`); :func:`collect` folds them into the JSON answer of
``rag ask --json`` and of POST /ask without streaming.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rag_assets.answer.grounding import CitationCheck, check_citations, citations_json, grounded_messages
from rag_assets.answer.providers.base import ChatError, ChatUsage
from rag_assets.answer.selection import ChatSelection
from rag_assets.answer.sessions import Rewrite, history, standalone_query
from rag_assets.answer.sources import Source, as_notes, page_urls, sources_from_context, sources_from_hits
from rag_assets.base.egress import PrivacyError
from rag_assets.config.settings import LlmSettings
from rag_assets.index.answer_log import AnswerRecord, write_answer
from rag_assets.index.params import SearchParams, SearchResult
from rag_assets.search.context import pack_context
from rag_assets.search.passages import cites_notes

Search = Callable[[str, SearchParams], SearchResult]

ABSTAIN_ANSWER = "Nothing in these notes answers that."
CANDIDATE_CHUNKS = 20  # more chunks than fit, so the token budget decides (as `rag context`)
NEAREST_PAGES = 3


@dataclass(frozen=True)
class AskRequest:
    question: str
    tier: str = "public"
    session: str | None = None
    collections: tuple[str, ...] = ()


@dataclass(frozen=True)
class Event:
    """One step of an answer: ``sources``, ``token``, ``done`` or ``error``, with its JSON data."""

    kind: str
    data: dict[str, Any]


@dataclass
class Prepared:
    """A question after retrieval, before generation."""

    request: AskRequest
    rewrite: Rewrite
    result: SearchResult
    sources: list[Source]
    abstained: bool
    selection: ChatSelection
    store_path: Path
    started: float
    context_tokens: int = 0
    message: str | None = None
    retrieval_ms: float = 0.0

    def sources_event(self) -> Event:
        data: dict[str, Any] = {
            "question": self.request.question,
            "query": self.rewrite.query,
            "tier": self.request.tier,
            "abstained": self.abstained,
        }
        if self.message:
            data["message"] = self.message
        data["sources"] = [s.to_json() for s in self.sources]
        return Event("sources", data)

    def retrieval_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query": self.rewrite.query,
            "rewrite": self.rewrite.how,
            "tier": self.request.tier,
            "session": self.request.session,
            "sources": [s.to_json() for s in self.sources],
            "minScore": self.result.params.min_score,
            "bestRelevance": round(self.result.best_relevance, 4),
            "contextTokens": self.context_tokens,
            "latencyMs": round(self.retrieval_ms, 2),
            "chat": {"model": self.selection.name, "reason": self.selection.reason},
        }
        if self.message:
            out["message"] = self.message
        return out


def prepare(
    request: AskRequest, search: Search, selection: ChatSelection, store_path: Path, settings: LlmSettings
) -> Prepared:
    """Rewrite, retrieve and number the sources (see the module docstring)."""
    started = time.perf_counter()
    turns = history(store_path, request.session) if request.session else []
    rewrite = standalone_query(request.question, turns, selection.provider)
    params = SearchParams(k=CANDIDATE_CHUNKS, view="chunks", collections=request.collections)
    retrieval_started = time.perf_counter()
    result = search(rewrite.query, params)
    common: dict[str, Any] = dict(
        request=request, rewrite=rewrite, selection=selection, store_path=store_path, started=started
    )
    if not result.hits:
        nearest = search(rewrite.query, replace(params, k=NEAREST_PAGES, view="pages", min_score=0.0)).hits
        nearest_sources = sources_from_hits(nearest, page_urls(store_path, [h.document_id for h in nearest]))
        return Prepared(
            result=result,
            sources=as_notes(nearest_sources) if cites_notes(request.tier) else nearest_sources,
            abstained=True,
            message=abstain_message(result),
            retrieval_ms=(time.perf_counter() - retrieval_started) * 1000,
            **common,
        )
    packed = pack_context(result.hits, settings.context_budget, notes=cites_notes(request.tier))
    urls = page_urls(store_path, [h.document_id for h in result.hits])
    message = (
        None if selection.provider is not None else f"No answer: {selection.reason}. The sources found are listed."
    )
    sources = sources_from_context(packed, result.hits, urls)
    return Prepared(
        result=result,
        sources=as_notes(sources) if cites_notes(request.tier) else sources,
        abstained=False,
        context_tokens=packed.tokens,
        message=message,
        retrieval_ms=(time.perf_counter() - retrieval_started) * 1000,
        **common,
    )


def abstain_message(result: SearchResult) -> str:
    return (
        f"{ABSTAIN_ANSWER} No section reaches the relevance threshold ({result.params.min_score:g}); the closest "
        f"scored {result.best_relevance:.2f}. The nearest pages are listed; no model was asked."
    )


def generate(prepared: Prepared, *, streamed: bool = True, log_answers: bool = True) -> Iterator[Event]:
    """The answer's events (see the module docstring); logs the outcome when it ends."""
    yield prepared.sources_event()
    if prepared.abstained:
        yield _finish(prepared, ABSTAIN_ANSWER, CitationCheck(), None, log_answers)
        return
    chat = prepared.selection.provider
    if chat is None:
        yield _failure(prepared, prepared.selection.reason, 503, "", None, log_answers)
        return
    messages = grounded_messages(prepared.request.question, prepared.sources, query=prepared.rewrite.query)
    usage = ChatUsage()
    pieces: list[str] = []
    try:
        for piece in chat.stream(messages, usage, streamed=streamed):
            pieces.append(piece)
            yield Event("token", {"text": piece})
    except ChatError as exc:
        yield _failure(prepared, str(exc), 502, "".join(pieces), usage, log_answers)
        return
    except PrivacyError as exc:  # e.g. the local endpoint tried to redirect: nothing went there
        yield _failure(prepared, str(exc), 403, "".join(pieces), usage, log_answers)
        return
    answer = "".join(pieces)
    yield _finish(prepared, answer, check_citations(answer, len(prepared.sources)), usage, log_answers)


def _finish(prepared: Prepared, answer: str, check: CitationCheck, usage: ChatUsage | None, log_answers: bool) -> Event:
    latency = (time.perf_counter() - prepared.started) * 1000
    model = None if prepared.abstained or prepared.selection.provider is None else prepared.selection.provider.model
    problems = [] if prepared.abstained else check.problems
    if log_answers:
        write_answer(prepared.store_path, _record(prepared, answer, model, usage, latency, problems, None))
    return Event(
        "done",
        {
            "answer": answer,
            "citations": citations_json(check, prepared.sources),
            "model": model,
            "usage": usage.to_json() if usage is not None else None,
            "abstained": prepared.abstained,
            "citationCheck": {
                "unknown": list(check.unknown),
                "uncited": False if prepared.abstained else check.uncited,
            },
            "latencyMs": round(latency, 2),
        },
    )


def _failure(
    prepared: Prepared, error: str, status: int, partial: str, usage: ChatUsage | None, log_answers: bool
) -> Event:
    latency = (time.perf_counter() - prepared.started) * 1000
    model = prepared.selection.provider.model if prepared.selection.provider is not None else None
    if log_answers:
        write_answer(prepared.store_path, _record(prepared, partial or None, model, usage, latency, [], error))
    return Event("error", {"error": error, "status": status})


def _record(
    prepared: Prepared,
    answer: str | None,
    model: str | None,
    usage: ChatUsage | None,
    latency: float,
    problems: list[str],
    error: str | None,
) -> AnswerRecord:
    return AnswerRecord(
        question=prepared.request.question,
        query=prepared.rewrite.query,
        answer=answer,
        sources=[s.id for s in prepared.sources],
        model=model,
        latency_ms=latency,
        abstained=prepared.abstained,
        citation_problems=problems,
        prompt_tokens=usage.prompt_tokens if usage else None,
        completion_tokens=usage.completion_tokens if usage else None,
        session=prepared.request.session,
        error=error,
    )


@dataclass
class Collected:
    """An answer's events folded into one JSON document, and the HTTP status it deserves."""

    status: int
    body: dict[str, Any]
    events: list[Event] = field(default_factory=list)


def collect(prepared: Prepared, events: Iterator[Event]) -> Collected:
    """The ``rag ask --json`` / POST /ask JSON answer: the ``done`` event's fields and
    ``retrieval``; on an ``error`` event, the error, its status and the retrieval (sources)."""
    seen = list(events)
    last = seen[-1]
    if last.kind == "error":
        partial = "".join(e.data["text"] for e in seen if e.kind == "token")
        body = {
            "error": last.data["error"],
            "status": last.data["status"],
            "answer": partial or None,
            "retrieval": prepared.retrieval_json(),
        }
        return Collected(last.data["status"], body, seen)
    done = dict(last.data)
    body = {key: done[key] for key in ("answer", "citations", "model", "usage", "abstained", "citationCheck")}
    body["retrieval"] = {**prepared.retrieval_json(), "totalMs": done["latencyMs"]}
    return Collected(200, body, seen)
