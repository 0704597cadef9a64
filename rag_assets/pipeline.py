"""The build steps the Dagster assets call, one function per asset.

Kept free of Dagster so that the same steps run in tests, benchmarks and any
other orchestrator; the assets add partitions, metadata and logging around them.
"""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from rag_assets.base.work_pool import WorkPool
from rag_assets.config import RagConfig
from rag_assets.config.settings import ChunkingParams
from rag_assets.embed import Embedder, EmbeddingBatchError
from rag_assets.embed.cache import EmbeddingCache
from rag_assets.embed.http import RemoteEmbedder, Usage
from rag_assets.ingest.chunking import chunk_document
from rag_assets.ingest.doc_cache import DocumentCache
from rag_assets.ingest.shards import Shard
from rag_assets.records import Chunk, ChunkedCollection, Document, EmbeddedCollection, ParsedCollection

Log = Callable[[str], None]


def utc_now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# What the worker processes of a build import once, in their forkserver: the parser and chunker.
WORK_MODULES = ("rag_assets.ingest.parsing", "rag_assets.ingest.chunking")


def build_pool(cfg: RagConfig) -> WorkPool:
    """The worker processes that parse and chunk for one step (rag.yaml's ``workers``), started
    only when a collection has enough new or changed files to pay for them."""
    return WorkPool(cfg.workers, preload=WORK_MODULES)


def chunk_collection(
    parsed: ParsedCollection, params: ChunkingParams, cache: DocumentCache | None = None, pool: WorkPool | None = None
) -> ChunkedCollection:
    """Chunk every new or changed document (reusing the chunks of unchanged ones); bodies
    are dropped afterwards since only chunks travel on. ``pool``: the new and changed documents
    are chunked in its worker processes (rag_assets.base.work_pool), to the same chunks."""
    to_chunk = [doc for doc in parsed.documents if doc.path not in parsed.cached_chunks]
    made = iter((pool or WorkPool(1)).map(functools.partial(chunk_document, params=params), to_chunk))
    chunks = []
    documents = []
    fresh: list[tuple[Document, list[Chunk]]] = []
    for doc in parsed.documents:
        doc_chunks = parsed.cached_chunks.get(doc.path)
        if doc_chunks is None:
            doc_chunks = next(made)
            fresh.append((doc, doc_chunks))
        chunks.extend(doc_chunks)
        documents.append(replace(doc, body=""))
    if cache is not None:
        cache.store(fresh)
        # A shard forgets only its own departed files: the other shards' ones are not its to judge.
        shard = Shard(parsed.collection, parsed.shard.index, parsed.shard.count) if parsed.shard else None
        cache.prune(parsed.collection, {d.path for d in parsed.documents}, shard.holds if shard else None)
    return ChunkedCollection(
        collection=parsed.collection,
        content_hash=parsed.content_hash,
        documents=documents,
        chunks=chunks,
        skipped=list(parsed.skipped),
        shard=parsed.shard,
    )


@dataclass
class EmbeddingStats:
    """What one collection's embedding run cost, for the asset metadata."""

    batches: int = 0
    failed_batches: int = 0
    seconds: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    requests: int = 0
    retries: int = 0
    tokens: int = 0
    errors: list[str] = field(default_factory=list)


def embed_collection(
    chunked: ChunkedCollection,
    embedder: Embedder,
    *,
    cache: EmbeddingCache | None = None,
    batch_size: int = 50,
    provider: str | None = None,
    log: Log = lambda _: None,
) -> tuple[EmbeddedCollection, EmbeddingStats]:
    """Embed every chunk not already in the cache, in batches, logging progress per batch.

    A batch that fails after its retries is logged and left out: its chunks are listed
    in ``failed_chunk_ids`` and, since they are not cached, the next run retries exactly
    them. An authentication error stops the run at once.
    """
    stats = EmbeddingStats()
    started = time.perf_counter()
    prepare = getattr(embedder, "prepare_document", lambda text: text)
    sent_texts = [prepare(c.text) for c in chunked.chunks]
    cached: dict[int, np.ndarray] = cache.get_many(embedder.model, embedder.dimension, sent_texts) if cache else {}
    stats.cache_hits = len(cached)
    # Every vector goes straight into its row of one float32 matrix (as np.vstack(...).astype
    # would have made it), rather than a dict of row arrays stacked at the end: that held
    # each vector twice, plus an array object per chunk.
    matrix = np.zeros((len(chunked.chunks), embedder.dimension), dtype=np.float32)
    have = np.zeros(len(chunked.chunks), dtype=bool)
    for i, vector in cached.items():
        matrix[i], have[i] = vector, True
    del cached
    missing = [i for i in range(len(chunked.chunks)) if not have[i]]
    stats.cache_misses = len(missing)
    if stats.cache_hits:
        log(f"[{chunked.collection}] {stats.cache_hits} chunks from the embedding cache, {len(missing)} to embed")
    usage_before = _usage(embedder)
    batches = [missing[i : i + batch_size] for i in range(0, len(missing), batch_size)]
    stats.batches = len(batches)
    failed: list[int] = []
    # Cached in groups, not per batch (embed/cache.py, CacheWriter); what was embedded is
    # written even when a later batch raises.
    writer = cache.writer(embedder.model) if cache else None
    try:
        for number, positions in enumerate(batches, start=1):
            texts = [chunked.chunks[i].text for i in positions]
            t0 = time.perf_counter()
            label = f"{number}/{len(batches)} of {chunked.collection}"
            try:
                batch_vectors = (
                    embedder.embed_documents(texts, batch_label=label)  # names the batch in its errors
                    if isinstance(embedder, RemoteEmbedder)
                    else embedder.embed_documents(texts)
                )
                _check_vectors(batch_vectors, len(texts), embedder, number)
            except EmbeddingBatchError as exc:
                stats.failed_batches += 1
                stats.errors.append(str(exc))
                failed.extend(positions)
                log(
                    f"[{chunked.collection}] Batch {number}/{len(batches)}: FAILED, {len(texts)} chunks left for the next run: {exc}"
                )
                continue
            if writer:
                writer.add([sent_texts[i] for i in positions], batch_vectors)
            matrix[positions] = batch_vectors
            have[positions] = True
            log(
                f"[{chunked.collection}] Batch {number}/{len(batches)}: "
                f"{len(texts)} chunks embedded ({time.perf_counter() - t0:.1f}s)"
            )
    finally:
        if writer:
            writer.flush()
    usage_after = _usage(embedder)  # there is one when there was one before
    usage = usage_after.since(usage_before) if usage_before and usage_after else None
    if usage:
        stats.requests, stats.retries, stats.tokens = usage.requests, usage.retries, usage.tokens
    kept = [i for i in range(len(chunked.chunks)) if have[i]]
    if len(kept) < len(chunked.chunks):
        matrix = matrix[kept] if kept else np.zeros((0, embedder.dimension), dtype=np.float32)
    stats.seconds = time.perf_counter() - started
    embedded = EmbeddedCollection(
        collection=chunked.collection,
        content_hash=chunked.content_hash,
        documents=chunked.documents,
        chunks=[chunked.chunks[i] for i in kept],
        vectors=matrix,
        model=embedder.model,
        dimension=embedder.dimension,
        skipped=list(chunked.skipped),
        provider=provider or getattr(embedder, "provider", None) or "custom",
        failed_chunk_ids=[chunked.chunks[i].id for i in failed],
        shard=chunked.shard,
    )
    return embedded, stats


def _usage(embedder: Embedder) -> Usage | None:
    usage = getattr(embedder, "usage", None)
    return usage.snapshot() if isinstance(usage, Usage) else None


def _check_vectors(vectors: np.ndarray, expected: int, embedder: Embedder, batch: int) -> None:
    """A wrong-shaped or non-finite answer must fail loudly, never become a silent bad index."""
    if vectors.shape != (expected, embedder.dimension):
        raise EmbeddingBatchError(
            f"embedder {embedder.model} returned shape {vectors.shape} for batch {batch}, "
            f"expected ({expected}, {embedder.dimension})"
        )
    if not np.isfinite(vectors).all():
        raise EmbeddingBatchError(f"embedder {embedder.model} returned non-finite values for batch {batch}")


def reembed_collection(
    record: EmbeddedCollection,
    embedder: Embedder,
    *,
    cache: EmbeddingCache | None = None,
    batch_size: int = 50,
    provider: str | None = None,
    log: Log = lambda _: None,
) -> tuple[EmbeddedCollection, EmbeddingStats]:
    """``record``'s chunks embedded again with ``embedder`` (its chunks and documents as they
    are): a record of another model, brought to the index's one model before a publish."""
    chunked = ChunkedCollection(
        collection=record.collection,
        content_hash=record.content_hash,
        documents=record.documents,
        chunks=record.chunks,
        skipped=list(record.skipped),
        shard=record.shard,
    )
    return embed_collection(chunked, embedder, cache=cache, batch_size=batch_size, provider=provider, log=log)


def reembed_other_models(
    records: Mapping[str, EmbeddedCollection],
    embedder: Embedder,
    *,
    cache: EmbeddingCache | None = None,
    batch_size: int = 50,
    provider: str | None = None,
) -> dict[str, EmbeddedCollection]:
    """``records`` with every record of another model or dimension than ``embedder``'s embedded
    again (through ``cache``), the others as they are: one index holds one model."""
    return {
        key: record
        if (record.model, record.dimension) == (embedder.model, embedder.dimension)
        else reembed_collection(record, embedder, cache=cache, batch_size=batch_size, provider=provider)[0]
        for key, record in records.items()
    }


@dataclass(frozen=True)
class CollectionPlan:
    """What a build of one collection would do (``rag build --dry-run``)."""

    collection: str
    documents_to_parse: int
    chunks: int
    chunks_to_embed: int


def plan_collection(cfg: RagConfig, collection: str, files: dict[str, str], embedder: Embedder) -> CollectionPlan:
    """Parse and chunk in memory, count chunk texts not in the embedding cache; writes nothing."""
    from rag_assets.ingest.boundaries import collection_policy
    from rag_assets.ingest.parsing import parse_collection

    reuse = (
        DocumentCache(cfg.document_cache_path, cfg.chunking).lookup(collection, files)
        if cfg.document_cache_path.is_file()
        else {}
    )
    parsed = parse_collection(cfg.content_dir, collection, "", reuse, policy=collection_policy(cfg))
    chunked = chunk_collection(parsed, cfg.chunking, cache=None)
    prepare = getattr(embedder, "prepare_document", lambda text: text)
    texts = [prepare(c.text) for c in chunked.chunks]
    cached = (
        EmbeddingCache(cfg.embedding_cache_path).get_many(embedder.model, embedder.dimension, texts)
        if cfg.embedding_cache_path.is_file()
        else {}
    )
    return CollectionPlan(collection, len(parsed.documents) - len(reuse), len(texts), len(texts) - len(cached))
