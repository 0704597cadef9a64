"""What an evaluation returns (EvalReport: metrics per mode, EvalInfo) and its table (format_table).

The table is what ``rag eval`` prints and what the Dagster asset attaches as Markdown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

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

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EvalReport:
    metrics: dict[str, dict[str, float]]  # exactly {"bm25": {...}, "vector": {...}, "hybrid": {...}}
    info: EvalInfo

    def to_json(self) -> dict[str, Any]:
        return {"metrics": self.metrics, "info": self.info.to_json()}


def format_table(metrics: Mapping[str, Mapping[str, float]], *, markdown: bool = False, digits: int = 4) -> str:
    """A plain-text (or Markdown) table: one row per mode, one column per metric."""
    header = ["mode", *METRICS]
    rows = [[mode, *(f"{values.get(m, float('nan')):.{digits}f}" for m in METRICS)] for mode, values in metrics.items()]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "| --- | " + " | ".join("---:" for _ in METRICS) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])
