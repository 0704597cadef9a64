"""Code location for Kubernetes: ``dagster api grpc -m rag_assets.definitions_k8s`` in the user-code pod.

The definitions of ``rag_assets.definitions`` plus the jobs whose steps run as Kubernetes
Jobs (rag_assets.defs.kubernetes); rag.yaml is found as for `rag` ($RAG_CONFIG).
"""

from __future__ import annotations

from rag_assets.config import load_config
from rag_assets.defs.kubernetes import kubernetes_definitions

defs = kubernetes_definitions(load_config())
