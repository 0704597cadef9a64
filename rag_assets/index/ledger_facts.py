"""What the output check needs of the manifest's ledger, kept per ledger segment.

`outputs_consistent` compares the manifest's documents with the store's: the chunk count the
ledger sums to, and whether the store holds chunks of a document the ledger does not name.
Reading the whole ledger for that (every segment, a dict of every document) took 3.3 of a
million-chunk edit's 6.8 s check. A ledger segment is named in the manifest with its SHA-256,
and what a segment holds never changes under that name and digest, so its facts are kept in
``data/ledger-facts.json`` by both: each check reads only the segments it has not seen (after
an edit, the edited collection's few), and the rest from there.

The facts of a segment: its documents, the chunks they count, and an order-independent digest
(:func:`id_digest`) of the documents that have chunks, which a store holding exactly those
documents matches. A check whose store does not match reads the whole ledger and names the
documents, as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.index.manifest import read_ledger_segment, read_manifest, read_raw_manifest

FACTS_VERSION = 1
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class LedgerFacts:
    documents: int
    chunks: int
    with_chunks: int  # documents counting at least one chunk
    digest: int  # id_digest of those documents

    def __add__(self, other: LedgerFacts) -> LedgerFacts:
        return LedgerFacts(
            self.documents + other.documents,
            self.chunks + other.chunks,
            self.with_chunks + other.with_chunks,
            (self.digest + other.digest) & _MASK,
        )


NO_FACTS = LedgerFacts(0, 0, 0, 0)


def id_digest(ids: Iterable[str]) -> int:
    """A digest of a set of IDs that does not depend on their order (a sum of 64-bit hashes)."""
    total = 0
    for item in ids:
        total += int.from_bytes(hashlib.blake2b(item.encode("utf-8"), digest_size=8).digest(), "little")
    return total & _MASK


def facts_of(documents: Mapping[str, Any]) -> LedgerFacts:
    """The facts of ledger entries ``{document id: {"chunkCount": n, ...}}``."""
    counted = [doc_id for doc_id, entry in documents.items() if _chunks(entry) > 0]
    return LedgerFacts(len(documents), sum(_chunks(e) for e in documents.values()), len(counted), id_digest(counted))


def _chunks(entry: Any) -> int:
    count = entry.get("chunkCount", 0) if isinstance(entry, dict) else 0
    return count if isinstance(count, int) else 0


def manifest_facts(manifest_path: Path, facts_path: Path) -> LedgerFacts | None:
    """The facts of the whole ledger of the manifest at ``manifest_path`` (None: missing or
    damaged), from ``facts_path``'s kept facts and the segments not kept yet (then kept)."""
    data = read_raw_manifest(manifest_path)
    if data is None:
        return None
    ledger = data.get("ledger")
    if not isinstance(ledger, list):  # the older layout: its ledger inline
        whole = read_manifest(manifest_path)
        return facts_of(whole.get("documents", {})) if whole else None
    kept = _load(facts_path)
    now: dict[str, list[int]] = {}
    total = NO_FACTS
    for entry in ledger:
        segment = entry.get("ledger") if isinstance(entry, dict) else None
        if not isinstance(segment, dict):
            return None
        key = f"{segment.get('file')}:{segment.get('sha256')}"
        known = kept.get(key)
        if known is None:
            part = read_ledger_segment(manifest_path, segment)
            if part is None:
                return None
            facts = facts_of(part)
            known = [facts.documents, facts.chunks, facts.with_chunks, facts.digest]
        now[key] = known
        total = total + LedgerFacts(*known)
    if now != kept:
        atomic_write_bytes(facts_path, orjson.dumps({"version": FACTS_VERSION, "segments": now}))
    return total


def _load(path: Path) -> dict[str, list[int]]:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("version") != FACTS_VERSION or not isinstance(data.get("segments"), dict):
        return {}
    return {
        key: value
        for key, value in data["segments"].items()
        if isinstance(value, list) and len(value) == 4 and all(isinstance(v, int) for v in value)
    }
