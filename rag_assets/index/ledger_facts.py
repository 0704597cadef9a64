"""What the output check needs of the manifest's ledger, kept per ledger segment.

`outputs_consistent` compares the manifest's documents with the store's: the chunk count the
ledger sums to, and whether the store holds chunks of a document the ledger does not name.
Reading the whole ledger for that (every segment, a dict of every document) took 3.3 of a
million-chunk edit's 6.8 s check. A ledger segment is named in the manifest with its SHA-256,
and what a segment holds never changes under that name and digest, so its facts are kept in
``data/ledger-facts.json`` by both: each check reads only the segments it has not seen (after
an edit, the edited collection's few), and the rest from there. The file is a cache the check
trusts, as the stat cache is trusted for file hashes: deleting it costs one whole read.

The facts of a segment: its documents, the chunks they count, and an order-independent digest
(:func:`id_digest`) of the documents that have chunks, which a store holding exactly those
documents matches. A check whose store does not match, or whose manifest is not as a publish
writes it (an entry of another shape, a document outside its segment's collection and bucket,
a chunk count that is not a whole number), reads the whole ledger and says what it says, as
before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.index.manifest import read_ledger_segment, read_raw_manifest
from rag_assets.index.segments import bucket_of

FACTS_VERSION = 2  # 2: keyed by name, SHA-256, size and the segment's collection and bucket
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


def facts_of(documents: Mapping[str, Any], home: tuple[str, int, int] | None = None) -> LedgerFacts | None:
    """The facts of ledger entries ``{document id: {"chunkCount": n, ...}}``; None when any
    entry is not as a publish writes it (not an object, a chunk count that is not a whole
    number), or, with ``home`` (collection, bucket, buckets), a document that does not belong
    in that segment: then only the whole ledger, read as before, can say what it holds."""
    counted: list[str] = []
    chunks = 0
    for doc_id, entry in documents.items():
        count = entry.get("chunkCount", 0) if isinstance(entry, dict) else None
        if type(count) is not int or count < 0:
            return None
        if home is not None and not _belongs(doc_id, *home):
            return None
        chunks += count
        if count:
            counted.append(doc_id)
    return LedgerFacts(len(documents), chunks, len(counted), id_digest(counted))


def _belongs(doc_id: str, collection: str, bucket: int, buckets: int) -> bool:
    # Each document is in one segment, its collection's bucket (rag_assets.index.segments): so
    # no document is counted twice, which read_manifest's merge (the later entry wins) would not do.
    return doc_id.startswith(f"{collection}/") and bucket_of(doc_id, buckets) == bucket


def manifest_facts(manifest_path: Path, facts_path: Path) -> LedgerFacts | None:
    """The facts of the whole ledger of the manifest at ``manifest_path``, from
    ``facts_path``'s kept facts and the segments not kept yet (then kept, when the file can be
    written: else it only costs the next check the reads). None: the manifest is missing,
    damaged or not as a publish writes it, so the caller reads it whole."""
    data = read_raw_manifest(manifest_path)
    ledger = data.get("ledger") if data else None
    collections = data.get("collections", {}) if data else None
    if not isinstance(ledger, list) or not isinstance(collections, dict):
        return None  # the older layout (its ledger inline, small) or a damaged one: read whole
    if not all(isinstance(v, dict) for v in collections.values()):
        return None
    kept = _load(facts_path)
    now: dict[str, list[int]] = {}
    homes: set[tuple[str, int, int]] = set()
    total = NO_FACTS
    for entry in ledger:
        home = _home(entry)
        if home is None or home in homes:
            return None
        homes.add(home)
        facts = _segment_facts(manifest_path, entry["ledger"], home, kept, now)
        if facts is None:
            return None
        total = total + facts
    if now != kept:
        try:
            atomic_write_bytes(facts_path, orjson.dumps({"version": FACTS_VERSION, "segments": now}))
        except OSError:
            pass  # a read-only output folder: the next check reads these segments again
    return total


def _home(entry: Any) -> tuple[str, int, int] | None:
    """A ledger entry's collection, bucket and bucket count, when it is as a publish writes it."""
    if not isinstance(entry, dict) or not isinstance(entry.get("ledger"), dict):
        return None
    collection, bucket, buckets = entry.get("collection"), entry.get("bucket"), entry.get("buckets")
    if not isinstance(collection, str) or type(bucket) is not int or type(buckets) is not int:
        return None
    if buckets < 1 or buckets & (buckets - 1) or not 0 <= bucket < buckets:
        return None
    return collection, bucket, buckets


def _segment_facts(
    manifest_path: Path,
    segment: dict,
    home: tuple[str, int, int],
    kept: dict[str, list[int]],
    now: dict[str, list[int]],
) -> LedgerFacts | None:
    """One ledger segment's facts: kept ones under its name and SHA-256 (which the damage
    check verifies), else read; only a segment named with both is kept."""
    name, sha256, size = segment.get("file"), segment.get("sha256"), segment.get("sizeBytes")
    verifiable = isinstance(name, str) and isinstance(sha256, str) and len(sha256) == 64 and type(size) is int
    key = f"{name}:{sha256}:{size}:{'/'.join(map(str, home))}"
    if verifiable and key in kept:
        now[key] = kept[key]
        return LedgerFacts(*kept[key])
    part = read_ledger_segment(manifest_path, segment)
    facts = facts_of(part, home) if part is not None else None
    if facts is not None and verifiable:
        now[key] = [facts.documents, facts.chunks, facts.with_chunks, facts.digest]
    return facts


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
