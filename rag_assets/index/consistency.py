"""Cross-checks between the published outputs: JSON index, SQLite store, FTS table, manifest."""

from __future__ import annotations

from dataclasses import dataclass, field

from rag_assets.base.verified import VerificationRecord
from rag_assets.config import RagConfig
from rag_assets.index import generations, index_json, ledger_facts, manifest, store
from rag_assets.index.integrity import publication_damage


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


def check_public_outputs(cfg: RagConfig, record: VerificationRecord | None = None) -> ConsistencyReport:
    """Same chunk IDs and counts everywhere, one model, one generation, and no orphan rows.
    ``record``: the published files verified before and unchanged since are not read again for
    damage (after a one-file edit, the few segments it wrote are)."""
    report = ConsistencyReport()
    gen = generations.published(cfg)  # resolved once: every file below is of one build
    missing = [p for p in (gen.index_path, gen.store_path, gen.manifest_path) if not p.is_file()]
    if missing:
        report.problems.append("missing outputs: " + ", ".join(str(p) for p in missing) + "; run rag build")
        return report
    damage = publication_damage(cfg, gen, record)
    if damage:
        report.problems.extend(f"damaged output {d}" for d in damage)
        return report
    # The sidecar records the index's size and a digest of its chunk IDs at write time, so
    # the check need not parse a 50 MB index: a size mismatch means a torn or foreign file.
    meta = index_json.read_meta(gen.meta_path) or {}
    index_size = gen.index_path.stat().st_size
    if meta.get("sizeBytes") != index_size:
        report.problems.append(f"index is {index_size} bytes but its sidecar says {meta.get('sizeBytes')}")
    report.index_chunks = int(meta.get("totalChunks") or 0)
    store_ids = store.sorted_chunk_ids(gen.store_path)
    summary = store.summarise(gen.store_path)
    assert summary is not None
    report.store_chunks, report.fts_rows = summary.chunks, summary.fts_rows
    if meta.get("chunkIdsSha256") != index_json.chunk_ids_digest(store_ids):
        index_ids = {c["id"] for c in index_json.read_index(gen.index_path)["chunks"]}
        only_index = sorted(index_ids.difference(store_ids))[:5]
        only_store = sorted(set(store_ids) - index_ids)[:5]
        report.problems.append(f"chunk IDs differ: only in index {only_index}, only in store {only_store}")
    if summary.fts_rows != summary.chunks:
        report.problems.append(f"FTS table has {summary.fts_rows} rows for {summary.chunks} chunks")
    for name, count in store.orphan_counts(gen.store_path).items():
        if count:
            report.problems.append(f"{count} orphan rows in the store ({name.replace('_', ' ')})")
    report.problems.extend(store.vector_block_problems(gen.store_path, summary))
    if (summary.model, summary.dimension) != (meta.get("model"), meta.get("dimension")):
        report.problems.append(
            f"store model {summary.model} ({summary.dimension}) != index model {meta.get('model')} ({meta.get('dimension')})"
        )
    facts = ledger_facts.manifest_facts(gen.manifest_path, cfg.ledger_facts_path)
    store_docs = {chunk_id.rsplit("/chunk-", 1)[0] for chunk_id in store_ids}
    orphan_docs: list[str] = []
    if facts is not None and facts.chunks == report.index_chunks and _same_documents(store_docs, facts):
        report.manifest_chunks = facts.chunks
    else:
        # Something differs (or the kept facts are wrong): the whole ledger read, to say what.
        documents = (manifest.read_manifest(gen.manifest_path) or {}).get("documents", {})
        report.manifest_chunks = sum(d.get("chunkCount", 0) for d in documents.values())
        orphan_docs = sorted(store_docs - set(documents))
    if report.manifest_chunks != report.index_chunks:
        report.problems.append(f"manifest counts {report.manifest_chunks} chunks, index has {report.index_chunks}")
    if orphan_docs:
        report.problems.append(f"chunks of documents missing from the manifest: {orphan_docs[:5]}")
    return report


def _same_documents(store_docs: set[str], facts: ledger_facts.LedgerFacts) -> bool:
    """Whether the store's documents are the ledger's documents that count chunks (by digest)."""
    return len(store_docs) == facts.with_chunks and ledger_facts.id_digest(store_docs) == facts.digest
