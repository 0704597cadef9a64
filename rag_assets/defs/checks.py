"""Asset checks that keep the published outputs trustworthy."""


import dagster as dg

from rag_assets.consistency import check_public_outputs
from rag_assets.defs.publish import rag_manifest
from rag_assets.defs.resources import RagSettings


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
