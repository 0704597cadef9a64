"""Field weights of BM25: how much a match in each column of ``fts_chunks`` counts.

``fts_chunks`` has the columns text, title, headings and tags (:mod:`rag_assets.index.fts`).
FTS5's ``bm25(fts_chunks, w_text, w_title, w_headings, w_tags)`` counts a query term's
occurrences in a row as ``sum over columns of w_column * occurrences there`` before the
usual saturation, ``tf*(k1+1) / (tf + k1*(1 - b + b*D/avgdl))``; the in-memory BM25
(:mod:`rag_assets.search.bm25`) computes the same weighted tf, so both give the same scores.
Weights must be positive: a weight of 0 would let FTS5 return a row scoring 0, which the
in-memory ranking (rows scoring above 0) would not.

**How the defaults were chosen** (``bench/tune_bm25.py``): the title weight by nDCG@10 on
SciFact's **train** split in bm25 mode (809 queries; SciFact documents have a title and no
headings or tags; 2.5 was best of 1-4, nDCG@10 0.7096 against 0.7077 unweighted), then
scored once on test (0.6944; 0.6875 before the fields). Headings and tags, which SciFact
lacks, take the title's weight (a heading names what its section is about as a title
names the page), checked on the Hugo docs questions (``eval/questions/hugo-docs.jsonl``,
BM25 alone): hit@5 and hit@10 as before the fields, hit@1 one question fewer, MRR@10 0.391
against 0.390 (0.385 with headings and tags at 1). The figures are in docs/search.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields

from rag_assets.index.fts import FIELDS, TABLE

# From bench/tune_bm25.py on SciFact's train split (see the module docstring); 1.0 is unweighted.
TITLE_WEIGHT = 2.5
HEADINGS_WEIGHT = TITLE_WEIGHT  # not in SciFact: the title's, checked on the Hugo docs questions
TAGS_WEIGHT = TITLE_WEIGHT  # likewise


@dataclass(frozen=True)
class FieldWeights:
    """One weight per column of ``fts_chunks``; the body text is the unit."""

    text: float = 1.0
    title: float = TITLE_WEIGHT
    headings: float = HEADINGS_WEIGHT
    tags: float = TAGS_WEIGHT

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"the {field.name} weight must be a positive number, not {value!r}")

    @classmethod
    def unweighted(cls) -> FieldWeights:
        """Every column counts as body text: plain BM25 over all of a row's words."""
        return cls(1.0, 1.0, 1.0, 1.0)

    def for_columns(self, columns: Sequence[str]) -> tuple[float, ...]:
        """The weights of these columns, in their order; ValueError for an unknown column."""
        known = {field.name for field in fields(self)}
        unknown = [c for c in columns if c not in known]
        if unknown:
            raise ValueError(f"no weight for the column(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return tuple(float(getattr(self, c)) for c in columns)

    def as_tuple(self) -> tuple[float, ...]:
        """In the column order of ``fts_chunks`` (:data:`rag_assets.index.fts.FIELDS`)."""
        return self.for_columns(FIELDS)

    def __str__(self) -> str:
        return "/".join(f"{w:g}" for w in astuple(self))


def bm25_call(table: str = TABLE, n_weights: int = len(FIELDS)) -> str:
    """``bm25(table, ?, ?, ...)``: FTS5's bm25() with one bound weight per column (bound
    parameters, so each weight reaches FTS5 as exactly the double the in-memory BM25 uses)."""
    return f"bm25({table}, {', '.join('?' * n_weights)})"
