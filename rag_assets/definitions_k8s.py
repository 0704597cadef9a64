"""Code location for Kubernetes: ``dagster api grpc -m rag_assets.definitions_k8s`` in the user-code pod.

The definitions of ``rag_assets.definitions`` plus the jobs whose steps run as Kubernetes
Jobs (rag_assets.defs.kubernetes); rag.yaml is found as for `rag` ($RAG_CONFIG), when the
code location loads, not when this module is imported.
"""

from __future__ import annotations

import dagster as dg

from rag_assets.config import load_config
from rag_assets.defs.kubernetes import kubernetes_definitions


@dg.definitions
def defs() -> dg.Definitions:
    """The project's definitions plus the Kubernetes jobs, for the configuration found at load time."""
    return kubernetes_definitions(load_config())
