"""Jobs: index one collection (partitioned), then publish every collection's results."""

from __future__ import annotations

import dagster as dg

INDEX_COLLECTION_JOB = "index_collection"
PUBLISH_JOB = "publish_index"
UPDATE_COLLECTION_JOB = "update_collection"
# Run tag: "full" for rebuilds of every collection (nightly, rag build --force), else "incremental".
BUILD_TAG = "rag/build"
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
    update_collection = dg.define_asset_job(
        UPDATE_COLLECTION_JOB,
        selection=dg.AssetSelection.assets(*COLLECTION_ASSETS, *PUBLISHED_ASSETS),
        description=(
            "Re-index one collection and republish every output in one run: what the change sensor "
            "and the nightly schedule launch."
        ),
    )
    return [index_collection, publish, update_collection]
