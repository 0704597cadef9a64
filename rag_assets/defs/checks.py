"""Asset checks that keep the published outputs trustworthy."""


import dagster as dg

from rag_assets.consistency import check_public_outputs
from rag_assets.defs.publish import rag_manifest
from rag_assets.defs.resources import EmbedderResource, RagSettings
from rag_assets.embedders.selection import service_status


@dg.asset_check(asset=rag_manifest, description="JSON index, SQLite store, FTS table and manifest agree.")
def outputs_consistent(rag: RagSettings) -> dg.AssetCheckResult:
    report = check_public_outputs(rag.to_config())
    return dg.AssetCheckResult(
        passed=report.ok,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "index_chunks": report.index_chunks,
            "store_chunks": report.store_chunks,
            "fts_rows": report.fts_rows,
            "manifest_chunks": report.manifest_chunks,
            "problems": dg.MetadataValue.md("\n".join(f"- {p}" for p in report.problems) or "_none_"),
        },
    )


@dg.asset_check(
    asset="embeddings",
    description="The embedding service that `auto` (or the configured name) picks is reachable; Ollama status and models.",
)
def embedding_service(embedder: EmbedderResource) -> dg.AssetCheckResult:
    status = service_status(embedder.settings())
    return dg.AssetCheckResult(
        passed=status.selected_reachable,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "provider": status.selected,
            "model": status.model,
            "reason": status.reason,
            "ollama": "online" if status.ollama_online else "offline",
            "ollama_host": status.ollama_host,
            "ollama_models": ", ".join(status.ollama_models) or "none",
            "openai_key_set": status.openai_key_set,
            "local_model": status.local_reason,
        },
    )
