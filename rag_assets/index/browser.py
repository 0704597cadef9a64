"""The browser search published beside the index: its BM25 data, ``rag-search.js`` and a demo page.

Every build writes them into its generation folder (linked from ``public/``, see
:mod:`rag_assets.index.generations`), so a static host serves the script, its data and the
index of one build. The two static files ship as package data in ``rag_assets/index/js/``;
no build step. The sidecar names the BM25 file and its digest (``lexical``), so the script
re-fetches either file only when the sidecar says it changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from rag_assets.index.index_json import digest_entry
from rag_assets.index.lexical_json import LEXICAL_NAME, write_lexical
from rag_assets.records import EmbeddedCollection, in_name_order

STATIC_FILES = ("rag-search.js", "rag-vectors.js", "search.html")


def static_file(name: str) -> bytes:
    """One of the shipped static files (package data)."""
    return resources.files("rag_assets.index").joinpath("js", name).read_bytes()


def write_browser_files(
    folder: Path,
    store_path: Path,
    collections: Iterable[EmbeddedCollection],
    collection_weights: Mapping[str, float],
    provider: str | None,
    generation: str | None = None,
) -> dict[str, Any]:
    """Write the BM25 data and the static files into ``folder``; the sidecar's ``lexical`` entry."""
    ids = [chunk.id for col in in_name_order(collections) for chunk in col.chunks]
    written = write_lexical(folder / LEXICAL_NAME, store_path, ids, collection_weights, provider, generation=generation)
    for name in STATIC_FILES:
        (folder / name).write_bytes(static_file(name))
    return {"file": LEXICAL_NAME, "sizeBytes": written.size, "sha256": written.sha256}


def write_static_files(folder: Path) -> None:
    """The static files (the BM25 data is in the index's segments: rag_assets.index.segments)."""
    for name in STATIC_FILES:
        (folder / name).write_bytes(static_file(name))


def static_entries() -> dict[str, str]:
    """The sidecar's ``files`` entries of the static files (what write_browser_files writes)."""
    return {name: digest_entry(static_file(name)) for name in STATIC_FILES}
