"""What an evaluation returns (EvalReport: metrics per mode, EvalInfo; QuestionReport for a
question set, QuestionInfo) and its table (format_table).

The table is what ``rag eval`` prints and what the Dagster asset attaches as Markdown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rag_assets.evaluation.metrics import METRICS


@dataclass
class EvalInfo:
    dataset: str
    split: str
    queries: int
    model: str
    provider: str
    seconds: float
    index_seconds: float
    search_seconds: float
    store_path: str
    rebuilt: bool
    documents: int
    chunks: int
    skipped_queries: int
    params: dict[str, Any] = field(default_factory=dict)
    backend: str = "sqlite"  # the store searched: sqlite, or its PostgreSQL copy

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EvalReport:
    metrics: dict[str, dict[str, float]]  # exactly {"bm25": {...}, "vector": {...}, "hybrid": {...}}
    info: EvalInfo

    def to_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "info": self.info.to_json()}


@dataclass(frozen=True)
class UnknownPage:
    """An expected page the index does not hold: the question can only miss."""

    source: str
    line: int
    page: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.page}"


@dataclass
class QuestionInfo:
    files: list[str]
    questions: int
    pages: int  # distinct expected pages
    unknown_pages: list[UnknownPage]
    misses: list[str]  # "file:line question" of the questions hybrid search misses in its top 10
    store_path: str
    documents: int
    chunks: int
    model: str
    provider: str
    seconds: float
    per_file: dict[str, dict[str, dict[str, float]]] = field(
        default_factory=dict
    )  # file -> mode -> metric, with several files
    params: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class QuestionReport:
    metrics: dict[str, dict[str, float]]  # {"bm25": {"hit@1", ...}, "vector": {...}, "hybrid": {...}}
    info: QuestionInfo

    def to_json(self) -> dict[str, Any]:
        """The modes' figures at the top level, as ``rag eval --questions --json`` prints them, and ``info``."""
        return {**self.metrics, "info": self.info.to_json()}


def format_table(
    metrics: Mapping[str, Mapping[str, float]],
    *,
    markdown: bool = False,
    digits: int = 4,
    columns: Sequence[str] = METRICS,
) -> str:
    """A plain-text (or Markdown) table: one row per mode, one column per metric (``columns``)."""
    header = ["mode", *columns]
    rows = [[mode, *(f"{values.get(m, float('nan')):.{digits}f}" for m in columns)] for mode, values in metrics.items()]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "| --- | " + " | ".join("---:" for _ in columns) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])
