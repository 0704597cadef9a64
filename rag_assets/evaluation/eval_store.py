"""The eval store: a BEIR corpus indexed as one collection, through the same steps a build runs.

Documents -> :func:`~rag_assets.pipeline.chunk_collection` -> :func:`~rag_assets.pipeline.embed_collection`
(with the project's embedding cache) -> :func:`~rag_assets.index.store.replace_contents`, into
``<data_dir>/eval/<dataset>-<model>.db``. The store is rebuilt only when the corpus file, the
chunking parameters or the model changed (the ``sources`` row of the collection records a
hash of the first two, ``embeddings_meta`` the model), so a re-run costs seconds.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rag_assets.config import RagConfig
from rag_assets.embed.base import Embedder
from rag_assets.embed.cache import EmbeddingCache
from rag_assets.evaluation.datasets import BeirDataset, CorpusDoc, EvaluationError
from rag_assets.index import store
from rag_assets.pipeline import chunk_collection, embed_collection, utc_now_iso
from rag_assets.records import Document, ParsedCollection

Log = Callable[[str], None]

# Bumped when the way a corpus becomes documents changes, so old eval stores are rebuilt.
INDEX_FORMAT = "rag-assets-eval/1"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


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
            content_sha256=hashlib.sha256(f"{doc.title}\n{doc.text}".encode()).hexdigest(),
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
        path,
        [embedded],
        model=embedder.model,
        dimension=embedder.dimension,
        built_at=utc_now_iso(),
        provider=embedded.provider,
    )
    seconds = time.perf_counter() - started
    log(
        f"[{collection}] eval store written in {seconds:.1f}s ({stats.cache_hits} cached, {stats.cache_misses} embedded)"
    )
    return IndexInfo(path, True, len(documents), len(embedded.chunks), seconds, stats.cache_hits, stats.cache_misses)
