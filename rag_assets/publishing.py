"""Publishing: the public index, its sidecar, the tier store and the manifest of one build,
written as one generation and made current in one atomic swap.

One collection at a time (a :class:`~rag_assets.records.RecordSequence` loads each record when
it is reached, and an unchanged collection is published from its facts without loading it):
its rows are synced into a rotating store slot and its segments written or named again. Kept
free of Dagster, like :mod:`rag_assets.pipeline`, whose steps produce the records published here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rag_assets.base.verified import Fingerprint, fingerprint
from rag_assets.config import RagConfig
from rag_assets.index import generations, index_json, manifest, pg_sync, store, store_slots, tier_logs
from rag_assets.index.browser import static_entries, write_static_files
from rag_assets.index.integrity import verification_record
from rag_assets.index.lexical_segments import rowids_digest
from rag_assets.index.segment_publish import SegmentPublisher, collect_segments
from rag_assets.ingest.doc_cache import settings_key
from rag_assets.ingest.sources import overall_content_hash
from rag_assets.records import CollectionFacts, EmbeddedCollection, RecordFacts, RecordSequence


class MixedModelsError(ValueError):
    """Collections embedded with different models cannot share one index."""


@dataclass(frozen=True)
class IndexModel:
    provider: str
    model: str
    dimension: int


@dataclass(frozen=True)
class Published:
    """What one publish wrote: the index header and sizes, the store's state, the manifest."""

    header: index_json.IndexHeader
    index_bytes: int
    meta_bytes: int
    vector_file_bytes: int  # embeddings-vectors.bin (vector_encoding int16-bin), else 0
    store_summary: store.StoreSummary
    store_sync: store.SyncResult
    manifest: dict
    postgres: pg_sync.PgSyncResult | None = None  # with store.backend postgres: the sync from the store
    segments_written: tuple[str, ...] = ()  # the segment files this publish wrote (data/segments)
    collections: list[CollectionFacts] = field(default_factory=list)  # in name order
    # The store slots this publish synced or seeded, each with its fingerprint once written
    # (see vouch_for_stores).
    written_stores: tuple[tuple[Path, Fingerprint | None], ...] = ()


def publish_all(
    collections: Sequence[EmbeddedCollection], cfg: RagConfig, built_at: str, full_build: bool = True
) -> Published:
    """Write the JSON index, its sidecar, the SQLite store and the manifest as one generation
    and make it current in one atomic swap (see :mod:`rag_assets.index.generations`).

    ``collections`` may be a :class:`~rag_assets.records.RecordSequence`, which loads each
    collection's records when it is reached: the store is written one collection at a time,
    never holding every record at once.

    A kill at any instant leaves readers with every output of one build: the previous
    generation until the swap, the new one after it. A generation left unfinished by a
    kill is removed by the next publish.
    """
    with generations.publish_lock(cfg):
        generations.remove_old_generations(cfg)
        before = generations.published(cfg)
        gen = generations.start_generation(cfg, built_at)
        try:
            written = _write_generation(collections, cfg, built_at, full_build, before, gen)
        except BaseException:
            generations.discard_generation(gen)
            raise
        generations.make_current(cfg, gen)
        # The segment files no kept generation names (those of superseded or unfinished ones).
        collect_segments(cfg.data_dir, generations.candidates(cfg))
        # The slots the next publishes sync by diff, copied now (after the first build) rather
        # than by the next two edits' publishes.
        seeded = store_slots.seed_slots(cfg, gen.store_path)
        written = replace(written, written_stores=(*written.written_stores, *((s, fingerprint(s)) for s in seeded)))
        # PostgreSQL follows the store just made current, by diff (nothing without the backend).
        written = replace(written, postgres=pg_sync.sync_if_configured(cfg, "public"))
    return written


def vouch_for_stores(cfg: RagConfig, published: Published) -> None:
    """Remember the store slots ``published`` wrote as verified, each while it is as the
    publish left it: the slot it synced was sound when the publish took it (it passed its
    ``quick_check``, or was made by the publish) and written since only by the publish's
    committed transactions, named by no generation until the swap, under the publish lock; a
    seeded slot is a copy of that store by SQLite's backup API, named by no generation. The
    check after the build then does not read the whole store again (1.15 s of a one-file edit's
    build at 100,000 chunks; 6.2 GB at a million), nor the next two publishes their seeded
    slots. Any write after the publish changes a fingerprint; `rag check --deep` reads them all.
    Kept apart from :func:`publish_all` so that a kill of the publish leaves no record half written."""
    kept = [(slot, written) for slot, written in published.written_stores if written is not None]
    if not kept:
        return
    record = verification_record(cfg)
    for slot, written in kept:
        if fingerprint(slot) == written:
            record.vouch(slot, "quick_check")
    record.save()


@dataclass
class _StorePass:
    """What the pass over the collections learns on the way: the model, the store's sync, what
    the report needs of each collection, their content hashes and chunk IDs."""

    model: IndexModel | None = None
    sync: store.SyncResult = field(default_factory=lambda: store.SyncResult(0, 0, 0, 0, False))
    facts: list[CollectionFacts] = field(default_factory=list)
    content_hashes: dict[str, str] = field(default_factory=dict)
    chunk_ids: list[str] = field(default_factory=list)  # the sidecar's digest of them (consistency check)


def _write_collections(
    collections: Iterable[EmbeddedCollection],
    built_at: str,
    gen: generations.Generation,
    slot: Path,
    publisher: SegmentPublisher,
    chunking_unchanged: bool = False,
) -> _StorePass:
    """One pass, one collection at a time, each collection's records released before the next
    is loaded: sync its rows into the generation's store slot (read by no one until the swap,
    so a transaction per collection is safe), then write (or name again) its segments, whose
    BM25 postings are read from the rows just written. Then drop the collections no longer
    published from the slot.

    A collection whose record's facts (see RecordSequence.facts) say it is unchanged since the
    previous generation, and since the slot's build, is not loaded at all: its rows stay, its
    segments are named again (``chunking_unchanged``: the previous build chunked alike, so the
    same content hash means the same chunks)."""
    done = _StorePass()
    sequence = collections if isinstance(collections, RecordSequence) else None
    names = sequence.names if sequence is not None else None
    for item in names if names is not None else collections:
        if isinstance(item, str):
            assert sequence is not None
            facts = sequence.facts(item) if chunking_unchanged else None
            if facts is not None and _kept(facts, built_at, gen, slot, publisher, done):
                continue
            col = sequence.record(item)
        else:
            col = item
        _write_collection(col, built_at, gen, slot, publisher, done)
        del col  # one collection's records at a time
    if done.model is None:
        raise ValueError("no collection has been embedded yet; run a build of at least one collection")
    store.purge_collections(slot, keep=done.content_hashes)
    return done


def _write_collection(
    col: EmbeddedCollection,
    built_at: str,
    gen: generations.Generation,
    slot: Path,
    publisher: SegmentPublisher,
    done: _StorePass,
) -> None:
    done.model = _same_model(done.model, col)
    synced = store.sync_contents(
        slot,
        [col],
        model=col.model,
        dimension=col.dimension,
        built_at=built_at,
        scope={col.collection},
        generation=gen.id,
    )
    done.sync = done.sync.plus(synced)
    publisher.add(col)
    done.facts.append(CollectionFacts.of(col))
    done.content_hashes[col.collection] = col.content_hash
    done.chunk_ids.extend(chunk.id for chunk in col.chunks)


def _kept(
    facts: RecordFacts,
    built_at: str,
    gen: generations.Generation,
    slot: Path,
    publisher: SegmentPublisher,
    done: _StorePass,
) -> bool:
    """Publish an unchanged collection from its facts, its rows in the slot and the previous
    generation's segments, without loading its record; False when any of them is of another
    state (then it is loaded and written as a changed one)."""
    name = facts.collection
    if not publisher.unchanged(name, facts.content_hash, facts.model, facts.dimension):
        return False
    rows = store_slots.keep_collection(slot, name, facts.content_hash, (facts.model, facts.dimension), built_at, gen.id)
    # The slot's rows are the record's (same hash and model): right whatever follows, and the
    # previous segments are named only when all of them are still on disk and their BM25 files
    # hold the slot's rowids (another slot may hold the same chunks under other rowids).
    if rows is None or len(rows) != facts.facts.chunks or not publisher.reuse(name, rowids_digest(rows)):
        return False
    chunk_ids = [chunk_id for chunk_id, _ in rows]
    done.model = _same_model(done.model, facts)
    done.facts.append(facts.facts)
    done.content_hashes[name] = facts.content_hash
    done.chunk_ids.extend(chunk_ids)
    return True


def _same_model(model: IndexModel | None, col: EmbeddedCollection | RecordFacts) -> IndexModel:
    """The index's one model, checked against each collection as it comes."""
    if model is None:
        return IndexModel(col.provider, col.model, col.dimension)
    if (model.model, model.dimension) != (col.model, col.dimension):
        listed = ", ".join(
            sorted(f"{m} ({d})" for m, d in {(model.model, model.dimension), (col.model, col.dimension)})
        )
        raise MixedModelsError(
            f"collections were embedded with different models: {listed}; one index holds one model, "
            "so rebuild every collection with the configured embedder (rag build, or materialize all partitions)"
        )
    return model


def _header(cfg: RagConfig, done: _StorePass, built_at: str, gen: generations.Generation) -> index_json.IndexHeader:
    """The index's header from what the pass learnt (no record is loaded again for it)."""
    m = done.model
    assert m is not None
    counts = {f.collection: {"chunks": f.chunks, "documents": f.documents} for f in done.facts}
    return index_json.IndexHeader(
        model=m.model,
        dimension=m.dimension,
        provider=m.provider,
        built_at=built_at,
        content_hash=overall_content_hash(done.content_hashes),
        total_chunks=sum(f.chunks for f in done.facts),
        collections=counts,
        generation=gen.id,
        vector_encoding=cfg.vector_encoding,
    )


def _write_generation(
    collections: Sequence[EmbeddedCollection],
    cfg: RagConfig,
    built_at: str,
    full_build: bool,
    before: generations.Generation,
    gen: generations.Generation,
) -> Published:
    # The store: a rotating slot synced by diff (rag_assets.index.store_slots), never a copy.
    slot = store_slots.free_slot(cfg, [g.store_path for g in generations.candidates(cfg) if g.id != gen.id])
    # A kept slot passed its quick_check (or was remembered so); a copied or empty one is made now.
    store_slots.prepare_slot(slot, before.store_path, verification_record(cfg))
    store_slots.link_slot(slot, gen.store_path)
    publisher = SegmentPublisher(
        cfg.data_dir,
        gen.store_path,
        gen.folder,
        cfg.vector_decimals,
        cfg.vector_encoding,
        built_at,
        previous_index=before.index_path,
        previous_manifest=before.manifest_path,
    )
    try:
        # One collection at a time: only the segments whose inputs changed are written.
        previous_meta = index_json.read_meta(before.meta_path) or {}
        chunking_unchanged = previous_meta.get("chunking") == settings_key(cfg.chunking)
        done = _write_collections(collections, built_at, gen, slot, publisher, chunking_unchanged)
        header = _header(cfg, done, built_at, gen)
        assert done.model is not None
        index_payload = publisher.index_payload(header, cfg.collection_weights, done.model.provider)
    finally:
        publisher.close()
    gen.index_path.write_bytes(index_payload)
    index = index_json.WrittenIndex(len(index_payload), hashlib.sha256(index_payload).hexdigest())
    index_bytes = publisher.index_bytes(index.size)
    manifest_data = publisher.manifest(header, full_build=full_build, generation=gen.id, index_bytes=index_bytes)
    manifest_payload = manifest.render_manifest(manifest_data)
    gen.manifest_path.write_bytes(manifest_payload)
    write_static_files(gen.folder)
    # The sidecar names the index (which names its segments with their digests) and every
    # other file of the generation with its digest (rag_assets.index.integrity).
    files = {generations.MANIFEST_NAME: index_json.digest_entry(manifest_payload), **static_entries()}
    meta_payload = index_json.render_meta(
        header, done.chunk_ids, index, files=files, chunking=settings_key(cfg.chunking), index_bytes=index_bytes
    )
    gen.meta_path.write_bytes(meta_payload)
    # The logs are not in a generation (rag_assets.index.tier_logs): an older current store's rows
    # move to the log file before the swap, and the slot drops the log tables it may still hold.
    tier_logs.ensure(cfg.public_store_path)
    store_slots.drop_legacy_logs(slot)
    store_slots.settle(slot)
    synced = store_slots.slot_named(gen.store_path) or slot
    summary = store.summarise(gen.store_path)
    assert summary is not None
    vector_bytes = sum(s.files["vectors"].size for s in publisher.segments if "vectors" in s.files)
    return Published(
        header,
        index_bytes,
        len(meta_payload),
        vector_bytes,
        summary,
        done.sync,
        manifest_data,
        segments_written=tuple(publisher.written),
        collections=done.facts,
        written_stores=((synced, fingerprint(synced)),),
    )
