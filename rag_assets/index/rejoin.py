"""Publishing sharded collections: the shards' records rejoined into one record per collection.

A sharded collection's partitions (``docs~0``, ``docs~1``, ...) each hold the documents,
chunks and vectors of their own files. Publishing needs the collection whole, and exactly
as it would be unsharded, so that the published outputs do not depend on the shard count:
documents in path order (the walker's), chunks in document order, the skipped files in path
order, the content hash over every file, and one document per slug (the first in path
order, as the parser keeps it; shards parse apart, so two of them may each keep one).

A rejoined collection's facts are kept (``<intermediate>/joined/<collection>.json``) with the
facts of the shard records they were joined from, so the next publish tells an unchanged
sharded collection from its shards' facts, as it tells an unsharded one from its own, without
unpickling and rejoining every shard (at 100,000 chunks in 10 collections of 2 shards, 9 of a
one-file edit's 17 CPU s).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

import numpy as np
import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.config import RagConfig
from rag_assets.ingest.parsing import slug_taken
from rag_assets.ingest.shards import Shard, collection_of, collection_shards
from rag_assets.ingest.sources import combine_hashes
from rag_assets.records import Document, EmbeddedCollection, RecordFacts, RecordSequence, SkippedFile

JOINED_FOLDER = "joined"  # under the intermediate folder: the rejoined records' facts
_SLUG_TAKEN = re.compile(r"^same slug '(?P<slug>.*)' as .*; rename one of them$", re.DOTALL)


class IncompleteShardsError(ValueError):
    """Some shards of a collection have no current record: publishing it would lose files."""


def rejoin_collections(
    cfg: RagConfig, records: Mapping[str, EmbeddedCollection], ledger: Collection[str] | None = None
) -> list[EmbeddedCollection]:
    """One record per collection, in name order, from ``{partition key: record}``, all loaded
    (see :func:`rejoined` for one collection at a time)."""
    return list(rejoined(cfg, records, ledger))


def rejoined(
    cfg: RagConfig,
    records: Mapping[str, EmbeddedCollection],
    ledger: Collection[str] | None = None,
    keep_chunks: int = 0,
) -> RecordSequence:
    """One record per collection, in name order, from ``{partition key: record}``, each made
    when it is reached: a collection's records (its shards') are read from ``records`` only
    then, so a lazy mapping (rag_assets.defs.io_managers) is never loaded whole.

    A collection with no record at all (never built) is left out, as an unbuilt unsharded
    collection is. One with only some of its shards current (a shard never built, or built
    under another shard count) is refused: publishing it would drop the other shards' files,
    and the previous outputs stay. ``ledger``, the partitions the indexed ledger names (see
    rag_assets.index.freshness), tells a current record from one left by an earlier layout of
    the same count (3 shards, then 2, then 3 again: ``docs~2``'s record is of the first 3).
    ``keep_chunks``: see :class:`~rag_assets.records.RecordSequence`.
    """
    keys: dict[str, list[str]] = defaultdict(list)
    for key in records:
        keys[collection_of(key)].append(key)
    read_facts = getattr(records, "facts", None)  # a lazy mapping's facts, read without loading records
    return RecordSequence(
        keys,
        lambda name: _join(cfg, name, {key: records[key] for key in keys[name]}, ledger),
        keep_chunks,
        (lambda name: _facts(cfg, name, keys[name], read_facts, ledger)) if read_facts else None,
    )


def _facts(
    cfg: RagConfig,
    name: str,
    keys: list[str],
    read_facts: Callable[[str], RecordFacts | None],
    ledger: Collection[str] | None = None,
) -> RecordFacts | None:
    """The facts of the collection's record as :func:`_join` would make it, without loading it:
    an unsharded collection's own (a record made unsharded, under the collection's own key); a
    sharded one's kept joined facts while every shard's facts are those they were joined from.
    None: load the collection."""
    shards = collection_shards(cfg, name)
    if sorted(keys) != sorted(s.key for s in shards):
        return None
    if len(shards) == 1 and not shards[0].sharded:
        facts = read_facts(shards[0].key)
        return facts if facts is not None and facts.shard is None else None
    parts: dict[str, RecordFacts] = {}
    for shard in shards:
        facts = read_facts(shard.key)
        if facts is None or facts.shard != (shard.index, shard.count) or not _in_ledger(shard, ledger):
            return None
        parts[shard.key] = facts
    return read_joined_facts(cfg, name, parts)


def joined_facts_path(cfg: RagConfig, collection: str) -> Path:
    """Where the facts of a sharded collection's last rejoined record are kept."""
    return cfg.intermediate_dir / JOINED_FOLDER / f"{collection}.json"


def read_joined_facts(cfg: RagConfig, collection: str, parts: Mapping[str, RecordFacts]) -> RecordFacts | None:
    """The kept facts of the collection's rejoined record, when they were joined from shard
    records of exactly the facts ``parts`` (``{partition key: facts}``); else None."""
    try:
        data = orjson.loads(joined_facts_path(cfg, collection).read_bytes())
        if data["shards"] != {key: facts.to_json() for key, facts in parts.items()}:
            return None
        return RecordFacts.from_json(data["joined"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def write_joined_facts(
    cfg: RagConfig, collection: str, parts: Mapping[str, EmbeddedCollection], joined: EmbeddedCollection
) -> None:
    """Keep the rejoined record's facts with the facts of the shard records it was joined from.
    A file that cannot be written only costs the next publish a rejoin."""
    payload = {
        "shards": {key: RecordFacts.of(record).to_json() for key, record in parts.items()},
        "joined": RecordFacts.of(joined).to_json(),
    }
    path = joined_facts_path(cfg, collection)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, orjson.dumps(payload))
    except OSError:
        path.unlink(missing_ok=True)


def _join(
    cfg: RagConfig, name: str, parts: dict[str, EmbeddedCollection], ledger: Collection[str] | None
) -> EmbeddedCollection:
    shards = collection_shards(cfg, name)
    # Records under keys of another shard count (partitions not yet synced away) are not
    # the collection's; records under the current keys but made under another count are stale.
    current = {
        s.key: parts[s.key] for s in shards if s.key in parts and _made_as(parts[s.key], s) and _in_ledger(s, ledger)
    }
    missing = [s.key for s in shards if s.key not in current]
    if missing:
        raise IncompleteShardsError(
            f"collection {name}: no current record for {', '.join(missing)} (of {len(shards)} shard(s)); "
            "build every shard of the collection before publishing it (rag build, or materialize its partitions)"
        )
    records_in_order = [current[s.key] for s in shards]
    if len(shards) == 1:
        return records_in_order[0]
    joined = rejoin(name, records_in_order)
    write_joined_facts(cfg, name, current, joined)
    return joined


def _in_ledger(shard: Shard, ledger: Collection[str] | None) -> bool:
    """Whether the ledger names the shard. A layout change drops the other layout's entries
    from it, so a shard's record it does not name was made before the last change (as with
    freshness.records_current, an unsharded collection is trusted without an entry)."""
    return ledger is None or not shard.sharded or shard.key in ledger


def _made_as(record: EmbeddedCollection, shard: Shard) -> bool:
    """Whether the record was built as this shard (an unsharded record for an unsharded collection)."""
    if not shard.sharded:
        return record.shard is None
    return record.shard is not None and (record.shard.index, record.shard.count) == (shard.index, shard.count)


def rejoin(collection: str, shards: Sequence[EmbeddedCollection]) -> EmbeddedCollection:
    """The collection's record from all of its shards' records (see the module docstring)."""
    models = {(s.model, s.dimension) for s in shards}
    if len(models) > 1:
        raise ValueError(f"collection {collection}: its shards were embedded with different models {sorted(models)}")
    owned = sorted(((doc, i) for i, s in enumerate(shards) for doc in s.documents), key=lambda pair: pair[0].path)
    owner: dict[str, str] = {}
    kept: list[tuple[Document, int]] = []
    skipped: list[SkippedFile] = []
    for doc, i in owned:
        if doc.slug in owner:
            skipped.append(slug_taken(doc.path, doc.slug, owner[doc.slug]))
        else:
            owner[doc.slug] = doc.path
            kept.append((doc, i))
    for shard in shards:
        skipped.extend(_with_global_owner(item, owner) for item in shard.skipped)
    rows = [_rows_by_document(s) for s in shards]
    order = [(i, row) for doc, i in kept for row in rows[i].get(doc.id, [])]
    kept_ids = {(i, doc.id) for doc, i in kept}
    first = shards[0]
    vectors = _gathered_vectors(shards, order, first.dimension)
    entries = {path: digest for s in shards if s.shard for path, digest in s.shard.hash_entries.items()}
    return EmbeddedCollection(
        collection=collection,
        content_hash=combine_hashes(entries),
        documents=[doc for doc, _ in kept],
        chunks=[shards[i].chunks[row] for i, row in order],
        vectors=vectors,
        model=first.model,
        dimension=first.dimension,
        skipped=sorted(dict.fromkeys(skipped), key=lambda item: item.path),
        provider=first.provider,
        failed_chunk_ids=[
            chunk_id
            for i, s in enumerate(shards)
            for chunk_id in s.failed_chunk_ids
            if (i, chunk_id.rsplit("/chunk-", 1)[0]) in kept_ids
        ],
    )


def _gathered_vectors(shards: Sequence[EmbeddedCollection], order: list[tuple[int, int]], dimension: int) -> np.ndarray:
    """The rows ``order`` names (shard, row), in that order, as one float32 matrix: one
    gather per shard into a matrix made once (a stack of one-row slices took seconds at
    100,000 chunks)."""
    out = np.empty((len(order), dimension), dtype=np.float32)
    if not order:
        return out
    shard_of = np.fromiter((i for i, _ in order), dtype=np.int64, count=len(order))
    row_of = np.fromiter((row for _, row in order), dtype=np.int64, count=len(order))
    for i, shard in enumerate(shards):
        at = np.flatnonzero(shard_of == i)
        if len(at):
            out[at] = np.asarray(shard.vectors)[row_of[at]]
    return out


def _rows_by_document(record: EmbeddedCollection) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = defaultdict(list)
    for row, chunk in enumerate(record.chunks):
        rows[chunk.document_id].append(row)
    return rows


def _with_global_owner(item: SkippedFile, owner: dict[str, str]) -> SkippedFile:
    """A shard names the first owner of a slug *in the shard*; unsharded, the parser names the
    first in the whole collection, which may sit in another shard."""
    match = _SLUG_TAKEN.match(item.reason)
    if match is None or match["slug"] not in owner:
        return item
    return slug_taken(item.path, match["slug"], owner[match["slug"]])
