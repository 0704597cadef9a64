"""Retrieval metrics with the BEIR / trec_eval definitions, per query and averaged over a run.

- **nDCG@k**: DCG = sum over the top k of ``rel_i / log2(i + 1)`` (linear gains, as in
  trec_eval's ``ndcg_cut``), divided by the DCG of the ideal ranking of the judged documents.
- **recall@k**: relevant documents (``rel > 0``) in the top k / relevant documents.
- **MRR@k**: 1 / rank of the first relevant document in the top k, else 0.
- **hit@k**: 1 when any relevant document is in the top k, else 0 (the question sets of
  ``rag eval --questions``, judged per page).

As in BEIR (``ignore_identical_ids``), a hit whose ID is the query's own ID is dropped from
the ranking before scoring: where the queries are corpus documents (ArguAna, Quora) a
query finds itself, which says nothing about retrieval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
QUESTION_METRICS = ("hit@1", "hit@5", "hit@10", "mrr@10")


def _relevant(qrels: Mapping[str, int]) -> dict[str, int]:
    return {doc: rel for doc, rel in qrels.items() if rel > 0}


def ndcg_at(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """trec_eval ``ndcg_cut.k``: linear gains, log2(rank + 1) discount, ideal from the qrels."""
    relevant = _relevant(qrels)
    if not relevant:
        return 0.0
    dcg = sum(relevant.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked[:k], start=1))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(rel / math.log2(rank + 1) for rank, rel in enumerate(ideal, start=1))
    return dcg / idcg


def recall_at(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    relevant = _relevant(qrels)
    if not relevant:
        return 0.0
    return len(relevant.keys() & set(ranked[:k])) / len(relevant)


def mrr_at(ranked: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    relevant = _relevant(qrels)
    for rank, doc in enumerate(ranked[:k], start=1):
        if doc in relevant:
            return 1.0 / rank
    return 0.0


def hit_at(ranked: Sequence[str], qrels: Mapping[str, int], k: int) -> float:
    relevant = _relevant(qrels)
    return 1.0 if any(doc in relevant for doc in ranked[:k]) else 0.0


def without_self_hit(ranked: Sequence[str], query_id: str) -> list[str]:
    """``ranked`` less the query's own ID (BEIR's rule: a query retrieving itself is no answer)."""
    return [doc for doc in ranked if doc != query_id]


def score_rankings(
    shallow: Mapping[str, Sequence[str]], deep: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, float]:
    """Mean metrics over the queries of ``shallow``: @10 from ``shallow``, recall@100 from ``deep``.

    A hit on the query's own ID is dropped first, so the documents below it move up.
    """
    ids = list(shallow)
    if not ids:
        return {m: 0.0 for m in METRICS}
    totals = dict.fromkeys(METRICS, 0.0)
    for q in ids:
        rels = qrels[q]
        top = without_self_hit(shallow[q], q)
        deeper = without_self_hit(deep[q], q) if q in deep else top
        totals["ndcg@10"] += ndcg_at(top, rels, 10)
        totals["recall@10"] += recall_at(top, rels, 10)
        totals["recall@100"] += recall_at(deeper, rels, 100)
        totals["mrr@10"] += mrr_at(top, rels, 10)
    return {m: totals[m] / len(ids) for m in METRICS}


def score_questions(rankings: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Mean hit@1, hit@5, hit@10 and MRR@10 over the questions of ``rankings`` (page ids, best first)."""
    if not rankings:
        return {m: 0.0 for m in QUESTION_METRICS}
    totals = dict.fromkeys(QUESTION_METRICS, 0.0)
    for q, ranked in rankings.items():
        rels = qrels[q]
        for k in (1, 5, 10):
            totals[f"hit@{k}"] += hit_at(ranked, rels, k)
        totals["mrr@10"] += mrr_at(ranked, rels, 10)
    return {m: totals[m] / len(rankings) for m in QUESTION_METRICS}
