"""Jobs: index one collection (partitioned), then publish every collection's results."""

from __future__ import annotations

import dagster as dg

INDEX_COLLECTION_JOB = "index_collection"
PUBLISH_JOB = "publish_index"
UPDATE_COLLECTION_JOB = "update_collection"
# Run tag: "full" for rebuilds of every collection (nightly, rag build --force), else "incremental".
BUILD_TAG = "rag/build"
# Runs that rewrite the published outputs carry this tag; dagster.yaml lets one such run
# proceed at a time, so two publishes never interleave and leave an older one on top.
PUBLISHES_TAG = {"rag/publishes": "true"}
COLLECTION_ASSETS = ("content_hash", "parsed_documents", "chunks", "embeddings")
PUBLISHED_ASSETS = ("public_index", "public_store", "rag_manifest")


def build_jobs() -> list[dg.UnresolvedAssetJobDefinition]:
    index_collection = dg.define_asset_job(
        INDEX_COLLECTION_JOB,
        selection=dg.AssetSelection.assets(*COLLECTION_ASSETS),
        description="Hash, parse, chunk and embed one collection (one partition).",
        # One process per run, not per step: the steps are short and each process would
        # spend seconds importing Dagster and the project.
        executor_def=dg.in_process_executor,
    )
    publish = dg.define_asset_job(
        PUBLISH_JOB,
        selection=dg.AssetSelection.assets(*PUBLISHED_ASSETS),
        description="Write the public JSON index, the public SQLite store and the manifest.",
        tags=PUBLISHES_TAG,
        executor_def=dg.in_process_executor,
    )
    update_collection = dg.define_asset_job(
        UPDATE_COLLECTION_JOB,
        selection=dg.AssetSelection.assets(*COLLECTION_ASSETS, *PUBLISHED_ASSETS),
        description=(
            "Re-index one collection and republish every output in one run: what the change sensor "
            "and the nightly schedule launch."
        ),
        tags=PUBLISHES_TAG,
        executor_def=dg.in_process_executor,
    )
    return [index_collection, publish, update_collection]
