"""Jobs: index one collection (partitioned), then publish every collection's results."""

from __future__ import annotations

import dagster as dg

INDEX_COLLECTION_JOB = "index_collection"
PUBLISH_JOB = "publish_index"
COLLECTION_ASSETS = ("content_hash", "parsed_documents", "chunks", "embeddings")
PUBLISHED_ASSETS = ("public_index", "public_store", "rag_manifest")


def build_jobs() -> list[dg.UnresolvedAssetJobDefinition]:
    index_collection = dg.define_asset_job(
        INDEX_COLLECTION_JOB,
        selection=dg.AssetSelection.assets(*COLLECTION_ASSETS),
        description="Hash, parse, chunk and embed one collection (one partition).",
    )
    publish = dg.define_asset_job(
        PUBLISH_JOB,
        selection=dg.AssetSelection.assets(*PUBLISHED_ASSETS),
        description="Write the public JSON index, the public SQLite store and the manifest.",
    )
    return [index_collection, publish]
