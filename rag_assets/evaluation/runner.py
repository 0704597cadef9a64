"""Retrieval quality on a BEIR dataset: nDCG@10, recall@10, recall@100 and MRR@10 per search mode.

The corpus is indexed *as a collection*, through the same steps a build runs (documents ->
:func:`~rag_assets.pipeline.chunk_collection` -> :func:`~rag_assets.pipeline.embed_collection`
with the project's embedding cache -> :func:`~rag_assets.index.store.replace_contents`), into
``<data_dir>/eval/<dataset>-<model>.db``. The store is rebuilt only when the corpus file, the
chunking parameters or the model changed (the ``sources`` row of the collection records a
hash of the first two, ``embeddings_meta`` the model), so a re-run costs seconds.

Every query of the split is then searched with :class:`~rag_assets.search.retrieval.SearchIndex`
(``log_searches=False``) in the three modes. Chunk hits become documents (a document scores
its best chunk; the first occurrence in the ranked list keeps its place) and are scored with
the BEIR / trec_eval definitions:

- **nDCG@k**: DCG = sum over the top k of ``rel_i / log2(i + 1)`` (linear gains, as in
  trec_eval's ``ndcg_cut``), divided by the DCG of the ideal ranking of the judged documents.
- **recall@k**: relevant documents (``rel > 0``) in the top k / relevant documents.
- **MRR@k**: 1 / rank of the first relevant document in the top k, else 0.

Queries without a relevant judgement in the split are skipped (counted in the info).

Depth: the @10 metrics come from the search exactly as configured (``params.candidates``
per list, ``params.min_score``; ``k`` raised to ``candidates``, since the top ten chunks may
hold fewer than ten documents). recall@100 comes from a deeper search (each list ``depth``
chunks deep, no score floor), so that a small ``candidates`` does not cap it. For bm25 and
vector only the deep search runs: a single list's shallower ranking is exactly its head.

Plain Python, no Dagster: ``rag_assets.defs.evaluation`` wraps it as an asset, and
``bench/tune_fusion.py`` runs the fusion grid with :class:`Evaluator`.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from rag_assets.index import store
from rag_assets.config import RagConfig
from rag_assets.embed.base import Embedder
from rag_assets.embed.cache import EmbeddingCache
from rag_assets.embed.selection import select_embedder
from rag_assets.pipeline import chunk_collection, embed_collection, utc_now_iso
from rag_assets.records import Document, ParsedCollection
from rag_assets.search.retrieval import SearchIndex, SearchParams

Log = Callable[[str], None]

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")
EVAL_MODES = ("bm25", "vector", "hybrid")
# Chunks each list reaches in the deep search that recall@100 is read from.
DEFAULT_DEPTH = 300
# Bumped when the way a corpus becomes documents changes, so old eval stores are rebuilt.
INDEX_FORMAT = "rag-assets-eval/1"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class EvaluationError(ValueError):
    """The evaluation cannot run as asked (a missing or malformed dataset file, ...); the
    message names the file and what to do."""


# --------------------------------------------------------------------------- dataset


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


def _read_jsonl(path: Path, required: Sequence[str]) -> Iterable[dict[str, Any]]:
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise EvaluationError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
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


# --------------------------------------------------------------------------- metrics


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


def score_rankings(
    shallow: Mapping[str, Sequence[str]], deep: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]
) -> dict[str, float]:
    """Mean metrics over the queries of ``shallow``: @10 from ``shallow``, recall@100 from ``deep``."""
    ids = list(shallow)
    if not ids:
        return {m: 0.0 for m in METRICS}
    totals = dict.fromkeys(METRICS, 0.0)
    for q in ids:
        rels = qrels[q]
        top = shallow[q]
        totals["ndcg@10"] += ndcg_at(top, rels, 10)
        totals["recall@10"] += recall_at(top, rels, 10)
        totals["recall@100"] += recall_at(deep.get(q, top), rels, 100)
        totals["mrr@10"] += mrr_at(top, rels, 10)
    return {m: totals[m] / len(ids) for m in METRICS}


# --------------------------------------------------------------------------- indexing


def safe_name(text: str) -> str:
    """``text`` reduced to letters, digits, ``.``, ``_`` and ``-`` (lowercase)."""
    return _UNSAFE.sub("-", text).strip("-.").lower() or "x"


def slugs_for(corpus: Sequence[CorpusDoc]) -> dict[str, str]:
    """Corpus id -> a slug-safe, unique slug (``-2``, ``-3``... on a collision after cleaning)."""
    taken: set[str] = set()
    slugs: dict[str, str] = {}
    for doc in corpus:
        base = _UNSAFE.sub("-", doc.id).strip("-.") or "doc"
        slug, n = base, 1
        while slug in taken:
            n += 1
            slug = f"{base}-{n}"
        taken.add(slug)
        slugs[doc.id] = slug
    return slugs


def corpus_documents(dataset: BeirDataset, collection: str, slugs: Mapping[str, str]) -> list[Document]:
    """Each corpus entry as a Document of ``collection`` (title -> title, text -> body)."""
    return [
        Document(
            collection=collection,
            slug=slugs[doc.id],
            path=f"{slugs[doc.id]}.md",
            title=" ".join(doc.title.split()),
            description="",
            tags=[],
            frontmatter={"corpus_id": doc.id},
            body=doc.text,
            updated_at="1970-01-01T00:00:00Z",
            content_sha256=hashlib.sha256(f"{doc.title}\n{doc.text}".encode("utf-8")).hexdigest(),
        )
        for doc in dataset.corpus
    ]


def index_hash(dataset: BeirDataset, cfg: RagConfig) -> str:
    """What the eval store was built from: corpus bytes, chunking, the document format."""
    key = json.dumps([INDEX_FORMAT, dataset.corpus_sha256, asdict(cfg.chunking)], sort_keys=True)
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def eval_store_path(cfg: RagConfig, dataset_name: str, model: str) -> Path:
    return cfg.data_dir / "eval" / f"{safe_name(dataset_name)}-{safe_name(model)}.db"


@dataclass(frozen=True)
class IndexInfo:
    path: Path
    rebuilt: bool
    documents: int
    chunks: int
    seconds: float
    cache_hits: int = 0
    embedded: int = 0


def ensure_eval_store(
    cfg: RagConfig, dataset: BeirDataset, embedder: Embedder, *, provider: str | None = None, log: Log = lambda _: None
) -> IndexInfo:
    """The eval store of this corpus and model, (re)built only when either changed."""
    started = time.perf_counter()
    collection = safe_name(dataset.name)
    path = eval_store_path(cfg, dataset.name, embedder.model)
    wanted = index_hash(dataset, cfg)
    summary = store.summarise(path)
    if (
        summary is not None
        and summary.model == embedder.model
        and summary.dimension == embedder.dimension
        and store.read_sources(path).get(collection) == wanted
        and summary.chunks > 0
    ):
        log(f"[{collection}] eval store up to date: {path} ({summary.documents} documents, {summary.chunks} chunks)")
        return IndexInfo(path, False, summary.documents, summary.chunks, time.perf_counter() - started)
    why = "no store yet" if summary is None else "the corpus, chunking or model changed"
    log(f"[{collection}] building the eval store {path} ({why}): {len(dataset.corpus)} documents")
    documents = corpus_documents(dataset, collection, slugs_for(dataset.corpus))
    parsed = ParsedCollection(collection=collection, content_hash=wanted, documents=documents)
    chunked = chunk_collection(parsed, cfg.chunking)
    log(f"[{collection}] {len(chunked.chunks)} chunks; embedding with {embedder.model}")
    embedded, stats = embed_collection(
        chunked,
        embedder,
        cache=EmbeddingCache(cfg.embedding_cache_path),
        batch_size=cfg.embedding.batch_size,
        provider=provider,
        log=log,
    )
    if embedded.failed_chunk_ids:
        raise EvaluationError(
            f"{len(embedded.failed_chunk_ids)} chunks could not be embedded ({'; '.join(stats.errors[:3])}); "
            "the embedded ones are cached, so a re-run retries only the rest"
        )
    store.replace_contents(
        path, [embedded], model=embedder.model, dimension=embedder.dimension, built_at=utc_now_iso(),
        provider=embedded.provider,
    )
    seconds = time.perf_counter() - started
    log(f"[{collection}] eval store written in {seconds:.1f}s ({stats.cache_hits} cached, {stats.cache_misses} embedded)")
    return IndexInfo(path, True, len(documents), len(embedded.chunks), seconds, stats.cache_hits, stats.cache_misses)


# --------------------------------------------------------------------------- searching


def documents_of(hits: Iterable[tuple[str, float]]) -> list[str]:
    """Chunk hits (best first) -> corpus ids, each at its best chunk's place."""
    seen: dict[str, None] = {}
    for doc, _ in hits:
        if doc and doc not in seen:
            seen[doc] = None
    return list(seen)


class _QueryMemo:
    """The embedder, with each query's vector computed once (three modes, many settings)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self._vectors: dict[str, np.ndarray] = {}

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        vector = self._vectors.get(text)
        if vector is None:
            vector = self._vectors[text] = np.asarray(self.inner.embed_query(text), dtype=np.float32)
        return vector


def _neutral(params: SearchParams, mode: str) -> SearchParams:
    """Params whose fusion fields cannot change a single-list mode's ranking, for caching."""
    if mode == "hybrid":
        return params
    base = SearchParams()
    return replace(params, fusion=base.fusion, rrf_k=base.rrf_k, vector_weight=base.vector_weight, bm25_weight=base.bm25_weight)


class Evaluator:
    """One eval store and dataset, searchable repeatedly with different params (the tuning grid)."""

    def __init__(
        self,
        store_path: Path,
        dataset: BeirDataset,
        embedder: Embedder,
        *,
        depth: int = DEFAULT_DEPTH,
        qrels: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        if depth < 100:
            raise ValueError("depth must be at least 100 (recall@100)")
        self.dataset = dataset
        self.embedder = _QueryMemo(embedder)
        self.index = SearchIndex(store_path, log_searches=False)
        self.depth = depth
        prefix = f"{safe_name(dataset.name)}/"
        slugs = slugs_for(dataset.corpus)
        self.corpus_id_of = {prefix + slug: doc_id for doc_id, slug in slugs.items()}
        self._runs: dict[tuple, dict[str, list[tuple[str, float]]]] = {}
        self.use_qrels(qrels if qrels is not None else dataset.qrels)

    def use_qrels(self, qrels: Mapping[str, Mapping[str, int]]) -> None:
        """Evaluate against these judgements from now on (another split of the same corpus)."""
        self.qrels = {q: dict(r) for q, r in qrels.items()}
        self.query_ids = [q for q, r in self.qrels.items() if q in self.dataset.queries and any(v > 0 for v in r.values())]
        self.skipped_queries = len(self.qrels) - len(self.query_ids)

    def chunk_hits(self, query_id: str, params: SearchParams) -> list[tuple[str, float]]:
        """(corpus id, score) of every chunk hit, best first, as SearchIndex returns them."""
        result = self.index.search(self.dataset.queries[query_id], self.embedder, params)
        return [(self.corpus_id_of.get(hit.document_id, ""), hit.score) for hit in result.hits]

    def ranking(self, query_id: str, params: SearchParams) -> list[str]:
        """Corpus ids, best first (each document at its best chunk)."""
        return documents_of(self.chunk_hits(query_id, params))

    def _run(self, params: SearchParams) -> dict[str, list[tuple[str, float]]]:
        key = (_neutral(params, params.mode), tuple(self.query_ids))
        run = self._runs.get(key)
        if run is None:
            run = {q: self.chunk_hits(q, params) for q in self.query_ids}
            self._runs[key] = run
        return run

    def mode_params(self, params: SearchParams, mode: str) -> tuple[SearchParams, SearchParams]:
        """The search as configured (k raised to its candidates), and the deep one recall@100
        is read from (the same search when the configured one already reaches ``depth``)."""
        base = replace(params, mode=mode, collection_weights=False, mmr_lambda=None, max_per_document=None)
        shallow = replace(base, k=min(base.candidates, 1000))
        if shallow.k >= self.depth and shallow.min_score == -math.inf:
            return shallow, shallow
        # No floor at all: a vector search scores raw cosines, which may be negative.
        return shallow, replace(base, k=self.depth, candidates=max(base.candidates, self.depth), min_score=-math.inf)

    def rankings(self, params: SearchParams, mode: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """Per query, the documents of the configured search and of the deep one."""
        shallow_params, deep_params = self.mode_params(params, mode)
        deep = self._run(deep_params)
        if shallow_params == deep_params:
            shallow = deep
        elif mode == "hybrid":
            shallow = self._run(shallow_params)
        else:
            # One list, no fusion: a shallower search returns exactly the deep one's first
            # `candidates` chunks (same scores), less those under min_score.
            n, floor = shallow_params.k, shallow_params.min_score
            shallow = {q: [h for h in hits[:n] if h[1] >= floor] for q, hits in deep.items()}
        return (
            {q: documents_of(hits) for q, hits in shallow.items()},
            {q: documents_of(hits) for q, hits in deep.items()},
        )

    def evaluate(self, params: SearchParams = SearchParams(), modes: Sequence[str] = EVAL_MODES) -> dict[str, dict[str, float]]:
        """``{mode: {metric: mean}}`` over the judged queries."""
        out: dict[str, dict[str, float]] = {}
        for mode in modes:
            shallow, deep = self.rankings(params, mode)
            out[mode] = score_rankings(shallow, deep, self.qrels)
        return out

    def close(self) -> None:
        self.index.close()


# --------------------------------------------------------------------------- entry point


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


def select_eval_embedder(cfg: RagConfig, embedder_name: str | None) -> tuple[Embedder, str]:
    settings = cfg.embedding if not embedder_name else replace(cfg.embedding, name=embedder_name)
    selection = select_embedder(settings)
    return selection.embedder, selection.provider


def run_evaluation(
    cfg: RagConfig,
    dataset_dir: str | Path,
    split: str = "test",
    embedder_name: str | None = None,
    params: SearchParams = SearchParams(),
    *,
    depth: int = DEFAULT_DEPTH,
    log: Log = lambda _: None,
    embedder: Embedder | None = None,
    provider: str | None = None,
) -> EvalReport:
    """Index the dataset's corpus (or reuse its store) and score bm25, vector and hybrid search.

    ``embedder_name`` picks the provider (None or "": the configured one); an ``embedder``
    object, if given, is used as it is.
    """
    started = time.perf_counter()
    dataset = load_beir(dataset_dir, split)
    if not dataset.judged_queries():
        raise EvaluationError(f"no query of qrels/{split}.tsv has a relevant document and a text in queries.jsonl")
    owned = embedder is None
    if embedder is None:
        embedder, provider = select_eval_embedder(cfg, embedder_name)
    provider = provider or getattr(embedder, "provider", "custom")
    try:
        log(f"evaluating {dataset.name} ({split}) with {provider}: {embedder.model}")
        built = ensure_eval_store(cfg, dataset, embedder, provider=provider, log=log)
        evaluator = Evaluator(built.path, dataset, embedder, depth=depth)
        t0 = time.perf_counter()
        try:
            metrics = evaluator.evaluate(params)
        finally:
            evaluator.close()
        search_seconds = time.perf_counter() - t0
    finally:
        close = getattr(embedder, "close", None) if owned else None
        if close is not None:
            close()
    info = EvalInfo(
        dataset=dataset.name,
        split=split,
        queries=len(evaluator.query_ids),
        model=embedder.model,
        provider=provider,
        seconds=round(time.perf_counter() - started, 3),
        index_seconds=round(built.seconds, 3),
        search_seconds=round(search_seconds, 3),
        store_path=str(built.path),
        rebuilt=built.rebuilt,
        documents=built.documents,
        chunks=built.chunks,
        skipped_queries=evaluator.skipped_queries,
        params={k: v for k, v in asdict(params).items() if v not in (None, (), [])},
    )
    log(f"{info.queries} queries x 3 modes searched in {search_seconds:.1f}s")
    return EvalReport(metrics, info)


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
