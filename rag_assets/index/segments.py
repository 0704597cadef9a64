"""The public index as segments: files of bounded size under ``data/segments/``, named by their inputs.

Each collection is split into ``2**n`` buckets by a hash of the document ID (:func:`bucket_of`),
``n`` the smallest that keeps a bucket at about :data:`MAX_SEGMENT_CHUNKS` chunks or fewer
(:func:`bucket_count`), so a segment's size grows neither with the corpus nor with its
collection, and a one-file edit changes one bucket. A segment has up to four files, each
named by a digest of what it is rendered from, so a build that meets a name already on disk
writes nothing for it:

- ``<key>.chunks.json``: ``{"collection", "chunks": [...]}``, the chunks as the single-file
  index held them (text, metadata, the vectors for the JSON encodings);
- ``<key>.vectors.bin``: with ``int16-bin``, the segment's vectors
  (:mod:`rag_assets.index.vector_file`, no generation in its header: the file is shared by
  every generation that names it);
- ``<key>.bm25.json``: the segment's BM25 postings (:mod:`rag_assets.index.lexical_json`);
- ``<key>.ledger.json``: the segment's part of ``rag-manifest.json``'s per-document ledger.

The commit files of a generation (``embeddings-index.json``, format ``2.0``, and
``rag-manifest.json``) name every segment with its size and SHA-256, in index order.
``public/segments`` links to ``data/segments`` so a static host serves them. A file no kept
generation names is removed by the next publish (:func:`collect_garbage`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from rag_assets.base.atomic import atomic_open
from rag_assets.index.index_json import DigestingWriter, fragment_key, iter_collection, segment_folder
from rag_assets.records import Document, EmbeddedCollection

SEGMENTS_FOLDER = "segments"
# A segment holds at most this many chunks, give or take the hash's spread: a collection of
# more is split into twice as many buckets. 4,096 chunks of 200 words are about 6 MB of JSON
# index with float vectors at 384 dimensions, a few seconds of work at most.
MAX_SEGMENT_CHUNKS = 4096
SEGMENTED_VERSION = "2.0"  # embeddings-index.json naming segments (1.0: the chunks inline)


def bucket_count(chunks: int, limit: int | None = None) -> int:
    """How many buckets (a power of two) a collection of ``chunks`` chunks is split into."""
    limit = limit or MAX_SEGMENT_CHUNKS
    buckets = 1
    while chunks > buckets * limit:
        buckets *= 2
    return buckets


def bucket_of(document_id: str, buckets: int) -> int:
    """The bucket of a document: stable across builds (a hash of its ID, not of its content)."""
    digest = hashlib.sha256(document_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") & (buckets - 1)


def split_collection(col: EmbeddedCollection, buckets: int) -> Iterator[tuple[int, EmbeddedCollection]]:
    """The collection's non-empty buckets as collections of their own (chunk order kept)."""
    import numpy as np  # here: rag status reads segment names, never numpy

    if buckets == 1:
        yield 0, col
        return
    bucket: dict[str, int] = {}
    documents_of: dict[int, list[Document]] = {}
    for doc in col.documents:  # grouped once: a pass per bucket was 2.4 of a million-chunk edit's 41 s
        doc_id = doc.id
        bucket[doc_id] = b = bucket_of(doc_id, buckets)
        documents_of.setdefault(b, []).append(doc)
    of_chunk = np.array(
        [bucket.get(c.document_id, bucket_of(c.document_id, buckets)) for c in col.chunks], dtype=np.int64
    )
    vectors = np.asarray(col.vectors)
    for b in range(buckets):
        rows = np.flatnonzero(of_chunk == b)
        documents = documents_of.get(b, [])
        if not len(rows) and not documents:
            continue
        part = replace(
            col,
            documents=documents,
            chunks=[col.chunks[i] for i in rows],
            vectors=vectors[rows] if len(vectors) else vectors,
        )
        yield b, part


def segments_folder(data_dir: Path) -> Path:
    return data_dir / SEGMENTS_FOLDER


def folder_of_generation(folder: Path) -> Path:
    """The segments folder of the files in ``folder``: ``data/segments`` for a generation
    (``data/generations/<id>``), else ``segments`` beside them (``public/segments``)."""
    return segment_folder(folder / "any")


SEGMENT_KINDS = ("chunks", "vectors", "lexical")  # an index's files of a segment (the ledger: the manifest's)


@dataclass(frozen=True)
class SegmentFile:
    """One segment file: its name (in the segments folder), size and SHA-256."""

    name: str
    size: int
    sha256: str

    def as_json(self) -> dict[str, Any]:
        # A URL relative to public/ (public/segments -> ../data/segments).
        return {"file": f"{SEGMENTS_FOLDER}/{self.name}", "sizeBytes": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> SegmentFile:
        return cls(Path(str(entry["file"])).name, int(entry["sizeBytes"]), str(entry["sha256"]))


@dataclass(frozen=True)
class Segment:
    """One bucket of one collection and its files (kind -> file: chunks, vectors, lexical)."""

    collection: str
    bucket: int
    buckets: int
    chunks: int
    documents: int
    files: dict[str, SegmentFile]

    def as_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "collection": self.collection,
            "bucket": self.bucket,
            "buckets": self.buckets,
            "chunkCount": self.chunks,
            "documentCount": self.documents,
        }
        for kind, file in self.files.items():
            entry[kind] = file.as_json()
        return entry

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> Segment:
        """A segment as an index names it (KeyError, TypeError or ValueError when damaged)."""
        files = {kind: SegmentFile.from_json(entry[kind]) for kind in SEGMENT_KINDS if kind in entry}
        if "chunks" not in files or "lexical" not in files:
            raise KeyError("a segment without its chunks or BM25 file")
        return cls(
            str(entry["collection"]),
            int(entry["bucket"]),
            int(entry["buckets"]),
            int(entry["chunkCount"]),
            int(entry["documentCount"]),
            files,
        )


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def known_files(index_path: Path, manifest_path: Path) -> dict[str, SegmentFile]:
    """The segment files one generation names (name -> file): its index's segments and its
    manifest's ledger ({} for files of older versions, which name none)."""
    known: dict[str, SegmentFile] = {}
    segments = _json_object(index_path).get("segments")
    ledger = _json_object(manifest_path).get("ledger")
    entries = [e for e in (segments if isinstance(segments, list) else []) if isinstance(e, dict)]
    entries += [e for e in (ledger if isinstance(ledger, list) else []) if isinstance(e, dict)]
    for entry in entries:
        for kind in (*SEGMENT_KINDS, "ledger"):
            if isinstance(entry.get(kind), dict):
                try:
                    file = SegmentFile.from_json(entry[kind])
                except (KeyError, TypeError, ValueError):
                    continue  # a damaged entry names nothing: the check reports the file
                known[file.name] = file
    return known


@dataclass
class SegmentWriter:
    """Writes segment files that are not on disk yet; names the ones that are.

    ``known``: files the previous generation named (name -> file), whose recorded digest is
    taken instead of hashing them again (the integrity check verifies them against it)."""

    folder: Path
    staging: Path | None = None
    known: dict[str, SegmentFile] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)  # the names this publish wrote

    def file(self, name: str, render: Callable[[DigestingWriter], None]) -> SegmentFile:
        path = self.folder / name
        known = self.known.get(name)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            size = -1
        if known is not None and size == known.size:
            return known
        if size >= 0:
            return SegmentFile(name, size, sha256_of(path))
        self.folder.mkdir(parents=True, exist_ok=True)
        with atomic_open(path, self.staging) as handle:
            out = DigestingWriter(handle)
            render(out)
        self.written.append(name)
        return SegmentFile(name, out.size, out.digest.hexdigest())

    def sync(self) -> None:
        """The folder's entries durable (each file was synced as it was renamed in)."""
        if self.folder.is_dir():
            fd = os.open(self.folder, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in blocks (the digest segments and sidecars name)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def chunks_key(col: EmbeddedCollection, vector_decimals: int, encoding: str) -> str:
    """The name stem of a segment's chunks file: its rendered chunks' inputs and its collection."""
    return _key("chunks", col.collection, fragment_key(col, vector_decimals, encoding))


def _key(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()[:40]


def write_chunks_file(
    writer: SegmentWriter, col: EmbeddedCollection, vector_decimals: int, encoding: str, key: str | None = None
) -> SegmentFile:
    """A segment's ``<key>.chunks.json``: ``{"collection", "chunks": [...]}``. ``key``: its
    :func:`chunks_key`, when the caller has it (it hashes every chunk)."""

    def render(out: DigestingWriter) -> None:
        out.write(b'{"collection":' + orjson.dumps(col.collection) + b',"chunks":[')
        for piece in iter_collection(col, vector_decimals, encoding):
            out.write(piece)
        out.write(b"]}")

    return writer.file(f"{key or chunks_key(col, vector_decimals, encoding)}.chunks.json", render)


def write_vectors_file(
    writer: SegmentWriter, col: EmbeddedCollection, vector_decimals: int, int16_key: str | None = None
) -> SegmentFile:
    """A segment's ``<key>.vectors.bin`` (int16-bin): its vectors in its chunk order.
    ``int16_key``: the segment's :func:`chunks_key` for int16-bin, when the caller has it."""
    import numpy as np

    from rag_assets.index.vector_file import render_vector_file

    def render(out: DigestingWriter) -> None:
        matrix = np.asarray(col.vectors, dtype=np.float32).reshape(-1, col.dimension)
        out.write(render_vector_file(matrix, None))

    key = _key("vectors", int16_key or chunks_key(col, vector_decimals, "int16-bin"))
    return writer.file(f"{key}.vectors.bin", render)


def write_json_file(writer: SegmentWriter, suffix: str, payload: bytes) -> SegmentFile:
    """A segment file whose bytes are known: named by their own digest."""
    name = f"{hashlib.sha256(payload).hexdigest()[:40]}.{suffix}"
    return writer.file(name, lambda out: out.write(payload))


def read_segment_json(folder: Path, entry: dict[str, Any]) -> Any:
    """A segment's JSON file named by ``entry`` (file, sizeBytes, sha256), from ``folder``."""
    return orjson.loads((folder / Path(str(entry["file"])).name).read_bytes())


def referenced_names(generation_folders: list[Path], readers: list[Callable[[Path], Iterator[str]]]) -> set[str]:
    """The segment names any of ``generation_folders`` names, as ``readers`` list them."""
    names: set[str] = set()
    for folder in generation_folders:
        for reader in readers:
            names.update(reader(folder))
    return names


def collect_garbage(folder: Path, keep: set[str]) -> list[str]:
    """Remove the segment files of ``folder`` that are not in ``keep``; the names removed.
    Run under the publish lock, after the old generations went: nothing is being written."""
    if not folder.is_dir():
        return []
    removed = []
    for entry in sorted(folder.iterdir()):
        if entry.name in keep or not entry.is_file():
            continue
        entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed
