"""Cross-checks between the published outputs: JSON index, SQLite store, FTS table, manifest."""

from __future__ import annotations

from dataclasses import dataclass, field

from rag_assets import index_json, manifest, store
from rag_assets.config import RagConfig


@dataclass
class ConsistencyReport:
    problems: list[str] = field(default_factory=list)
    index_chunks: int = 0
    store_chunks: int = 0
    fts_rows: int = 0
    manifest_chunks: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def check_public_outputs(cfg: RagConfig) -> ConsistencyReport:
    """Same chunk IDs and counts everywhere, one model, and no orphan rows."""
    report = ConsistencyReport()
    missing = [p for p in (cfg.index_path, cfg.public_store_path, cfg.manifest_path) if not p.is_file()]
    if missing:
        report.problems.append("missing outputs: " + ", ".join(str(p) for p in missing) + "; run rag build")
        return report
    index = index_json.read_index(cfg.index_path)
    index_ids = {c["id"] for c in index["chunks"]}
    report.index_chunks = len(index["chunks"])
    if report.index_chunks != index.get("totalChunks"):
        report.problems.append(f"index totalChunks {index.get('totalChunks')} != {report.index_chunks} chunks listed")
    store_ids = store.chunk_ids(cfg.public_store_path)
    summary = store.summarise(cfg.public_store_path)
    assert summary is not None
    report.store_chunks, report.fts_rows = summary.chunks, summary.fts_rows
    if index_ids != store_ids:
        only_index = sorted(index_ids - store_ids)[:5]
        only_store = sorted(store_ids - index_ids)[:5]
        report.problems.append(f"chunk IDs differ: only in index {only_index}, only in store {only_store}")
    if summary.fts_rows != summary.chunks:
        report.problems.append(f"FTS table has {summary.fts_rows} rows for {summary.chunks} chunks")
    for name, count in store.orphan_counts(cfg.public_store_path).items():
        if count:
            report.problems.append(f"{count} orphan rows in the store ({name.replace('_', ' ')})")
    if (summary.model, summary.dimension) != (index.get("model"), index.get("dimension")):
        report.problems.append(
            f"store model {summary.model} ({summary.dimension}) != index model {index.get('model')} ({index.get('dimension')})"
        )
    data = manifest.read_manifest(cfg.manifest_path) or {}
    report.manifest_chunks = sum(d.get("chunkCount", 0) for d in data.get("documents", {}).values())
    if report.manifest_chunks != report.index_chunks:
        report.problems.append(f"manifest counts {report.manifest_chunks} chunks, index has {report.index_chunks}")
    index_docs = {c["id"].rsplit("/chunk-", 1)[0] for c in index["chunks"]}
    orphan_docs = sorted(index_docs - set(data.get("documents", {})))
    if orphan_docs:
        report.problems.append(f"index chunks of documents missing from the manifest: {orphan_docs[:5]}")
    return report
