"""The build steps the Dagster assets call, one function per asset.

Kept free of Dagster so that the same steps run in tests, benchmarks and any
other orchestrator; the assets add partitions, metadata and logging around them.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping

import numpy as np

from rag_assets import index_json, manifest, store
from rag_assets.chunking import ChunkingParams, chunk_document
from rag_assets.config import RagConfig
from rag_assets.embedders import Embedder
from rag_assets.records import ChunkedCollection, EmbeddedCollection, ParsedCollection
from rag_assets.sources import overall_content_hash

Log = Callable[[str], None]


def utc_now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def chunk_collection(parsed: ParsedCollection, params: ChunkingParams) -> ChunkedCollection:
    """Chunk every document; bodies are dropped afterwards since only chunks travel on."""
    chunks = []
    documents = []
    for doc in parsed.documents:
        chunks.extend(chunk_document(doc, params))
        documents.append(replace(doc, body=""))
    return ChunkedCollection(
        collection=parsed.collection,
        content_hash=parsed.content_hash,
        documents=documents,
        chunks=chunks,
        skipped=list(parsed.skipped),
    )


@dataclass(frozen=True)
class EmbeddingStats:
    batches: int
    seconds: float


def embed_collection(
    chunked: ChunkedCollection, embedder: Embedder, *, batch_size: int = 50, log: Log = lambda _: None
) -> tuple[EmbeddedCollection, EmbeddingStats]:
    """Embed every chunk in batches, logging progress per batch."""
    texts = [c.text for c in chunked.chunks]
    total_batches = max(1, -(-len(texts) // batch_size)) if texts else 0
    parts: list[np.ndarray] = []
    started = time.perf_counter()
    for number, start in enumerate(range(0, len(texts), batch_size), start=1):
        batch = texts[start : start + batch_size]
        t0 = time.perf_counter()
        vectors = embedder.embed_documents(batch)
        _check_vectors(vectors, len(batch), embedder, number)
        parts.append(vectors)
        log(
            f"[{chunked.collection}] Batch {number}/{total_batches}: "
            f"{len(batch)} chunks embedded ({time.perf_counter() - t0:.1f}s)"
        )
    matrix = np.vstack(parts) if parts else np.zeros((0, embedder.dimension), dtype=np.float32)
    embedded = EmbeddedCollection(
        collection=chunked.collection,
        content_hash=chunked.content_hash,
        documents=chunked.documents,
        chunks=chunked.chunks,
        vectors=matrix.astype(np.float32, copy=False),
        model=embedder.model,
        dimension=embedder.dimension,
        skipped=list(chunked.skipped),
    )
    return embedded, EmbeddingStats(batches=total_batches, seconds=time.perf_counter() - started)


def _check_vectors(vectors: np.ndarray, expected: int, embedder: Embedder, batch: int) -> None:
    """A wrong-shaped or non-finite answer must fail loudly, never become a silent bad index."""
    if vectors.shape != (expected, embedder.dimension):
        raise ValueError(
            f"embedder {embedder.model} returned shape {vectors.shape} for batch {batch}, "
            f"expected ({expected}, {embedder.dimension})"
        )
    if not np.isfinite(vectors).all():
        raise ValueError(f"embedder {embedder.model} returned non-finite values for batch {batch}")


class MixedModelsError(ValueError):
    """Collections embedded with different models cannot share one index."""


def index_model(collections: Iterable[EmbeddedCollection]) -> tuple[str, int]:
    """The one model and dimension of all collections; mixing them is refused."""
    models = {(c.model, c.dimension) for c in collections}
    if len(models) > 1:
        listed = ", ".join(sorted(f"{m} ({d})" for m, d in models))
        raise MixedModelsError(
            f"collections were embedded with different models: {listed}; "
            "rebuild every collection with one embedder (rag build)"
        )
    if not models:
        raise ValueError("no collection has been embedded yet; run a build of at least one collection")
    return next(iter(models))


def content_hash_of(collections: Iterable[EmbeddedCollection]) -> str:
    return overall_content_hash({c.collection: c.content_hash for c in collections})


@dataclass(frozen=True)
class PublishedIndex:
    header: index_json.IndexHeader
    index_bytes: int
    meta_bytes: int


def publish_index(collections: list[EmbeddedCollection], cfg: RagConfig, built_at: str) -> PublishedIndex:
    model, dimension = index_model(collections)
    header = index_json.index_header(
        collections, model=model, dimension=dimension, built_at=built_at, content_hash=content_hash_of(collections)
    )
    index_bytes, meta_bytes = index_json.write_index(
        cfg.index_path, cfg.meta_path, header, collections, cfg.vector_decimals
    )
    return PublishedIndex(header, index_bytes, meta_bytes)


def publish_store(collections: list[EmbeddedCollection], cfg: RagConfig, built_at: str) -> store.StoreSummary:
    model, dimension = index_model(collections)
    store.replace_contents(cfg.public_store_path, collections, model=model, dimension=dimension, built_at=built_at)
    summary = store.summarise(cfg.public_store_path)
    assert summary is not None
    return summary


def publish_manifest(collections: list[EmbeddedCollection], cfg: RagConfig, built_at: str) -> dict:
    model, dimension = index_model(collections)
    index_size = cfg.index_path.stat().st_size if cfg.index_path.exists() else 0
    data = manifest.build_manifest(
        collections,
        model=model,
        dimension=dimension,
        built_at=built_at,
        index_size_bytes=index_size,
        previous=manifest.read_manifest(cfg.manifest_path),
    )
    manifest.write_manifest(cfg.manifest_path, data)
    return data


def ordered(collections: Mapping[str, EmbeddedCollection]) -> list[EmbeddedCollection]:
    return [collections[name] for name in sorted(collections)]
