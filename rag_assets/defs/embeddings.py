"""Per-collection embeddings asset."""


import dagster as dg

from rag_assets.defs.resources import EmbedderResource
from rag_assets.pipeline import embed_collection
from rag_assets.records import ChunkedCollection, EmbeddedCollection
from rag_assets.reporting import chunk_preview_markdown

GROUP = "collections"


def build_embedding_assets(partitions_def: dg.PartitionsDefinition) -> list[dg.AssetsDefinition]:
    @dg.asset(partitions_def=partitions_def, group_name=GROUP, kinds={"numpy"}, pool="embedding_api")
    def embeddings(
        context: dg.AssetExecutionContext, embedder: EmbedderResource, chunks: ChunkedCollection
    ) -> dg.Output[EmbeddedCollection]:
        """One L2-normalised float32 vector per chunk, from the configured embedder."""
        model = embedder.create()
        context.log.info(f"[{chunks.collection}] embedding {len(chunks.chunks)} chunks with {model.model}")
        embedded, stats = embed_collection(chunks, model, batch_size=embedder.batch_size, log=context.log.info)
        return dg.Output(
            embedded,
            metadata={
                "model": embedded.model,
                "dimension": embedded.dimension,
                "chunks": len(embedded.chunks),
                "documents": len(embedded.documents),
                "batches": stats.batches,
                "embedding_seconds": round(stats.seconds, 3),
                "chunks_per_second": round(len(embedded.chunks) / stats.seconds, 1) if stats.seconds else 0.0,
                "preview": dg.MetadataValue.md(chunk_preview_markdown(embedded.chunks, limit=2)),
                "content_hash": embedded.content_hash,
            },
        )

    return [embeddings]
