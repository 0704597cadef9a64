"""``rag-manifest.json``: what was indexed, from which file version, and when.

The manifest is the per-document ledger that incremental builds and
``rag status`` read; the index itself only knows chunks.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from rag_assets.records import EmbeddedCollection, in_name_order

MANIFEST_VERSION = "1.0"


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
        # Per-collection hashes and skipped files let `rag check` and the change sensor say
        # what changed since this build without reading the index.
        per_collection[col.collection] = {
            "contentHash": col.content_hash,
            "skipped": {s.path: s.reason for s in col.skipped},
        }
        counts: dict[str, int] = {}
        for chunk in col.chunks:
            counts[chunk.document_id] = counts.get(chunk.document_id, 0) + 1
        total_chunks += len(col.chunks)
        for doc in col.documents:
            documents[doc.id] = {
                "path": doc.path,
                "lastModified": doc.updated_at,
                "contentHash": doc.content_sha256,
                "chunkCount": counts.get(doc.id, 0),
                "indexedAt": _indexed_at(previous, doc.id, doc.content_sha256, built_at),
            }
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


def _indexed_at(previous: dict[str, Any] | None, doc_id: str, sha: str, built_at: str) -> str:
    """An unchanged document keeps the time it was first indexed in this version."""
    before = ((previous or {}).get("documents") or {}).get(doc_id)
    if before and before.get("contentHash") == sha and before.get("indexedAt"):
        return before["indexedAt"]
    return built_at


def render_manifest(manifest: dict[str, Any]) -> bytes:
    return orjson.dumps(manifest, option=orjson.OPT_INDENT_2)


def read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest, or None when it is missing or damaged (valid JSON of the wrong shape
    included: a build then treats every collection as new instead of crashing)."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    if not isinstance(data.get("collections", {}), dict) or not isinstance(data.get("documents", {}), dict):
        return None
    if not all(
        isinstance(v, dict) for v in (*data.get("collections", {}).values(), *data.get("documents", {}).values())
    ):
        return None
    return data
