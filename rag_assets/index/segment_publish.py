"""Publishing the public index as segments, one collection at a time, then its commit files.

A publish makes a :class:`SegmentPublisher`, hands it each collection (:meth:`add`: its
segments' chunks, vectors, BM25 and ledger files, each written only when no file of its name
is on disk yet) and then writes the generation's small commit files: ``embeddings-index.json``
(format 2.0: the header and every segment, :meth:`index_payload`) and ``rag-manifest.json``
(:meth:`manifest`). It holds one collection's records at a time and, across collections, only
the segments' entries. The BM25 files read the generation's store, so the store is written
first.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rag_assets.index import store
from rag_assets.index.fields import FieldWeights
from rag_assets.index.generations import Generation
from rag_assets.index.index_json import IndexHeader
from rag_assets.index.lexical_json import lexical_header
from rag_assets.index.lexical_reuse import PreviousLexical, collect_digests, render_segment, save_digests
from rag_assets.index.lexical_segments import lexical_key, rowids_digest, segment_rowids
from rag_assets.index.manifest import (
    build_segmented_manifest,
    collection_entry,
    ledger_documents,
    read_ledger_segment,
    read_raw_manifest,
)
from rag_assets.index.segments import (
    SEGMENTED_VERSION,
    Segment,
    SegmentFile,
    SegmentWriter,
    bucket_count,
    chunks_key,
    collect_garbage,
    known_files,
    segments_folder,
    split_collection,
    write_chunks_file,
    write_json_file,
    write_vectors_file,
)
from rag_assets.index.vector_codec import FILE_ENCODINGS
from rag_assets.records import EmbeddedCollection

LEGACY_FRAGMENTS = "index-fragments"


def collect_segments(data_dir: Path, kept: list[Generation]) -> list[str]:
    """Remove the segment files that none of the ``kept`` generations names; their names.
    Run under the publish lock after the swap: no publish is writing segments then."""
    keep: set[str] = set()
    for generation in kept:
        keep.update(known_files(generation.index_path, generation.manifest_path))
    # The rendered collections of the single-file index (older versions): the segments replace them.
    shutil.rmtree(data_dir / LEGACY_FRAGMENTS, ignore_errors=True)
    removed = collect_garbage(segments_folder(data_dir), keep)
    collect_digests(data_dir, keep)  # the BM25 files' row digests (rag_assets.index.lexical_reuse)
    return removed


def _listed(fields: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The objects listed under ``key`` (none when a damaged file holds another shape)."""
    items = fields.get(key)
    return [e for e in items if isinstance(e, dict)] if isinstance(items, list) else []


def _on_disk(path: Path, size: int) -> bool:
    try:
        return path.stat().st_size == size
    except OSError:
        return False


@dataclass
class SegmentPublisher:
    """One publish's segments (see the module docstring)."""

    data_dir: Path
    store_path: Path  # the generation's store, already written
    staging: Path  # the generation's folder: a kill's temporary files go with it
    vector_decimals: int
    encoding: str
    built_at: str
    previous_index: Path
    previous_manifest: Path
    fields: FieldWeights = FieldWeights()
    segments: list[Segment] = field(default_factory=list)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    collections: dict[str, dict[str, Any]] = field(default_factory=dict)
    documents: int = 0

    def __post_init__(self) -> None:
        self.writer = SegmentWriter(
            segments_folder(self.data_dir),
            staging=self.staging,
            known=known_files(self.previous_index, self.previous_manifest),
        )
        self._previous = read_raw_manifest(self.previous_manifest) or {}
        self._previous_ledger = {
            (e.get("collection"), e.get("bucket"), e.get("buckets")): e
            for e in self._previous.get("ledger") or []
            if isinstance(e, dict)
        }
        self._conn: sqlite3.Connection | None = None
        self._previous_index: dict[str, Any] | None = None

    def _previous_index_fields(self) -> dict[str, Any]:
        if self._previous_index is None:
            self._previous_index = read_raw_manifest(self.previous_index) or {}
        return self._previous_index

    def unchanged(self, collection: str, content_hash: str, model: str, dimension: int) -> bool:
        """Whether the previous generation published ``collection`` from this content, with this
        model and the same vector rendering (encoding and decimals): its segments then hold what
        :meth:`add` would write, and :meth:`reuse` may name them again."""
        index = self._previous_index_fields()
        collections = self._previous.get("collections")
        entry = collections.get(collection) if isinstance(collections, dict) else None
        return (
            isinstance(entry, dict)
            and entry.get("contentHash") == content_hash
            and (index.get("model"), index.get("dimension")) == (model, dimension)
            and index.get("vectorEncoding", "float") == self.encoding
            and index.get("vectorDecimals") == self.vector_decimals
        )

    @property
    def written(self) -> list[str]:
        """The segment files this publish wrote (the others were on disk already)."""
        return self.writer.written

    def _store(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = store.connect(self.store_path)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.writer.sync()

    def add(self, col: EmbeddedCollection) -> None:
        """Write (or name again) the segments of one collection; collections in name order."""
        buckets = bucket_count(len(col.chunks))
        pairs: list[tuple[str, int]] = []  # (chunk ID, store rowid) of every segment
        for bucket, part in split_collection(col, buckets):
            ids = [c.id for c in part.chunks]
            rowids = segment_rowids(self._store(), ids)
            pairs.extend(zip(ids, rowids.tolist()))
            # The key hashes every chunk's text: made once for the segment's three files.
            key = chunks_key(part, self.vector_decimals, self.encoding)
            files = {"chunks": write_chunks_file(self.writer, part, self.vector_decimals, self.encoding, key)}
            if self.encoding in FILE_ENCODINGS:  # int16-bin alone: the chunks' key is the vectors' too
                files["vectors"] = write_vectors_file(self.writer, part, self.vector_decimals, key)
            files["lexical"] = self._lexical_file(part, bucket, buckets, key, rowids)
            self.segments.append(Segment(col.collection, bucket, buckets, len(part.chunks), len(part.documents), files))
            self._add_ledger(part, bucket, buckets)
        # The rowids its BM25 files hold: a later publish names them again only while the store
        # holds the collection's chunks under the same rowids (store slots differ in them).
        self.collections[col.collection] = {**collection_entry(col), "rowidsSha256": rowids_digest(sorted(pairs))}
        self.documents += len(col.documents)

    def reuse(self, collection: str, rowids: str | None = None) -> bool:
        """Name again the previous generation's segments of ``collection``, unchanged, without
        its records (a publish that loads only the changed collections); False when the previous
        generation has none to name (then :meth:`add` it). Its BM25 files stay right while the
        store holds the collection's rows under the same rowids: ``rowids``, the
        :func:`rowids_digest` of the store's, must be the one the previous publish recorded."""
        index = self._previous_index_fields()
        entries = [e for e in _listed(index, "segments") if e.get("collection") == collection]
        ledger = [e for e in _listed(self._previous, "ledger") if e.get("collection") == collection]
        collections = self._previous.get("collections")
        entry = collections.get(collection) if isinstance(collections, dict) else None
        if not entries or len(entries) != len(ledger) or not isinstance(entry, dict):
            return False
        if rowids is not None and entry.get("rowidsSha256") != rowids:
            return False  # the store holds them under other rowids (or an older publish did not say)
        try:
            segments = [Segment.from_json(e) for e in entries]
        except (KeyError, TypeError, ValueError):
            return False
        try:
            files = [f for s in segments for f in s.files.values()]
            files += [SegmentFile.from_json(e["ledger"]) for e in ledger]
        except (KeyError, TypeError, ValueError):
            return False
        # Every file still on disk as named (one found damaged is deleted, to be made again).
        if any(f.name not in self.writer.known or not _on_disk(self.writer.folder / f.name, f.size) for f in files):
            return False
        self.segments.extend(segments)
        self.ledger.extend(ledger)
        self.collections[collection] = entry
        self.documents += sum(s.documents for s in segments)
        return True

    def _lexical_file(
        self, part: EmbeddedCollection, bucket: int, buckets: int, chunks: str, rowids: np.ndarray
    ) -> SegmentFile:
        """``chunks``: the segment's chunks key (:func:`chunks_key`); ``rowids``: its chunks' in the store."""
        conn = self._store()
        key = lexical_key(chunks, rowids, self.fields)
        name = f"{key}.bm25.json"
        digests: list[bytes] = []

        def render(out: Any) -> None:
            # Only the chunks whose text changed since the previous file of this segment are indexed.
            payload, rows = render_segment(
                conn, rowids, self.fields, self._previous_lexical(part.collection, bucket, buckets)
            )
            digests.extend(rows)
            out.write(payload)

        file = self.writer.file(name, render)
        if name in self.writer.written:
            save_digests(self.data_dir, file, self.fields, digests)
        return file

    def _previous_lexical(self, collection: str, bucket: int, buckets: int) -> PreviousLexical | None:
        """The previous generation's BM25 file of this segment, if its index names one."""
        for entry in _listed(self._previous_index_fields(), "segments"):
            if (entry.get("collection"), entry.get("bucket"), entry.get("buckets")) != (collection, bucket, buckets):
                continue
            try:
                return PreviousLexical(self.writer.folder, SegmentFile.from_json(entry["lexical"]), self.data_dir)
            except (KeyError, TypeError, ValueError):
                return None
        return None

    def _add_ledger(self, part: EmbeddedCollection, bucket: int, buckets: int) -> None:
        before = self._previous_ledger.get((part.collection, bucket, buckets))
        if before is not None:
            previous = read_ledger_segment(self.previous_manifest, before.get("ledger")) or {}
        else:
            # An older manifest holds the ledger inline; a new bucketing reads no earlier part.
            previous = self._previous.get("documents") or {}
        payload = orjson.dumps(ledger_documents(part, self.built_at, previous))
        file = write_json_file(self.writer, "ledger.json", payload)
        self.ledger.append(
            {
                "collection": part.collection,
                "bucket": bucket,
                "buckets": buckets,
                "documentCount": len(part.documents),
                "ledger": file.as_json(),
            }
        )

    def index_payload(
        self, header: IndexHeader, collection_weights: Mapping[str, float], provider: str | None
    ) -> bytes:
        """``embeddings-index.json`` of this publish: the header, the BM25 settings, the segments."""
        fields = header.as_json()
        fields["version"] = SEGMENTED_VERSION
        # What the chunk files' vectors were rounded to: a later publish reuses them only alike.
        fields["vectorDecimals"] = self.vector_decimals
        fields["lexical"] = lexical_header(self._store(), collection_weights, provider, self.fields)
        fields["segments"] = [s.as_json() for s in self.segments]
        return orjson.dumps(fields)

    def index_bytes(self, manifest_size: int) -> int:
        """The index's bytes: its commit file and its segments' chunk files."""
        return manifest_size + sum(s.files["chunks"].size for s in self.segments)

    def manifest(
        self, header: IndexHeader, *, full_build: bool, generation: str | None, index_bytes: int
    ) -> dict[str, Any]:
        """``rag-manifest.json`` of this publish (its ledger in the segments written by :meth:`add`)."""
        return build_segmented_manifest(
            model=header.model,
            dimension=header.dimension,
            provider=header.provider,
            built_at=self.built_at,
            full_build=full_build,
            previous=self._previous,
            generation=generation,
            collections=self.collections,
            ledger=self.ledger,
            totals=(self.documents, sum(s.chunks for s in self.segments), index_bytes),
        )
