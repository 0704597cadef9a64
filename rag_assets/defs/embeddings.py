"""Per-collection embeddings asset, and the checks on its provider."""

from collections.abc import Mapping

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.content import STAGED, one_at_a_time, shard_metadata
from rag_assets.defs.ranges import SINGLE_RUN, for_each_partition, throttled
from rag_assets.defs.resources import RagSettings
from rag_assets.embed.cache import EmbeddingCache
from rag_assets.index.freshness import record_pending_partitions
from rag_assets.index.index_json import read_meta
from rag_assets.ingest.shards import shard_for_key
from rag_assets.pipeline import EmbeddingStats, embed_collection
from rag_assets.records import ChunkedCollection, EmbeddedCollection
from rag_assets.reporting import bullets_markdown, chunk_preview_markdown

GROUP = "collections"


def build_embedding_assets(
    partitions_def: dg.PartitionsDefinition, code_version: str | None = None
) -> list[dg.AssetsDefinition]:
    """The embeddings asset over the given collection partitions (one step per run, see defs/ranges.py).

    ``code_version`` (rag_assets.planning.settings_code_version: the embedder's model settings
    and the chunker's) makes Dagster show the partitions made with other settings as stale.
    """

    @dg.asset(
        partitions_def=partitions_def,
        backfill_policy=SINGLE_RUN,
        group_name=GROUP,
        kinds={"numpy"},
        pool="embedding_api",
        code_version=code_version,
        ins={"chunks": one_at_a_time("chunks")},
        dagster_type=STAGED,
    )
    def embeddings(
        context: dg.AssetExecutionContext,
        rag: RagSettings,
        chunks: Mapping[str, ChunkedCollection],
    ) -> Mapping[str, EmbeddedCollection]:
        """One L2-normalised float32 vector per chunk, from the configured embedder, through the cache."""
        cfg = rag.config
        selection = rag.select()
        model = selection.embedder
        _warn_on_model_change(context, cfg, model.model)
        cache = EmbeddingCache(cfg.embedding_cache_path)
        price = cfg.embedding.openai.price_per_million_tokens if selection.provider == "openai" else None
        progress = throttled(context.log.info)

        def one(key: str) -> tuple[EmbeddedCollection, dict]:
            embedded, stats = embed_collection(
                chunks[key],
                model,
                cache=cache,
                batch_size=cfg.embedding.batch_size,
                provider=selection.provider,
                log=progress,
            )
            return embedded, {
                **shard_metadata(shard_for_key(cfg, key)),
                "provider": selection.provider,
                "model": embedded.model,
                "dimension": embedded.dimension,
                "selection_reason": selection.reason,
                "chunks": len(embedded.chunks),
                "documents": len(embedded.documents),
                **usage_metadata(stats, price),
                "failed_chunks": len(embedded.failed_chunk_ids),
                "failed_chunk_ids": dg.MetadataValue.md(bullets_markdown(embedded.failed_chunk_ids)),
                "errors": dg.MetadataValue.md(bullets_markdown(stats.errors)),
                "preview": dg.MetadataValue.md(chunk_preview_markdown(embedded.chunks, limit=2)),
                "content_hash": embedded.content_hash,
            }

        try:
            embedded = for_each_partition(
                context,
                "collection",
                one,
                lambda e: f"{len(e.chunks)} chunks, {len(e.failed_chunk_ids)} without a vector",
                header=f"embedder {selection.provider}: {model.model} ({selection.reason})",
                records_dir=cfg.intermediate_dir,
            )
        finally:
            close = getattr(model, "close", None)
            if close:
                close()
        # The IO manager writes the records after this step, one file at a time: until the
        # publish that loads them notes what they hold, they are pending, so a build stopped
        # between two writes re-indexes the partitions instead of trusting their old records.
        record_pending_partitions(cfg, embedded)
        return embedded

    return [embeddings]


def usage_metadata(stats: EmbeddingStats, price_per_million: float | None) -> dict:
    meta = {
        "batches": stats.batches,
        "failed_batches": stats.failed_batches,
        "cache_hits": stats.cache_hits,
        "cache_misses": stats.cache_misses,
        "requests": stats.requests,
        "retries": stats.retries,
        "tokens": stats.tokens,
        "embedding_seconds": round(stats.seconds, 3),
        "chunks_per_second": round(stats.cache_misses / stats.seconds, 1) if stats.seconds else 0.0,
    }
    if price_per_million is not None:
        meta["estimated_cost_usd"] = stats.tokens / 1_000_000 * price_per_million
    return meta


def _warn_on_model_change(context: dg.AssetExecutionContext, cfg: RagConfig, model: str) -> None:
    meta = read_meta(cfg.meta_path)
    if meta and meta.get("model") != model:
        context.log.warning(
            f"the published index was built with {meta.get('model')}; the configured embedder is {model}. "
            "One index holds one model: the publish step embeds the other partitions' records again with it "
            "(rag build and the sensors re-index every partition)."
        )
