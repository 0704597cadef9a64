"""Jobs for Kubernetes: dagster-k8s's ``k8s_job_executor`` runs each step in a pod of its own.

The same asset selections as the Celery jobs (defs/distributed.py), one partition or a range
of them a run; deploy/kubernetes/ holds the instance (``K8sRunLauncher``) and the executor's
run config. Needs the ``k8s`` extra.
"""

from __future__ import annotations

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.jobs import COLLECTION_ASSETS, PUBLISHED_ASSETS, PUBLISHES_TAG

INDEX_JOB = "index_collection_k8s"
PUBLISH_JOB = "publish_index_k8s"


def kubernetes_jobs() -> list[dg.UnresolvedAssetJobDefinition]:
    from dagster_k8s import k8s_job_executor

    return [
        dg.define_asset_job(
            INDEX_JOB,
            selection=dg.AssetSelection.assets(*COLLECTION_ASSETS),
            description="Hash, parse, chunk and embed collections, each step in a Kubernetes pod.",
            executor_def=k8s_job_executor,
        ),
        dg.define_asset_job(
            PUBLISH_JOB,
            selection=dg.AssetSelection.assets(*PUBLISHED_ASSETS),
            description="Publish the public outputs, in a Kubernetes pod.",
            tags=PUBLISHES_TAG,
            executor_def=k8s_job_executor,
        ),
    ]


def kubernetes_definitions(cfg: RagConfig) -> dg.Definitions:
    """The project's definitions plus the two Kubernetes jobs."""
    from rag_assets.definitions import build_definitions

    return dg.Definitions.merge(build_definitions(cfg), dg.Definitions(jobs=kubernetes_jobs()))
