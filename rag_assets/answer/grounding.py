"""The grounded prompt (numbered sources, answer only from them with ``[n]`` citations) and the
check of the citations in the answer that came back.

The check reads every bracketed number (``[2]``, ``[1, 3]``, ``[2][3]``): a number that names
no source is *unknown* (the model invented or misnumbered it), and an answer with no
citation of a real source is *uncited*. Neither hides the answer; both are reported with it
and logged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_assets.answer.providers.base import Message
from rag_assets.answer.sources import Source

SYSTEM_PROMPT = (
    "You answer questions from the numbered sources you are given, and from nothing else. "
    "After every statement taken from a source, cite it with its number in square brackets, like [1] or [2][3]. "
    "Cite only the numbers of the sources listed. If the sources do not answer the question, say that the notes "
    "do not answer it, and do not guess. Be brief: a few sentences or a short list."
)

_CITATION = re.compile(r"\[(\d{1,4}(?:\s*[,;]\s*\d{1,4})*)\]")


def source_block(source: Source) -> str:
    """One source as the model sees it: its number, page title and section, then its text."""
    where = " > ".join([source.title or f"{source.collection}/{source.slug}", *source.heading_path])
    return f"[{source.n}] {where}\n{source.text}"


def grounded_messages(question: str, sources: Sequence[Source], *, query: str | None = None) -> list[Message]:
    """The chat messages that ask for an answer from ``sources`` alone, cited by number."""
    blocks = "\n\n".join(source_block(s) for s in sources)
    standalone = f"\n(In full: {query})" if query and query.strip() != question.strip() else ""
    user = f"Sources:\n\n{blocks}\n\nQuestion: {question}{standalone}\n\nAnswer from the sources above, citing them as [n]:"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class CitationCheck:
    """What the answer cites: the sources it names (first use first), numbers naming none."""

    cited: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)

    @property
    def uncited(self) -> bool:
        return not self.cited

    @property
    def problems(self) -> list[str]:
        out = [f"cites [{n}], which is not a source" for n in self.unknown]
        if self.uncited:
            out.append("cites no source")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"unknown": list(self.unknown), "uncited": self.uncited}


def cited_numbers(answer: str) -> list[int]:
    """Every number cited in ``answer``, in order, repeats included."""
    return [int(n) for group in _CITATION.findall(answer) for n in re.split(r"\s*[,;]\s*", group)]


def check_citations(answer: str, source_count: int) -> CitationCheck:
    cited: list[int] = []
    unknown: list[int] = []
    for n in cited_numbers(answer):
        target = cited if 1 <= n <= source_count else unknown
        if n not in target:
            target.append(n)
    return CitationCheck(cited=cited, unknown=sorted(unknown))


def citations_json(check: CitationCheck, sources: Sequence[Source]) -> list[dict[str, Any]]:
    """The cited sources, in the order the answer first cites them."""
    by_number = {s.n: s for s in sources}
    return [by_number[n].citation_json() for n in check.cited if n in by_number]
