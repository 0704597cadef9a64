"""Jobs: index collections or vaults (over a range of partitions, in one run), publish, refresh.

A build is at most three runs, each over a range of partitions (see defs/partitions.py):
``update_collection`` (every collection to index, then publishing), ``update_safe_vaults``
and ``update_private_vaults`` (each tier's vaults, then its store). Collections and the two
vault tiers have different partitions, and one run takes one range, hence three.
"""

from __future__ import annotations

import dagster as dg

# The most runs a successful `rag build` starts (collections + publishing, then each tier).
MAX_RUNS_PER_BUILD = 3

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
    description="Hash, parse, chunk and embed collections (one partition or a range) without publishing.",
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
        "Re-index a range of collections and republish every output, in one run: what `rag build`, "
        "the change sensor and the nightly schedule launch."
    ),
    tags=PUBLISHES_TAG,
    executor_def=dg.in_process_executor,
)


REFRESH_TIERS_JOB = "refresh_tier_stores"
UPDATE_VAULTS_JOBS = {"safe": "update_safe_vaults", "private": "update_private_vaults"}
VAULT_ASSETS = {"safe": "safe_vault_chunks", "private": "private_vault_chunks"}
TIER_STORE_ASSETS = {"safe": "safe_store", "private": "private_store"}

update_vault_jobs = {
    tier: dg.define_asset_job(
        UPDATE_VAULTS_JOBS[tier],
        selection=dg.AssetSelection.assets(VAULT_ASSETS[tier], TIER_STORE_ASSETS[tier]),
        description=(
            f"Build a range of {tier} vaults into the {tier.capitalize()} store, then refresh it (purge, card"
            + (", leak audit)" if tier == "safe" else ")")
            + ": what `rag build`, the vault sensor and the nightly schedule launch."
        ),
        executor_def=dg.in_process_executor,
    )
    for tier in ("safe", "private")
}
refresh_tiers_job = dg.define_asset_job(
    REFRESH_TIERS_JOB,
    selection=dg.AssetSelection.assets(*TIER_STORE_ASSETS.values()),
    description="Purge vaults that left a tier, describe both tier stores and run the leak audit.",
    executor_def=dg.in_process_executor,
)
ALL_JOBS = [
    index_collection_job,
    publish_job,
    update_collection_job,
    *update_vault_jobs.values(),
    refresh_tiers_job,
]


def jobs_with_executor(
    suffix: str, executor_def: dg.ExecutorDefinition, where: str
) -> list[dg.UnresolvedAssetJobDefinition]:
    """``index_collection`` and ``publish_index`` again, named ``*_<suffix>``, their steps run by
    ``executor_def`` (``where`` says where, in the descriptions): for distributed builds."""
    return [
        dg.define_asset_job(
            f"{INDEX_COLLECTION_JOB}_{suffix}",
            selection=dg.AssetSelection.assets(*COLLECTION_ASSETS),
            description=f"Hash, parse, chunk and embed collections (one partition or a range), each step {where}.",
            executor_def=executor_def,
        ),
        dg.define_asset_job(
            f"{PUBLISH_JOB}_{suffix}",
            selection=dg.AssetSelection.assets(*PUBLISHED_ASSETS),
            description=f"Write the public JSON index, the public SQLite store and the manifest, {where}.",
            tags=PUBLISHES_TAG,
            executor_def=executor_def,
        ),
    ]
