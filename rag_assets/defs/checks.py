"""Asset checks that keep the published outputs trustworthy."""

import dagster as dg

from rag_assets.config.masking import mask_url
from rag_assets.defs.resources import RagSettings
from rag_assets.embed.selection import service_status
from rag_assets.index.consistency import check_public_outputs
from rag_assets.index.freshness import STALE_HOURS, age_label, published_matches_content
from rag_assets.index.index_json import read_meta
from rag_assets.index.integrity import verification_record


@dg.asset_check(asset="rag_manifest", description="JSON index, SQLite store, FTS table and manifest agree.")
def outputs_consistent(rag: RagSettings) -> dg.AssetCheckResult:
    # Through the verification record, as `rag status` and `rag check`: the segments a publish
    # named again were verified before, and re-reading them all grew with the corpus.
    record = verification_record(rag.config)
    report = check_public_outputs(rag.config, record)
    record.save()
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
def embedding_service(rag: RagSettings) -> dg.AssetCheckResult:
    status = service_status(rag.config.embedding)
    return dg.AssetCheckResult(
        passed=status.selected_reachable,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "provider": status.selected,
            "model": status.model,
            "reason": mask_url(status.reason),
            "ollama": "online" if status.ollama_online else "offline",
            "ollama_host": mask_url(status.ollama_host),
            "ollama_models": ", ".join(status.ollama_models) or "none",
            "openai_key_set": status.openai_key_set,
            "local_model": status.local_reason,
            "minilm_model": status.minilm_reason,
        },
    )


@dg.asset_check(
    asset="public_index",
    description="The published index exists and its contentHash matches the content on disk now.",
)
def index_matches_content(rag: RagSettings) -> dg.AssetCheckResult:
    match = published_matches_content(rag.config)  # by stat after `rag build`'s walk, else a walk
    return _matches_content_result(
        match.passed, match.published_hash, match.current_hash, match.changed, match.has_index
    )


def _matches_content_result(
    passed: bool, published: str | None, current: str, changed: dict[str, str], has_index: bool = True
) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=passed,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "index_exists": has_index,
            "index_content_hash": published or "",
            "current_content_hash": current,
            "changed_collections": dg.MetadataValue.md(
                "\n".join(f"- **{name}**: {why}" for name, why in changed.items()) or "_none_"
            ),
        },
    )


@dg.asset_check(
    asset="public_index",
    description=f"The index was built within the last {STALE_HOURS} hours (it is not Old in `rag status`).",
)
def index_recent(rag: RagSettings) -> dg.AssetCheckResult:
    meta = read_meta(rag.config.meta_path) or {}
    label, age = age_label(meta.get("builtAt"))
    return dg.AssetCheckResult(
        passed=age is not None and age <= STALE_HOURS * 3600,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "built_at": meta.get("builtAt") or "never",
            "age_hours": round((age or 0) / 3600, 1),
            "freshness": label,
        },
    )
