"""Per-collection assets: hash the files, parse them, chunk them.

Each runs once per build over the range of collection partitions (see defs/ranges.py):
it takes and returns ``{partition: record}`` and gives every partition its own metadata.
A partition is a collection, or one shard of a sharded collection (``docs~0``; see
rag_assets/ingest/shards.py), whose records hold only that shard's files.
"""

import functools
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.io_managers import LAZY
from rag_assets.defs.jobs import BUILD_TAG
from rag_assets.defs.ranges import SINGLE_RUN, for_each_partition
from rag_assets.defs.resources import RagSettings
from rag_assets.ingest.boundaries import collection_policy
from rag_assets.ingest.doc_cache import DocumentCache
from rag_assets.ingest.parsing import parse_collection
from rag_assets.ingest.shards import Shard, shard_for_key, shard_part, snapshot_shard
from rag_assets.ingest.stat_cache import StatCache
from rag_assets.ingest.walker import Listing, list_folder
from rag_assets.pipeline import build_pool, chunk_collection
from rag_assets.records import ChunkedCollection, CollectionSnapshot, ParsedCollection
from rag_assets.reporting import chunk_preview_markdown, human_bytes, skipped_markdown

GROUP = "collections"


def one_at_a_time(asset: str) -> dg.AssetIn:
    """The run's records of ``asset`` as a mapping that unpickles each when it is looked up
    and keeps none (rag_assets.defs.io_managers.LazyRecords): a step holds one partition's
    input at a time, not the run's."""
    return dg.AssetIn(asset, metadata={LAZY: 0}, dagster_type=dg.Any)


# A step's output: {partition: record}, as a StagedRecords mapping (rag_assets.defs.ranges),
# which Dagster's check of a dict annotation would refuse.
STAGED = dg.Any


def shard_metadata(shard: Shard) -> dict:
    """A shard partition's place in the UI: its collection and which shard it is (none unsharded)."""
    return {"collection": shard.collection, "shard": shard.label()} if shard.sharded else {}


def collection_listings(cfg: RagConfig) -> Callable[[str], Listing]:
    """A collection folder's listing (list_folder, the build's policy), walked once per step:
    the shards of a collection share it, where each walked the whole folder before."""
    policy = collection_policy(cfg)

    @functools.cache
    def listing(collection: str) -> Listing:
        return list_folder(cfg.content_dir / collection, policy, prefix=f"{collection}/")

    return listing


def build_content_assets(
    partitions_def: dg.PartitionsDefinition, chunking_version: str | None = None
) -> list[dg.AssetsDefinition]:
    """The hash, parse and chunk assets over the given collection partitions (``chunking_version``:
    the chunks asset's code version, rag_assets.planning.chunking_code_version)."""

    @dg.asset(
        partitions_def=partitions_def,
        backfill_policy=SINGLE_RUN,
        group_name=GROUP,
        kinds={"markdown"},
        dagster_type=STAGED,
    )
    def content_hash(context: dg.AssetExecutionContext, rag: RagSettings) -> Mapping[str, CollectionSnapshot]:
        """SHA-256 over the relative paths and bytes of every file in one collection."""
        cfg = rag.config
        stale = rag.stale_reason()
        if stale:
            context.log.warning(stale)
        # A full rebuild (rag build --force, the nightly schedule) rehashes every file.
        full = context.run.tags.get(BUILD_TAG) == "full"
        stat_cache = StatCache(cfg.stat_cache_path, trust=not full)
        listing = collection_listings(cfg)

        def one(key: str) -> tuple[CollectionSnapshot, dict]:
            shard = shard_for_key(cfg, key)
            snapshot = snapshot_shard(
                cfg.content_dir, shard, stat_cache, collection_policy(cfg), listing(shard.collection)
            )
            if not Path(snapshot.root).is_dir():
                context.log.warning(f"[{key}] folder {snapshot.root} does not exist; the collection is empty")
            return snapshot, {
                **shard_metadata(shard),
                "content_hash": snapshot.content_hash,
                "files": len(snapshot.files),
                "total_size": human_bytes(snapshot.total_bytes),
                "folder": dg.MetadataValue.path(snapshot.root),
            }

        snapshots = for_each_partition(
            context,
            "collection",
            one,
            lambda s: f"{len(s.files)} files, hash {s.content_hash[:12]}",
            records_dir=cfg.intermediate_dir,
        )
        stat_cache.save()
        return snapshots

    @dg.asset(
        partitions_def=partitions_def,
        backfill_policy=SINGLE_RUN,
        group_name=GROUP,
        kinds={"markdown"},
        ins={"content_hash": one_at_a_time("content_hash")},
        dagster_type=STAGED,
    )
    def parsed_documents(
        context: dg.AssetExecutionContext, rag: RagSettings, content_hash: Mapping[str, CollectionSnapshot]
    ) -> Mapping[str, ParsedCollection]:
        """Markdown files parsed into frontmatter and body; unusable files listed with reasons."""
        cfg = rag.config
        cache = DocumentCache(cfg.document_cache_path, cfg.chunking)
        listing = collection_listings(cfg)
        pool = build_pool(cfg)

        def one(key: str) -> tuple[ParsedCollection, dict]:
            spread = pool.parallel_items
            snapshot = content_hash[key]
            shard = shard_for_key(cfg, key)
            collection = shard.collection
            reuse = cache.lookup(collection, snapshot.files)
            # The same walk policy (and shard) as the hash, so exactly the hashed files are parsed.
            parsed = parse_collection(
                cfg.content_dir,
                collection,
                snapshot.content_hash,
                reuse,
                policy=collection_policy(cfg),
                holds=shard.holds if shard.sharded else None,
                hashed=snapshot.files,
                listing=listing(collection),
                pool=pool,
            )
            parsed = replace(parsed, shard=shard_part(shard, snapshot))
            for item in parsed.skipped:
                context.log.warning(f"[{key}] skipped {item.path}: {item.reason}")
            reused = len(parsed.cached_chunks)
            return parsed, {
                **shard_metadata(shard),
                "documents": len(parsed.documents),
                "parsed_now": len(parsed.documents) - reused,
                "processes": pool.processes(since=spread),
                "unchanged": reused,
                "skipped_files": len(parsed.skipped),
                "skipped": dg.MetadataValue.md(skipped_markdown(parsed.skipped)),
                "content_hash": parsed.content_hash,
            }

        def describe(parsed: ParsedCollection) -> str:
            reused = len(parsed.cached_chunks)
            return (
                f"{len(parsed.documents)} documents ({len(parsed.documents) - reused} parsed, {reused} unchanged), "
                f"{len(parsed.skipped)} skipped"
            )

        # The skipped files kept in memory: `rag build` reports them after the run.
        with pool:
            return for_each_partition(
                context, "collection", one, describe, records_dir=cfg.intermediate_dir, keep=lambda p: p.skipped
            )

    @dg.asset(
        partitions_def=partitions_def,
        backfill_policy=SINGLE_RUN,
        group_name=GROUP,
        kinds={"python"},
        code_version=chunking_version,
        ins={"parsed_documents": one_at_a_time("parsed_documents")},
        dagster_type=STAGED,
    )
    def chunks(
        context: dg.AssetExecutionContext, rag: RagSettings, parsed_documents: Mapping[str, ParsedCollection]
    ) -> Mapping[str, ChunkedCollection]:
        """Heading-aware chunks of about 400 words with 50 words of overlap."""
        cfg = rag.config
        cache = DocumentCache(cfg.document_cache_path, cfg.chunking)
        pool = build_pool(cfg)

        def one(key: str) -> tuple[ChunkedCollection, dict]:
            spread = pool.parallel_items
            chunked = chunk_collection(parsed_documents[key], cfg.chunking, cache, pool)
            words = [c.word_count for c in chunked.chunks]
            return chunked, {
                **shard_metadata(shard_for_key(cfg, key)),
                "documents": len(chunked.documents),
                "chunks": len(chunked.chunks),
                "mean_words_per_chunk": round(sum(words) / len(words), 1) if words else 0.0,
                "max_words_per_chunk": max(words, default=0),
                "processes": pool.processes(since=spread),
                "preview": dg.MetadataValue.md(chunk_preview_markdown(chunked.chunks)),
                "content_hash": chunked.content_hash,
            }

        with pool:
            return for_each_partition(
                context,
                "collection",
                one,
                lambda c: f"{len(c.chunks)} chunks from {len(c.documents)} documents",
                records_dir=cfg.intermediate_dir,
            )

    return [content_hash, parsed_documents, chunks]
