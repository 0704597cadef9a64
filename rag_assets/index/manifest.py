"""``rag-manifest.json``: what was indexed, from which file version, and when.

The manifest is the per-document ledger that incremental builds and
``rag status`` read; the index itself only knows chunks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

import orjson

from rag_assets.index.segments import folder_of_generation, read_segment_json
from rag_assets.records import EmbeddedCollection, in_name_order

MANIFEST_VERSION = "1.0"
SEGMENTED_MANIFEST_VERSION = "2.0"  # the ledger in segments (rag_assets.index.segments)


def build_manifest(
    collections: Iterable[EmbeddedCollection],
    *,
    model: str,
    dimension: int,
    built_at: str,
    index_size_bytes: int,
    provider: str = "hashing",
    full_build: bool = True,
    previous: dict[str, Any] | None = None,
    generation: str | None = None,
) -> dict[str, Any]:
    documents: dict[str, dict[str, Any]] = {}
    per_collection: dict[str, dict[str, Any]] = {}
    total_chunks = 0
    for col in in_name_order(collections):
        per_collection[col.collection] = collection_entry(col)
        total_chunks += len(col.chunks)
        documents.update(ledger_documents(col, built_at, ((previous or {}).get("documents") or {})))
    last_full = built_at if full_build else (previous or {}).get("lastFullBuild")
    last_incremental = None if full_build else built_at
    return {
        "version": MANIFEST_VERSION,
        "generation": generation,
        "model": model,
        "dimension": dimension,
        "provider": provider,
        "lastFullBuild": last_full,
        "lastIncrementalUpdate": last_incremental,
        "collections": per_collection,
        "documents": dict(sorted(documents.items())),
        "stats": {
            "totalDocuments": len(documents),
            "totalChunks": total_chunks,
            "indexSizeMB": round(index_size_bytes / 1_000_000, 3),
        },
    }


def collection_entry(col: EmbeddedCollection) -> dict[str, Any]:
    """A collection's entry: per-collection hashes and skipped files let `rag check` and the
    change sensor say what changed since this build without reading the index."""
    return {"contentHash": col.content_hash, "skipped": {s.path: s.reason for s in col.skipped}}


def ledger_documents(col: EmbeddedCollection, built_at: str, previous: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ledger entries of ``col``'s documents, by ID in ID order; ``previous``: the entries
    of the last build (ID -> entry), for the time each unchanged document was first indexed."""
    counts: dict[str, int] = {}
    for chunk in col.chunks:
        counts[chunk.document_id] = counts.get(chunk.document_id, 0) + 1
    documents = {
        doc.id: {
            "path": doc.path,
            "lastModified": doc.updated_at,
            "contentHash": doc.content_sha256,
            "chunkCount": counts.get(doc.id, 0),
            "indexedAt": _indexed_at(previous, doc.id, doc.content_sha256, built_at),
        }
        for doc in col.documents
    }
    return dict(sorted(documents.items()))


def build_segmented_manifest(
    *,
    model: str,
    dimension: int,
    provider: str,
    built_at: str,
    full_build: bool,
    previous: dict[str, Any] | None,
    generation: str | None,
    collections: dict[str, dict[str, Any]],
    ledger: list[dict[str, Any]],
    totals: tuple[int, int, int],
) -> dict[str, Any]:
    """The manifest of a segmented publish: the header and per-collection entries, and the
    ledger's segments (``ledger``: collection, bucket, documents, file, sizeBytes, sha256) in
    place of ``documents``; ``totals``: documents, chunks and the index's bytes."""
    documents, chunks, index_bytes = totals
    return {
        "version": SEGMENTED_MANIFEST_VERSION,
        "generation": generation,
        "model": model,
        "dimension": dimension,
        "provider": provider,
        "lastFullBuild": built_at if full_build else (previous or {}).get("lastFullBuild"),
        "lastIncrementalUpdate": None if full_build else built_at,
        "collections": dict(sorted(collections.items())),
        "ledger": ledger,
        "stats": {
            "totalDocuments": documents,
            "totalChunks": chunks,
            "indexSizeMB": round(index_bytes / 1_000_000, 3),
        },
    }


def _indexed_at(previous: dict[str, Any], doc_id: str, sha: str, built_at: str) -> str:
    """An unchanged document keeps the time it was first indexed in this version."""
    before = previous.get(doc_id)
    if before and before.get("contentHash") == sha and before.get("indexedAt"):
        return before["indexedAt"]
    return built_at


def render_manifest(manifest: dict[str, Any]) -> bytes:
    return orjson.dumps(manifest, option=orjson.OPT_INDENT_2)


def read_raw_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest file as it is (a segmented one's ledger not read), or None when it is
    missing or not a JSON object."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def read_ledger_segment(path: Path, entry: Any) -> dict[str, Any] | None:
    """One ledger segment (``entry``: file, sizeBytes, sha256) named by the manifest at
    ``path``; None when missing or damaged."""
    if not isinstance(entry, dict):
        return None
    try:
        data = read_segment_json(folder_of_generation(path.parent), entry)
    except (OSError, KeyError, TypeError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def read_manifest(path: Path, collections: Collection[str] | None = None) -> dict[str, Any] | None:
    """The manifest, or None when it is missing or damaged (valid JSON of the wrong shape
    included: a build then treats every collection as new instead of crashing). A segmented
    manifest's ledger segments are read into ``documents``, so readers see one shape.

    ``collections``: read only the ledger segments of these collections (``documents`` then
    holds theirs alone; a manifest of the older layout, whose ledger is inline, holds all).
    Change detection needs the entries of the changed collections only, and reading the whole
    ledger grew with the corpus (about 0.7 s a read at 100,000 chunks)."""
    data = read_raw_manifest(path)
    if data is None:
        return None
    if isinstance(data.get("ledger"), list):
        documents: dict[str, Any] = {}
        for entry in data["ledger"]:
            if not isinstance(entry, dict):
                return None
            if collections is not None and entry.get("collection") not in collections:
                continue
            part = read_ledger_segment(path, entry.get("ledger"))
            if part is None:
                return None
            documents.update(part)
        data["documents"] = dict(sorted(documents.items()))
    if not isinstance(data.get("collections", {}), dict) or not isinstance(data.get("documents", {}), dict):
        return None
    if not all(
        isinstance(v, dict) for v in (*data.get("collections", {}).values(), *data.get("documents", {}).values())
    ):
        return None
    return data
