"""Reading a BEIR-layout dataset folder: corpus.jsonl, queries.jsonl and qrels/<split>.tsv.

Also EvaluationError, raised across the evaluation package with a message naming the file and the fix.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class EvaluationError(ValueError):
    """The evaluation cannot run as asked (a missing or malformed dataset file, ...); the
    message names the file and what to do."""


@dataclass(frozen=True)
class CorpusDoc:
    id: str
    title: str
    text: str


@dataclass
class BeirDataset:
    """A BEIR-layout dataset: corpus, queries and the qrels of one split."""

    name: str
    root: Path
    split: str
    corpus: list[CorpusDoc]
    queries: dict[str, str]  # query id -> text
    qrels: dict[str, dict[str, int]]  # query id -> {corpus id: relevance}
    corpus_sha256: str

    def judged_queries(self) -> list[str]:
        """Query ids with at least one relevant document in the split and a text, in qrels order."""
        return [q for q, rels in self.qrels.items() if q in self.queries and any(r > 0 for r in rels.values())]


def _need(path: Path, what: str) -> Path:
    if not path.is_file():
        raise EvaluationError(
            f"{path} is missing: a BEIR dataset folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv ({what})"
        )
    return path


def json_lines(path: Path, hint: str = "") -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) of every non-blank line; EvaluationError ``path:line`` on bad JSON."""
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise EvaluationError(f"{path}:{number}: not valid JSON ({exc.msg}){hint}") from None


def _read_jsonl(path: Path, required: Sequence[str]) -> Iterable[dict[str, Any]]:
    for number, row in json_lines(path):
        if not isinstance(row, dict) or any(key not in row for key in required):
            raise EvaluationError(f"{path}:{number}: every line needs the fields {', '.join(required)}")
        yield row


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """``query-id corpus-id score`` rows (tab separated, one header line) -> nested dict."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open("r", encoding="utf-8", newline="") as handle:
        lines = handle.read().splitlines()
    if not lines:
        raise EvaluationError(f"{path} is empty; expected a header 'query-id corpus-id score' and rows")
    header = lines[0].split("\t")
    start = 1 if header and header[0].strip().lower() in ("query-id", "query_id", "qid") else 0
    for number, line in enumerate(lines[start:], start=start + 1):
        if not line.strip():
            continue
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) < 3:
            raise EvaluationError(f"{path}:{number}: expected 'query-id<TAB>corpus-id<TAB>score', got {line!r}")
        try:
            score = int(float(parts[2]))
        except ValueError:
            raise EvaluationError(f"{path}:{number}: score {parts[2]!r} is not a number") from None
        qrels.setdefault(parts[0].strip(), {})[parts[1].strip()] = score
    return qrels


def load_beir(dataset_dir: str | Path, split: str = "test", name: str | None = None) -> BeirDataset:
    """Read a BEIR dataset folder; EvaluationError naming the missing or malformed file."""
    root = Path(dataset_dir).expanduser()
    if not root.is_dir():
        raise EvaluationError(
            f"no dataset folder at {root}: point at a BEIR dataset (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)"
        )
    corpus_path = _need(root / "corpus.jsonl", "the documents: _id, title, text")
    queries_path = _need(root / "queries.jsonl", "the queries: _id, text")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        present = sorted(p.stem for p in (root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
        raise EvaluationError(
            f"{qrels_path} is missing: no qrels for the split {split!r}"
            + (f" (splits present: {', '.join(present)})" if present else " (no qrels/ folder)")
        )
    corpus: list[CorpusDoc] = []
    seen: set[str] = set()
    for row in _read_jsonl(corpus_path, ("_id", "text")):
        doc_id = str(row["_id"])
        if doc_id in seen:
            raise EvaluationError(f"{corpus_path}: the document id {doc_id!r} appears twice")
        seen.add(doc_id)
        corpus.append(CorpusDoc(doc_id, str(row.get("title") or ""), str(row["text"] or "")))
    if not corpus:
        raise EvaluationError(f"{corpus_path} holds no documents")
    queries = {str(row["_id"]): str(row["text"]) for row in _read_jsonl(queries_path, ("_id", "text"))}
    return BeirDataset(
        name=name or root.resolve().name,
        root=root,
        split=split,
        corpus=corpus,
        queries=queries,
        qrels=read_qrels(qrels_path),
        corpus_sha256=file_sha256(corpus_path),
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
