"""Reading the search log each tier keeps beside its store (``rag log``; :mod:`rag_assets.index.tier_logs`)."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path
from typing import Any

from rag_assets.index import tier_logs

_COLUMNS = "at, query, results, top_score, latency_ms, top_relevance"


def _row(at: str, query: str, results: str, top: float, latency: float, relevance: float | None) -> dict[str, Any]:
    return {
        "at": at,
        "query": query,
        "hits": len(json.loads(results or "[]")),
        "topScore": top or 0.0,
        "topRelevance": relevance,  # None: logged before relevance was calibrated
        "latencyMs": latency or 0.0,
    }


def read_log(path: Path, limit: int = 10) -> tuple[list[dict], list[dict], int]:
    """(most recent searches, weakest searches, total logged). The weakest are those whose best
    candidate had the lowest calibrated relevance: the questions the content answers worst
    (a search that found nothing at all counts as 0). ``path``: the tier's store."""
    if not tier_logs.exists(path):
        return [], [], 0
    with closing(tier_logs.connect(path)) as conn:
        recent = [
            _row(*r) for r in conn.execute(f"SELECT {_COLUMNS} FROM search_log ORDER BY id DESC LIMIT ?", (limit,))
        ]
        weakest = [
            _row(*r)
            for r in conn.execute(
                f"SELECT {_COLUMNS} FROM search_log WHERE top_relevance IS NOT NULL"
                " ORDER BY top_relevance ASC, id DESC LIMIT ?",
                (limit,),
            )
        ]
        total = conn.execute("SELECT COUNT(*) FROM search_log").fetchone()[0]
    return recent, weakest, total
