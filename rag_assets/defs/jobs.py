"""Jobs: index one collection or vault (partitioned), then publish the outputs they feed."""

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


# One process per run, not per step: the steps are short and each process would spend
# seconds importing Dagster and the project.
index_collection_job = dg.define_asset_job(
    INDEX_COLLECTION_JOB,
    selection=dg.AssetSelection.assets(*COLLECTION_ASSETS),
    description="Hash, parse, chunk and embed one collection (one partition).",
    executor_def=dg.in_process_executor,
)
publish_job = dg.define_asset_job(
    PUBLISH_JOB,
    selection=dg.AssetSelection.assets(*PUBLISHED_ASSETS),
    description="Write the public JSON index, the public SQLite store and the manifest.",
    tags=PUBLISHES_TAG,
    executor_def=dg.in_process_executor,
)
update_collection_job = dg.define_asset_job(
    UPDATE_COLLECTION_JOB,
    selection=dg.AssetSelection.assets(*COLLECTION_ASSETS, *PUBLISHED_ASSETS),
    description=(
        "Re-index one collection and republish every output in one run: what the change sensor "
        "and the nightly schedule launch."
    ),
    tags=PUBLISHES_TAG,
    executor_def=dg.in_process_executor,
)


INDEX_VAULT_JOB = "index_vault"
REFRESH_TIERS_JOB = "refresh_tier_stores"
UPDATE_VAULT_JOB = "update_vault"
VAULT_ASSETS = ("safe_vault_chunks", "private_vault_chunks")
TIER_STORE_ASSETS = ("safe_store", "private_store")


index_vault_job = dg.define_asset_job(
    INDEX_VAULT_JOB,
    selection=dg.AssetSelection.assets(*VAULT_ASSETS),
    description="Build one vault (one partition) into the Safe store (if safe) and the Private store.",
    executor_def=dg.in_process_executor,
)
refresh_tiers_job = dg.define_asset_job(
    REFRESH_TIERS_JOB,
    selection=dg.AssetSelection.assets(*TIER_STORE_ASSETS),
    description="Purge vaults that left a tier, describe both tier stores and run the leak audit.",
    executor_def=dg.in_process_executor,
)
update_vault_job = dg.define_asset_job(
    UPDATE_VAULT_JOB,
    selection=dg.AssetSelection.assets(*VAULT_ASSETS, *TIER_STORE_ASSETS),
    description="Re-index one vault and refresh both tier stores: what the vault sensor launches.",
    executor_def=dg.in_process_executor,
)
ALL_JOBS = [
    index_collection_job,
    publish_job,
    update_collection_job,
    index_vault_job,
    refresh_tiers_job,
    update_vault_job,
]
