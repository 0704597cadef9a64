"""Jobs for Kubernetes: dagster-k8s's ``k8s_job_executor`` runs each step in a pod of its own.

The same asset selections as the Celery jobs (defs/distributed.py), one partition or a range
of them a run; deploy/kubernetes/ holds the instance (``K8sRunLauncher``) and the executor's
run config. Needs the ``k8s`` extra.
"""

from __future__ import annotations

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.jobs import INDEX_COLLECTION_JOB, jobs_with_executor
from rag_assets.defs.jobs import PUBLISH_JOB as PUBLISH_JOB_NAME

INDEX_JOB = f"{INDEX_COLLECTION_JOB}_k8s"
PUBLISH_JOB = f"{PUBLISH_JOB_NAME}_k8s"


def kubernetes_definitions(cfg: RagConfig) -> dg.Definitions:
    """The project's definitions plus the two Kubernetes jobs."""
    from dagster_k8s import k8s_job_executor  # the k8s extra

    jobs = jobs_with_executor("k8s", k8s_job_executor, "in a Kubernetes pod")
    return dg.Definitions.merge(build_definitions(cfg), dg.Definitions(jobs=jobs))
