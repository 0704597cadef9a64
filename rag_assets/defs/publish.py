"""Fan-in assets: the published outputs built from every collection's embeddings.

A sharded collection's shards are rejoined first (rag_assets/index/rejoin.py), so the
outputs are byte for byte those of the collection unsharded.
"""

import os
from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any

import dagster as dg

from rag_assets.base.gc_passes import fewer_gc_passes
from rag_assets.config import RagConfig
from rag_assets.defs.io_managers import LAZY
from rag_assets.defs.jobs import BUILD_TAG
from rag_assets.defs.partitions import COLLECTIONS_PARTITION
from rag_assets.defs.resources import RagSettings
from rag_assets.embed.cache import EmbeddingCache
from rag_assets.index.freshness import (
    FRESH_HOURS,
    STALE_HOURS,
    read_indexed_collections,
    record_indexed_partitions,
)
from rag_assets.index.rejoin import rejoined
from rag_assets.ingest.shards import collection_of
from rag_assets.pipeline import reembed_other_models, utc_now_iso
from rag_assets.planning import records_to_reembed, signature_of
from rag_assets.publishing import publish_all, vouch_for_stores
from rag_assets.records import CollectionFacts, EmbeddedCollection, RecordFacts
from rag_assets.reporting import chunk_preview_markdown, human_bytes, skipped_markdown

GROUP = "published"
# Records kept in memory between the publish's passes over the collections, in chunks (about
# 250 MB of records): a smaller build is read once, as before; a larger one is held one
# collection at a time and read again by each whole-index writer (until they take one
# collection at a time themselves). RAG_PUBLISH_KEEP_CHUNKS=0: one collection at a time.
KEEP_CHUNKS = int(os.environ.get("RAG_PUBLISH_KEEP_CHUNKS") or 50_000)
# A collection never built yet (a folder added since the last build) is left out of the
# published index rather than failing it: Dagster's `allow_missing_partitions` input switch
# makes the IO manager skip a partition it finds no record for; the metadata lists such
# collections under `not_built`.
# Lazy (LAZY, see AtomicPickleIOManager): each collection's records are unpickled when the
# publish reaches them, and kept up to KEEP_CHUNKS.
ALL_COLLECTIONS = dg.AssetIn(
    "embeddings",
    partition_mapping=dg.AllPartitionMapping(),
    metadata={"allow_missing_partitions": True, LAZY: KEEP_CHUNKS},
    dagster_type=dg.Any,
)
# Warn after FRESH_HOURS without a new build, fail after STALE_HOURS: the Fresh/Stale/Old of
# `rag status` and the `index_recent` check, from the same constants (rag_assets/freshness.py).
INDEX_FRESHNESS = dg.FreshnessPolicy.time_window(
    fail_window=timedelta(hours=STALE_HOURS), warn_window=timedelta(hours=FRESH_HOURS)
)


def all_collections(
    cfg: RagConfig, loaded: Mapping[str, EmbeddedCollection], ledger: Collection[str] | None = None
) -> Sequence[EmbeddedCollection]:
    """The fan-in input (``{partition: record}``, lazy: see AtomicPickleIOManager) as one record
    per collection, in name order, each sharded collection's shards rejoined (``ledger``: the
    partitions the indexed ledger named before this publish, see rejoin_collections); each
    collection is loaded when the publish reaches it, and released before the next."""
    return rejoined(cfg, loaded, ledger, keep_chunks=KEEP_CHUNKS)


def described(loaded: Mapping[str, EmbeddedCollection]) -> dict[str, EmbeddedCollection | RecordFacts]:
    """Each partition's record facts (read beside a lazy mapping's pickles), else its record: what
    the model check and the indexed ledger need, without loading an unchanged record."""
    read = getattr(loaded, "facts", None)
    out: dict[str, EmbeddedCollection | RecordFacts] = {}
    for key in loaded:
        facts = read(key) if read else None
        out[key] = facts if facts is not None else loaded[key]
    return out


def _collection_table(collections: list[CollectionFacts]) -> str:
    lines = ["| collection | documents | chunks | skipped |", "| --- | ---: | ---: | ---: |"]
    for c in collections:
        lines.append(f"| {c.collection} | {c.documents} | {c.chunks} | {len(c.skipped)} |")
    return "\n".join(lines)


def _common_metadata(context: dg.AssetExecutionContext, collections: list[CollectionFacts]) -> dict[str, Any]:
    skipped = [s for c in collections for s in c.skipped]
    partitions = context.instance.get_dynamic_partitions(COLLECTIONS_PARTITION)
    not_built = sorted({collection_of(key) for key in partitions} - {c.collection for c in collections})
    return {
        "not_built": ", ".join(not_built) or "none",
        "documents": sum(c.documents for c in collections),
        "chunks": sum(c.chunks for c in collections),
        "per_collection": dg.MetadataValue.md(_collection_table(collections)),
        "skipped_files": len(skipped),
        "skipped": dg.MetadataValue.md(skipped_markdown(skipped)),
    }


def _one_model(
    context: dg.AssetExecutionContext, rag: RagSettings, cfg: RagConfig, loaded: Mapping[str, EmbeddedCollection]
) -> Mapping[str, EmbeddedCollection]:
    """``loaded`` with every record of another model or dimension embedded again with the
    configured one (through the embedding cache); the partitions stay stale in the UI (their
    code version) until they are materialised themselves."""
    selection = rag.select()
    model = selection.embedder
    try:
        causes = records_to_reembed(
            described(loaded).values(), signature_of(selection.provider, model.model, model.dimension, cfg.chunking)
        )
        if not causes:
            return loaded
        context.log.info("; ".join(str(cause) for cause in causes) + ": embedded again before publishing")
        return reembed_other_models(
            loaded,
            model,
            cache=EmbeddingCache(cfg.embedding_cache_path),
            batch_size=cfg.embedding.batch_size,
            provider=selection.provider,
        )
    finally:
        close = getattr(model, "close", None)  # an HTTP provider's connections
        if close:
            close()


PUBLISHED_SPECS = [
    dg.AssetSpec(
        "public_index",
        group_name=GROUP,
        kinds={"json"},
        description="The static public index (embeddings-index.json) and its small meta sidecar.",
        freshness_policy=INDEX_FRESHNESS,
    ),
    dg.AssetSpec(
        "public_store",
        group_name=GROUP,
        kinds={"sqlite"},
        description="SQLite store of the public collections (chunks, vectors, FTS5) for server-side hybrid search.",
    ),
    dg.AssetSpec(
        "rag_manifest",
        group_name=GROUP,
        kinds={"json"},
        description="Per-document ledger (rag-manifest.json): content hash, chunk count and index time of every file.",
    ),
]


@dg.multi_asset(
    # Outs rather than specs: only then may the input carry its partition mapping and the
    # allow_missing_partitions metadata. Nothing-typed: the step writes the files itself.
    outs={spec.key.to_user_string(): dg.AssetOut.from_spec(spec, dagster_type=dg.Nothing) for spec in PUBLISHED_SPECS},
    ins={"embeddings": ALL_COLLECTIONS},
    check_specs=[
        dg.AssetCheckSpec(
            "index_complete",
            asset="public_index",
            description="Every chunk has a vector: no embedding batch failed in the last run of any collection.",
        )
    ],
)
def publish(
    context: dg.AssetExecutionContext,
    rag: RagSettings,
    embeddings: Mapping[str, EmbeddedCollection],
):
    """Publish every collection's embeddings: JSON index + sidecar, SQLite store, manifest.

    One step writes all of them as one generation, made current by a single atomic swap
    (rag_assets.index.generations), so a kill at any instant leaves readers with one build's files.
    Records of another model than the configured one (partitions not run since the embedder
    changed) are embedded again first, as the planner says: one index holds one model.
    """
    cfg = rag.config
    # No collection partition at all (a content folder of vaults only, or every collection
    # removed): Dagster passes no mapping for the fan-in, and the index published is empty.
    embeddings = _one_model(context, rag, cfg, {} if embeddings is None else embeddings)
    # Read before the loaded records are noted in it: a shard record it did not name is one
    # left from an earlier shard layout.
    ledger = set(read_indexed_collections(cfg))
    # The records as loaded, whatever happens next: what the ledger says they hold (see
    # record_pending_partitions; keys of another shard layout are dropped from it). Only the
    # ones it names: a record left from an earlier layout stays unnamed, so refused again.
    record_indexed_partitions(
        cfg, {key: record.content_hash for key, record in described(embeddings).items() if key in ledger}
    )
    collections = all_collections(cfg, embeddings, ledger)
    full = context.run.tags.get(BUILD_TAG, "full") == "full"
    with fewer_gc_passes():  # see rag_assets/base/gc_passes.py
        published = publish_all(collections, cfg, utc_now_iso(), full_build=full)
    vouch_for_stores(cfg, published)  # the store this step wrote is not read whole again by its checks
    header, summary, sync, data = published.header, published.store_summary, published.store_sync, published.manifest
    facts = published.collections  # what the publish kept of each collection's records
    common = _common_metadata(context, facts)
    failed = [chunk_id for c in facts for chunk_id in c.failed_chunk_ids]
    context.log.info(
        f"published {header.total_chunks} chunks ({header.model}): {cfg.index_path} "
        f"({human_bytes(published.index_bytes)}), {cfg.public_store_path} ({human_bytes(summary.size_bytes)}; "
        f"{sync.chunks_written} chunks written, {sync.chunks_deleted} deleted), {cfg.manifest_path}"
    )
    if failed:
        context.log.warning(f"{len(failed)} chunks have no vector (their batches failed); the next run retries them")
    preview = [chunk for c in facts for chunk in c.preview]
    yield dg.MaterializeResult(
        asset_key="public_index",
        metadata={
            **common,
            "model": header.model,
            "provider": header.provider,
            "dimension": header.dimension,
            "missing_chunks": len(failed),
            "content_hash": header.content_hash,
            "built_at": header.built_at,
            "generation": header.generation or "",
            "index_path": dg.MetadataValue.path(str(cfg.index_path)),
            "index_size": human_bytes(published.index_bytes),
            "index_bytes": published.index_bytes,
            "meta_bytes": published.meta_bytes,
            "vector_encoding": header.vector_encoding,
            "vector_file_bytes": published.vector_file_bytes,  # embeddings-vectors.bin (int16-bin), else 0
            # A chunk's share of what a browser fetches for it: the index and the vector file.
            "bytes_per_chunk": (
                round((published.index_bytes + published.vector_file_bytes) / header.total_chunks)
                if header.total_chunks
                else 0
            ),
            "preview": dg.MetadataValue.md(chunk_preview_markdown(preview, limit=5)),
        },
        check_results=[
            dg.AssetCheckResult(
                check_name="index_complete",
                passed=not failed,
                severity=dg.AssetCheckSeverity.WARN,
                metadata={
                    "missing_chunks": len(failed),
                    "missing_chunk_ids": dg.MetadataValue.md("\n".join(f"- `{i}`" for i in failed[:50]) or "_none_"),
                },
            )
        ],
    )
    yield dg.MaterializeResult(
        asset_key="public_store",
        metadata={
            **common,
            "model": summary.model or "",
            "dimension": summary.dimension or 0,
            "fts_rows": summary.fts_rows,
            "chunks_written": sync.chunks_written,
            "chunks_deleted": sync.chunks_deleted,
            "documents_deleted": sync.documents_deleted,
            "full_rewrite": sync.full_rewrite,
            "built_at": summary.built_at or "",
            "store_path": dg.MetadataValue.path(str(cfg.public_store_path)),
            "store_size": human_bytes(summary.size_bytes),
            "store_bytes": summary.size_bytes,
            **(published.postgres.as_metadata() if published.postgres else {}),
        },
    )
    yield dg.MaterializeResult(
        asset_key="rag_manifest",
        metadata={
            **common,
            "model": data["model"],
            "dimension": data["dimension"],
            "last_full_build": data["lastFullBuild"] or "",
            "last_incremental_update": data["lastIncrementalUpdate"] or "",
            "index_size_mb": data["stats"]["indexSizeMB"],
            "manifest_path": dg.MetadataValue.path(str(cfg.manifest_path)),
        },
    )
