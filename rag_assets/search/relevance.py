"""Calibrated relevance: a hit's chance of being relevant, comparable across queries.

The fused score ranks one query's candidates against each other (1.0 is always the best
candidate, even for gibberish); it cannot say "there is nothing on this". ``relevance`` can:
a logistic model over features that keep their meaning from one query and one corpus to the
next, fitted on labelled searches (bench/fit_relevance.py: SciFact's train queries, the
shipped question sets, and out-of-domain questions that must find nothing).

Features of a candidate chunk:

- ``cos``: cosine similarity to the query (the embedder's own scale: a model per embedder);
- ``bm25_frac``: its BM25 score over the query's BM25 ceiling, ``sum of idf(t) * (k1 + 1)``
  over the query's terms, the score a chunk would approach by holding every query term
  often. A term no chunk holds has the largest idf, so gibberish has a high ceiling and no
  score: 0. Unlike raw BM25 it does not grow with the query's length or the corpus's size;
- ``cos_gap`` / ``bm25_gap``: how far it trails the query's best candidate on each;
- ``unknown``: the share of the query's distinct terms that no chunk holds. Questions about
  the content rarely use words the content never uses; questions about something else
  ("the rules of cricket" against software docs) usually do.
- ``title``: the share of the query's BM25 ceiling whose terms name the chunk's page, in its
  title, its aliases (a vault note's) or its slug ("restic offsite backups" against the page titled so: 1.0). A page is
  about what its title says; a chunk that only mentions the words often is not.
- ``fused`` (hybrid): the profile's fused score (1.0: the query's best candidate). Like the
  gaps it says nothing across queries; it lets the hybrid model rank one query's candidates as
  the profile's fusion does (z-scores, whose weights change with each query's spread, which no
  fixed mix of ``cos`` and ``bm25_frac`` can follow), so ranking by relevance keeps the
  fusion's SciFact figure (bench/fit_order.py).

A model per embedder (``hashing``, ``local``; ``default`` for the others, which uses no
absolute cosine since each model has its own scale) and per search mode (a BM25-only search
has no cosine; a vector-only one no BM25). The models and their version ship as data
(``relevance_models.json``).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import numpy as np

from rag_assets.search.bm25_terms import query_stems

# Ranks (1/log2 rank in each list, agreement of the two top 10s) were tried and left out: they
# say how a chunk compares with this query's other candidates, not how relevant it is, and
# the models fitted with them separated out-of-domain questions worse (bench/fit_relevance.py).
FEATURES = ("cos", "bm25_frac", "cos_gap", "bm25_gap", "unknown", "title", "fused")
# The features each mode's model may use (a list a mode does not run has no features). A
# model fitted before a feature existed lists the ones it uses and ignores the others.
MODE_FEATURES = {
    "hybrid": FEATURES,
    "vector": ("cos", "cos_gap"),  # a vector search's fused score is its cosine: no "fused"
    "bm25": ("bm25_frac", "bm25_gap", "unknown", "title"),  # its fused score is bm25_frac rescaled
}
K1 = 1.2  # FTS5's bm25() k1: a term's contribution approaches idf * (k1 + 1)


@dataclass(frozen=True)
class LogisticModel:
    """p = sigmoid(intercept + sum(coef[f] * x[f]))."""

    features: tuple[str, ...]
    coef: tuple[float, ...]
    intercept: float

    def predict(self, x: Mapping[str, np.ndarray]) -> np.ndarray:
        z = np.full(len(next(iter(x.values()))), self.intercept, dtype=np.float64)
        for name, w in zip(self.features, self.coef):
            z += w * x[name]
        return 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))

    def to_json(self) -> dict:
        return {
            "features": list(self.features),
            "coef": [round(c, 6) for c in self.coef],
            "intercept": round(self.intercept, 6),
        }


@dataclass(frozen=True)
class RelevanceModels:
    version: str
    models: dict[str, dict[str, LogisticModel]]  # embedder profile -> mode -> model

    def model(self, embedder: str, mode: str) -> LogisticModel:
        per_mode = self.models.get(embedder) or self.models["default"]
        return per_mode[mode]


@lru_cache(maxsize=1)
def shipped_models() -> RelevanceModels:
    """The models shipped with the package (fitted by bench/fit_relevance.py)."""
    text = resources.files("rag_assets.search").joinpath("relevance_models.json").read_text(encoding="utf-8")
    return parse_models(json.loads(text))


def parse_models(data: dict) -> RelevanceModels:
    models = {
        embedder: {
            mode: LogisticModel(tuple(m["features"]), tuple(float(c) for c in m["coef"]), float(m["intercept"]))
            for mode, m in per_mode.items()
        }
        for embedder, per_mode in data["models"].items()
    }
    return RelevanceModels(str(data["version"]), models)


class TermStatistics:
    """Document frequencies of query terms, from the store's FTS5 index through ``fts5vocab``
    (a public interface), cached until the store changes."""

    def __init__(self) -> None:
        self._df: dict[str, int] = {}
        self._stamp: tuple | None = None

    def frequencies(self, conn: sqlite3.Connection, stamp: tuple, terms: Sequence[str]) -> dict[str, int]:
        """Each term's document frequency in ``fts_chunks`` (0: no chunk holds it)."""
        if stamp != self._stamp:
            self._df, self._stamp = {}, stamp
        # This call's own dict: another thread (the HTTP server's) may replace self._df meanwhile.
        df = self._df
        missing = [t for t in dict.fromkeys(terms) if t not in df]
        if missing:
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.rag_vocab_row USING fts5vocab(main, 'fts_chunks', 'row')"
            )
            found: dict[str, int] = {}
            for start in range(0, len(missing), 500):  # under SQLite's limit on bound parameters
                batch = missing[start : start + 500]
                marks = ",".join("?" * len(batch))
                found.update(conn.execute(f"SELECT term, doc FROM temp.rag_vocab_row WHERE term IN ({marks})", batch))
            if len(df) + len(missing) > 100_000:  # bounded: start again with this query's terms
                df = {t: df[t] for t in terms if t in df}
            df.update({term: int(found.get(term, 0)) for term in missing})
            self._df = df
        return {t: df[t] for t in terms}

    def ceiling(
        self,
        conn: sqlite3.Connection,
        stamp: tuple,
        terms: Sequence[str],
        n_rows: int,
        all_terms: Sequence[str] | None = None,
    ) -> tuple[float, float]:
        """(``sum idf(t) * (k1 + 1)`` over the query's terms with FTS5's idf, the share of its
        distinct terms that no chunk holds). ``all_terms``: the query's terms before a long
        query was capped (rag_assets.search.bm25_terms.capped_words); the share of unknown
        terms is read over them, the ceiling over the ``terms`` searched."""
        if not terms or n_rows <= 0:
            return 0.0, 0.0
        every = list(all_terms) if all_terms else list(terms)
        df = self.frequencies(conn, stamp, list(terms) + every)
        total = 0.0
        for term in terms:
            idf = math.log((n_rows - df[term] + 0.5) / (df[term] + 0.5))
            total += max(idf, 1e-6) * (K1 + 1)
        distinct = set(every)
        return total, sum(df[t] == 0 for t in distinct) / len(distinct)

    def term_ceilings(self, conn: sqlite3.Connection, stamp: tuple, terms: Sequence[str], n_rows: int) -> list[float]:
        """Each term's share of the ceiling, ``idf(t) * (k1 + 1)`` with FTS5's idf, in order."""
        if not terms or n_rows <= 0:
            return [0.0] * len(terms)
        df = self.frequencies(conn, stamp, terms)
        return [max(math.log((n_rows - df[t] + 0.5) / (df[t] + 0.5)), 1e-6) * (K1 + 1) for t in terms]


def candidate_features(
    rows: Sequence[int],
    vector: Mapping[int, tuple[int, float]],
    lexical: Mapping[int, tuple[int, float]],
    cosines: Mapping[int, float],
    ceiling: float,
    unknown: float = 0.0,
    title: Sequence[float] | None = None,
    fused: Mapping[int, float] | None = None,
) -> dict[str, np.ndarray]:
    """The features of ``rows`` (see the module docstring), one array per feature; ``title``:
    each row's :func:`title_share` (none: 0); ``fused``: row -> fused score (none: 0)."""
    n = len(rows)
    cos = np.zeros(n)
    bm25 = np.zeros(n)
    for i, row in enumerate(rows):
        v = vector.get(row)
        b = lexical.get(row)
        if v is not None:
            cos[i] = v[1]
        elif row in cosines:
            cos[i] = cosines[row]
        if b is not None:
            bm25[i] = b[1]
    frac = np.clip(bm25 / ceiling, 0.0, 1.0) if ceiling > 0 else np.zeros(n)
    best_cos = max((s for _, s in vector.values()), default=0.0)
    best_frac = min(max((s for _, s in lexical.values()), default=0.0) / ceiling, 1.0) if ceiling > 0 else 0.0
    return {
        "cos": cos,
        "bm25_frac": frac,
        "cos_gap": cos - best_cos if vector else np.zeros(n),
        "bm25_gap": frac - best_frac,
        "unknown": np.full(n, unknown),
        "title": np.asarray(title, dtype=np.float64) if title is not None else np.zeros(n),
        "fused": np.array([fused.get(row, 0.0) for row in rows]) if fused is not None else np.zeros(n),
    }


def title_share(term_shares: Mapping[str, float], ceiling: float, named: frozenset[str]) -> float:
    """The share of ``ceiling`` held by the query's terms (``term_shares``: each distinct term's
    part of the ceiling, repeats summed) that are in ``named``, the stems of a page's title and slug."""
    if ceiling <= 0:
        return 0.0
    return min(sum(share for term, share in term_shares.items() if term in named) / ceiling, 1.0)


def weighted(relevance: float, weight: float) -> float:
    """``relevance`` with a collection's priority ``weight`` multiplying its odds: p / (1 - p)
    becomes w * p / (1 - p). Weight 1 changes nothing, the result stays in [0, 1], and a weight
    moves an uncertain hit more than a sure one (0.5 at weight 1.5 is 0.6; 0.95 is 0.966)."""
    if weight == 1.0:
        return relevance
    boosted = weight * relevance
    denominator = boosted + 1.0 - relevance
    return boosted / denominator if denominator > 0 else 0.0


def title_shares(
    document_ids: Sequence[str],
    documents: Mapping[str, Mapping],
    cache: dict[str, frozenset[str]],
    words: Sequence[str],
    shares: Sequence[float],
    ceiling: float,
) -> list[float]:
    """The ``title`` feature of candidates of these documents (one per entry of ``document_ids``):
    ``words``, the query's terms, with ``shares``, their parts of ``ceiling``. Computed once per
    document; each document's title, alias and slug stems are kept in ``cache`` (per loaded store)."""
    term_shares: dict[str, float] = {}
    for term, share in zip(words, shares):
        term_shares[term] = term_shares.get(term, 0.0) + share
    per_document: dict[str, float] = {}
    for doc_id in dict.fromkeys(document_ids):
        named = cache.get(doc_id)
        if named is None:
            doc = documents.get(doc_id, {})
            slug = str(doc.get("slug", "")).replace("/", " ").replace("-", " ").replace("_", " ")
            aliases = " ".join(doc.get("aliases", ()))  # a vault note's aliases name it too
            named = cache[doc_id] = frozenset(query_stems(f"{doc.get('title', '')} {aliases} {slug}"))
        per_document[doc_id] = title_share(term_shares, ceiling, named)
    return [per_document[doc_id] for doc_id in document_ids]
