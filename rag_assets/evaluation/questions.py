"""Question sets: JSON lines ``{"q": "...", "expect": ["collection/slug", ...]}``, read and checked.

A question set is written by hand for one content folder: each line a question in a user's
words and the 1-3 pages that answer it, named as ``rag search`` prints them
(``collection/slug``). :func:`load_questions` reads one or more files and raises
EvaluationError naming the file and line of the first malformed question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_assets.evaluation.datasets import EvaluationError, json_lines

FIELDS = ("q", "expect")
FORMAT = '{"q": "the question", "expect": ["collection/slug", ...]}'


@dataclass(frozen=True)
class Question:
    """One line of a question file."""

    source: str  # the file, as given
    line: int
    text: str
    expect: tuple[str, ...]  # pages (collection/slug), each once

    @property
    def key(self) -> str:
        """``file:line``: unique over the files of one evaluation."""
        return f"{self.source}:{self.line}"


def page_problem(page: Any) -> str | None:
    """Why ``page`` cannot name a page of the index, or None."""
    if not isinstance(page, str) or not page.strip():
        return "must be text"
    if page != page.strip() or "/" not in page or page.startswith("/") or page.endswith("/"):
        return "is not collection/slug (as `rag search` prints it, e.g. docs/networking/vlans)"
    return None


def parse_question(row: Any, source: str, line: int) -> Question:
    """One decoded line as a Question; EvaluationError ``source:line: ...`` if malformed."""
    where = f"{source}:{line}"
    if not isinstance(row, dict):
        raise EvaluationError(f"{where}: each line must be a JSON object, {FORMAT}")
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise EvaluationError(f"{where}: unknown field(s) {', '.join(unknown)}; a line holds only {FORMAT}")
    text = row.get("q")
    if not isinstance(text, str) or not text.strip():
        raise EvaluationError(f'{where}: "q" must be the question, as non-empty text ({FORMAT})')
    expect = row.get("expect")
    if not isinstance(expect, list) or not expect:
        raise EvaluationError(f'{where}: "expect" must be a list of one or more pages ({FORMAT})')
    for page in expect:
        problem = page_problem(page)
        if problem:
            raise EvaluationError(f"{where}: the expected page {page!r} {problem}")
    return Question(source, line, " ".join(text.split()), tuple(dict.fromkeys(expect)))


def read_question_file(path: Path) -> list[Question]:
    """Every question of one file, in order; blank lines are skipped."""
    if not path.is_file():
        raise EvaluationError(f"no question file at {path}: give a JSON-lines file, one {FORMAT} per line")
    questions = [parse_question(row, str(path), number) for number, row in json_lines(path, f"; each line is {FORMAT}")]
    if not questions:
        raise EvaluationError(f"{path} holds no questions; each line is {FORMAT}")
    return questions


def load_questions(paths: Sequence[Path]) -> list[Question]:
    """The questions of every file (each file once), in the order given."""
    if not paths:
        raise EvaluationError("no question file given")
    questions: list[Question] = []
    for path in dict.fromkeys(Path(p) for p in paths):
        questions += read_question_file(path)
    return questions
