"""Conversations (``--session NAME``): a follow-up is rewritten into a standalone search query.

A session's memory is its rows in the tier's ``answer_log``
(:mod:`rag_assets.index.answer_log`), so it stays on this machine, in the log file beside the
store of the tier it was about. Before retrieval a follow-up ("and how do I undo that?") is rewritten with the last
turns: by the chat model when one is available (a short, non-streamed request at temperature 0),
otherwise, or when the model's rewrite is unusable, deterministically: the question followed by
the earlier query's content words it does not already contain.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rag_assets.answer.providers.base import ChatError, ChatProvider, complete
from rag_assets.index.answer_log import read_answers

MAX_TURNS = 3  # earlier turns given to the rewrite
MAX_QUERY_CHARS = 400
SESSION_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")

REWRITE_PROMPT = (
    "You turn the last question of a conversation into one standalone search query for a notes search engine. "
    "Replace pronouns and references with what they refer to in the earlier turns. Reply with the query only, "
    "on one line, without quotes or explanation."
)

_WORD = re.compile(r"\w+", re.UNICODE)
_STOPWORDS = frozenset(
    "a an and are as at be but by can do does for from how i if in is it its me my of on or so that the their then "
    "there these this those to was we what when where which who why will with you your".split()
)


@dataclass(frozen=True)
class Turn:
    question: str
    query: str
    answer: str


def check_session_name(name: str) -> str:
    """``name`` if usable as a session name, else ValueError saying what is allowed."""
    if not SESSION_NAME.fullmatch(name):  # not match: its "$" also matches before a trailing newline
        raise ValueError("a session name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    return name


def history(store_path: Path, session: str, turns: int = MAX_TURNS) -> list[Turn]:
    """The session's last ``turns`` turns, oldest first."""
    records, _ = read_answers(store_path, turns, session=session)
    return [Turn(r.question, r.query, r.answer or "") for r in reversed(records)]


@dataclass(frozen=True)
class Rewrite:
    query: str
    how: str  # "first question", "model", "fallback: <why>"


def standalone_query(question: str, turns: Sequence[Turn], chat: ChatProvider | None) -> Rewrite:
    """The search query for ``question`` given the earlier ``turns`` (see the module docstring)."""
    if not turns:
        return Rewrite(question, "first question")
    if chat is None:
        return Rewrite(fallback_query(question, turns), "fallback: no chat model")
    try:
        text, _ = complete(chat, rewrite_messages(question, turns), max_tokens=64)
    except ChatError as exc:
        return Rewrite(fallback_query(question, turns), f"fallback: {exc}")
    query = clean_rewrite(text)
    if not query:
        return Rewrite(fallback_query(question, turns), "fallback: the model's rewrite was unusable")
    return Rewrite(query, "model")


def rewrite_messages(question: str, turns: Sequence[Turn]) -> list[dict[str, str]]:
    lines = []
    for turn in turns:
        lines.append(f"Q: {turn.question}")
        if turn.answer:
            lines.append(f"A: {' '.join(turn.answer.split())[:300]}")
    lines.append(f"Last question: {question}")
    return [
        {"role": "system", "content": REWRITE_PROMPT},
        {"role": "user", "content": "\n".join(lines) + "\n\nStandalone query:"},
    ]


def clean_rewrite(text: str) -> str:
    """The model's query, without thinking tags, labels or quotes; '' when unusable."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = re.sub(r"^(standalone )?(search )?query\s*:\s*", "", line, flags=re.IGNORECASE).strip().strip("\"'`").strip()
    return line if 0 < len(line) <= MAX_QUERY_CHARS else ""


def fallback_query(question: str, turns: Sequence[Turn]) -> str:
    """The question plus the previous query's content words it lacks (at most 12)."""
    have = {w.lower() for w in _WORD.findall(question)}
    extra: list[str] = []
    for word in _WORD.findall(turns[-1].query):
        key = word.lower()
        if key in have or key in _STOPWORDS or len(key) < 3:
            continue
        have.add(key)
        extra.append(word)
    return " ".join([question.strip(), *extra[:12]])[:MAX_QUERY_CHARS]
