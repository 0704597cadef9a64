#!/usr/bin/env python3
"""A long-query retrieval set made from SciFact offline: paragraph queries, one answer each.

    .venv/bin/python bench/long_queries.py [--dataset DIR] [--out DIR] [--per-split 300]

**Construction** (the inverse-cloze idea of Lee et al., 2019, with a paragraph instead of
a sentence). Every SciFact abstract of at least two sentences is cut in two at its middle
sentence: the corpus keeps the *second* half under the document's ID, and the *first*
half becomes a candidate query whose only relevant document is that ID. So a query is a
real paragraph of scientific prose (background and methods, 40 words or more), and its
answer shares its topic, not its text: the two halves never overlap, and the answer's own
results and conclusions have to be found from the words the first half happens to share
with them. Abstracts of one sentence stay whole in the corpus (distractors, never
answers). Titles are left out of the whole corpus: a title restates the first half's
topic, and with it both systems found nearly every answer (nDCG@10 0.93-0.95), too easy
to tell them apart.

The queries are split into ``train`` and ``test`` by a hash of the document ID (stable
across runs and machines, independent of the corpus order), ``--per-split`` of each (the
lowest hashes), so that anything tuned on train is scored on queries it never saw.

**ArguAna's shape** (``--shape arguana``): ArguAna itself (1,406 test queries, 8,674
documents, queries that are whole arguments and are themselves in the corpus) cannot be
downloaded here, so it is imitated: 1,406 queries per split, and the query paragraphs
themselves added to the corpus under their query IDs (then the next candidates' first
halves as further distractors) until it holds 8,674 documents. As in ArguAna, a query's
own paragraph is in the corpus and BEIR's rule (``without_self_hit``) drops it from its
results; its answer is the other half.

Output: a BEIR-layout folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/train.tsv``,
``qrels/test.tsv``) that ``rag eval --dataset`` and ``bench/bm25_reference.py`` read;
rewritten only when missing or made from another source file or size.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = ROOT.parent / "shared" / "corpora" / "beir-scifact"
DEFAULT_OUT = Path("/tmp/rag-bench-bm25/scifact-long")
ARGUANA_OUT = Path("/tmp/rag-bench-bm25/scifact-long-arguana")
FORMAT = "scifact-long/2"  # bump when the construction changes (2: no titles)
ARGUANA_QUERIES, ARGUANA_DOCUMENTS = 1406, 8674  # ArguAna's test split and corpus
MIN_QUERY_WORDS = 40
# A sentence ends at . ! or ? followed by space and a capital, a digit or an opening bracket
# (SciFact's sentences are joined by single spaces; "p < 0.05. The" cuts, "e.g. the" does not).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[])")


@dataclass(frozen=True)
class LongQuerySet:
    corpus: list[dict]
    queries: dict[str, str]  # query id -> text
    qrels: dict[str, dict[str, str]]  # split -> {query id: corpus id}


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(text.strip()) if s]


def split_rank(doc_id: str) -> tuple[str, int]:
    """(split, rank within it) from a hash of the ID: even first byte train, odd test."""
    digest = hashlib.sha256(doc_id.encode("utf-8")).digest()
    return ("train" if digest[0] % 2 == 0 else "test"), int.from_bytes(digest[1:9], "big")


def build(corpus_rows: list[dict], per_split: int) -> LongQuerySet:
    corpus: list[dict] = []
    candidates: dict[str, list[tuple[int, str, str]]] = {"train": [], "test": []}
    for row in corpus_rows:
        parts = sentences(row["text"])
        if len(parts) < 2:
            corpus.append({"_id": row["_id"], "title": "", "text": row["text"]})
            continue
        cut = len(parts) // 2
        first, second = " ".join(parts[:cut]), " ".join(parts[cut:])
        corpus.append({"_id": row["_id"], "title": "", "text": second})
        if len(first.split()) >= MIN_QUERY_WORDS:
            split, rank = split_rank(row["_id"])
            candidates[split].append((rank, row["_id"], first))
    queries: dict[str, str] = {}
    qrels: dict[str, dict[str, str]] = {}
    for split, found in candidates.items():
        qrels[split] = {}
        for _, doc_id, text in sorted(found)[:per_split]:
            queries[f"long-{doc_id}"] = text
            qrels[split][f"long-{doc_id}"] = doc_id
    return LongQuerySet(corpus, queries, qrels)


def build_arguana_shaped(
    corpus_rows: list[dict], per_split: int = ARGUANA_QUERIES, documents: int = ARGUANA_DOCUMENTS
) -> LongQuerySet:
    """:func:`build`, then the query paragraphs (train and test), and after them the other
    candidates' first halves, added to the corpus under their query IDs up to ``documents``."""
    made = build(corpus_rows, per_split)
    every = build(corpus_rows, len(corpus_rows))  # all candidates, lowest hashes first per split
    chosen = [q for pairs in made.qrels.values() for q in pairs]
    others = [q for pairs in every.qrels.values() for q in pairs if q not in made.queries]
    room = max(documents - len(made.corpus), 0)
    extra = (chosen + others)[:room]
    corpus = made.corpus + [{"_id": q, "title": "", "text": every.queries[q]} for q in extra]
    return LongQuerySet(corpus, made.queries, made.qrels)


def ensure_long_query_set(
    dataset: Path = DEFAULT_DATASET, out: Path = DEFAULT_OUT, per_split: int = 300, shape: str = "plain"
) -> Path:
    """The BEIR folder of the long-query set under ``out``, written unless already there.
    ``shape``: ``plain`` (:func:`build`) or ``arguana`` (:func:`build_arguana_shaped`, ``per_split`` ignored)."""
    source = dataset / "corpus.jsonl"
    stamp = {"format": FORMAT, "source_sha256": hashlib.sha256(source.read_bytes()).hexdigest(), "per_split": per_split}
    if shape == "arguana":
        stamp = {**stamp, "shape": shape, "per_split": ARGUANA_QUERIES, "documents": ARGUANA_DOCUMENTS}
    marker = out / "SOURCE.json"
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")) == stamp:
        return out
    rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    made = build_arguana_shaped(rows) if shape == "arguana" else build(rows, per_split)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as handle:
        for doc in made.corpus:
            handle.write(json.dumps(doc, ensure_ascii=False) + "\n")
    with (out / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for qid, text in made.queries.items():
            handle.write(json.dumps({"_id": qid, "text": text}, ensure_ascii=False) + "\n")
    for split, pairs in made.qrels.items():
        lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t1" for q, d in pairs.items()]
        (out / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    marker.write_text(json.dumps(stamp), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="the SciFact BEIR folder")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--per-split", type=int, default=300)
    parser.add_argument(
        "--shape",
        choices=("plain", "arguana"),
        default="plain",
        help=f"arguana: {ARGUANA_QUERIES} queries per split, {ARGUANA_DOCUMENTS} documents (default out {ARGUANA_OUT})",
    )
    args = parser.parse_args(argv)
    out = args.out if args.out != DEFAULT_OUT or args.shape == "plain" else ARGUANA_OUT
    out = ensure_long_query_set(args.dataset, out, args.per_split, args.shape)
    documents = sum(1 for line in (out / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())
    print(f"{out}: {documents} documents")
    queries = [json.loads(line)["text"] for line in (out / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    words = sorted(len(q.split()) for q in queries)
    print(
        f"{out}: {len(queries)} queries, words per query min {words[0]}, median {words[len(words) // 2]}, max {words[-1]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
