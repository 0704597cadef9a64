"""The ``answer_log`` table of a tier's log file: every answer given (``rag log`` shows them).

One row per question: when, the session it belongs to, the question and the search query
it became, the sources given (ids), the answer, the model, its tokens, the latency, whether
it abstained, what the citation check found, and the error if generation failed. The rows
of a session are also its memory (:mod:`rag_assets.answer.sessions`). The table lives in
the log file of the tier asked (:mod:`rag_assets.index.tier_logs`, beside its store), so a
Private question stays with the Private store, like ``search_log``. Every function takes the
tier's store path.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_assets.index import tier_logs

log = logging.getLogger("rag_assets.index.answer_log")


@dataclass(frozen=True)
class AnswerRecord:
    """One row of ``answer_log``."""

    question: str
    query: str
    answer: str | None
    sources: list[str]
    model: str | None
    latency_ms: float
    abstained: bool
    citation_problems: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    session: str | None = None
    error: str | None = None
    at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "session": self.session,
            "question": self.question,
            "query": self.query,
            "answer": self.answer,
            "sources": self.sources,
            "model": self.model,
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "latencyMs": self.latency_ms,
            "abstained": self.abstained,
            "citationProblems": self.citation_problems,
            "error": self.error,
        }


def write_answer(path: Path, record: AnswerRecord) -> bool:
    """Append ``record`` to the log file of the store at ``path``; False (logged) when it cannot
    take it, which never fails an answer."""
    at = record.at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        tier_logs.append(
            path,
            "INSERT INTO answer_log(at, session, question, query, answer, sources, model, prompt_tokens,"
            " completion_tokens, latency_ms, abstained, citation_problems, error)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                at,
                record.session,
                record.question,
                record.query,
                record.answer,
                json.dumps(record.sources),
                record.model,
                record.prompt_tokens,
                record.completion_tokens,
                round(record.latency_ms, 2),
                int(record.abstained),
                json.dumps(record.citation_problems),
                record.error,
            ),
        )
        return True
    except sqlite3.Error:
        log.warning("could not log an answer in %s", path, exc_info=True)
        return False


_COLUMNS = (
    "at, session, question, query, answer, sources, model, prompt_tokens, completion_tokens, latency_ms, abstained,"
    " citation_problems, error"
)


def _record(row: tuple) -> AnswerRecord:
    at, session, question, query, answer, sources, model, prompt, completion, latency, abstained, problems, error = row
    return AnswerRecord(
        question=question,
        query=query,
        answer=answer,
        sources=json.loads(sources or "[]"),
        model=model,
        latency_ms=latency or 0.0,
        abstained=bool(abstained),
        citation_problems=json.loads(problems or "[]"),
        prompt_tokens=prompt,
        completion_tokens=completion,
        session=session,
        error=error,
        at=at,
    )


def read_answers(path: Path, limit: int = 10, *, session: str | None = None) -> tuple[list[AnswerRecord], int]:
    """(the latest ``limit`` answers, newest first; how many are logged), of one session if given."""
    if not tier_logs.exists(path):
        return [], 0
    where, args = ("WHERE session = ?", (session,)) if session is not None else ("", ())
    with closing(tier_logs.connect(path)) as conn:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM answer_log {where} ORDER BY id DESC LIMIT ?", (*args, limit)
        ).fetchall()
        total = conn.execute(f"SELECT COUNT(*) FROM answer_log {where}", args).fetchone()[0]
    return [_record(r) for r in rows], total
