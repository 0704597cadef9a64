"""The static public index (``embeddings-index.json``) and its small sidecar.

Other tools read these files (a site's client-side search, for example), so the
field names are a contract. Vector components are rounded to
``vector_decimals`` places (5 by default): ``bench/precision.py`` measured that
5 decimals leave every query's top-10 unchanged on the Hugo docs (the only
reorderings swap results whose float32 scores differ by < 1e-6, i.e. ties) while
the index shrinks by about a third against printing full float32 values.
``public_index.vector_encoding`` (:mod:`rag_assets.index.vector_codec`) can instead write
each vector as base64 float16, int16 or int8, or (``int16-bin``) leave the vectors out of the
chunks for a binary file beside the index (:mod:`rag_assets.index.vector_file`), which the
sidecar names in ``vectors``; the index then says so in ``vectorEncoding``.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from rag_assets.base.atomic import atomic_open
from rag_assets.records import EmbeddedCollection, in_name_order

INDEX_FORMAT_VERSION = "1.0"


@dataclass(frozen=True)
class IndexHeader:
    """The fields shared by the index and its sidecar."""

    model: str
    dimension: int
    provider: str
    built_at: str
    content_hash: str
    total_chunks: int
    collections: dict[str, dict[str, int]]
    generation: str | None = None  # the published generation (rag_assets.index.generations)
    vector_encoding: str = "float"  # rag_assets.index.vector_codec; "float" is not written (the seed's format)

    def as_json(self) -> dict[str, Any]:
        fields = {
            "version": INDEX_FORMAT_VERSION,
            "model": self.model,
            "dimension": self.dimension,
            "provider": self.provider,
            "builtAt": self.built_at,
            "contentHash": self.content_hash,
            "totalChunks": self.total_chunks,
            "collections": self.collections,
        }
        if self.generation is not None:
            fields["generation"] = self.generation
        if self.vector_encoding != "float":
            fields["vectorEncoding"] = self.vector_encoding
        return fields


def index_header(
    collections: Iterable[EmbeddedCollection],
    *,
    model: str,
    dimension: int,
    built_at: str,
    content_hash: str,
    provider: str = "hashing",
    generation: str | None = None,
    vector_encoding: str = "float",
) -> IndexHeader:
    counts = {
        c.collection: {"chunks": len(c.chunks), "documents": len(c.documents)} for c in in_name_order(collections)
    }
    return IndexHeader(
        model=model,
        dimension=dimension,
        provider=provider,
        built_at=built_at,
        content_hash=content_hash,
        total_chunks=sum(v["chunks"] for v in counts.values()),
        collections=counts,
        generation=generation,
        vector_encoding=vector_encoding,
    )


# Chunks rendered at a time: a whole collection's vectors as Python float lists took about
# 15 times the memory of the float32 matrix (a 100,000-chunk build peaked here).
RENDER_ROWS = 1024
_READ_BLOCK = 1 << 20


def iter_collection(col: EmbeddedCollection, vector_decimals: int, encoding: str = "float") -> Iterator[bytes]:
    """One collection's chunk objects as comma-separated JSON (no brackets), to splice in, in
    pieces of :data:`RENDER_ROWS` chunks whose concatenation is the whole."""
    # Here, not at the top: `rag status` reads the index's sidecar and never loads numpy.
    import numpy as np

    from rag_assets.index.vector_codec import encode_rows

    vectors = np.asarray(col.vectors)
    for start in range(0, len(col.chunks), RENDER_ROWS):
        part = col.chunks[start : start + RENDER_ROWS]
        rows = encode_rows(vectors[start : start + len(part)], encoding, vector_decimals)
        chunks = [
            {"id": chunk.id, "text": chunk.text, **vector, "metadata": chunk.metadata()}
            for chunk, vector in zip(part, rows)
        ]
        if not chunks:
            break  # fewer vectors than chunks: the rest pairs with none, as zip over the whole had it
        # A JSON array is its items joined by commas, so the pieces join into the whole's bytes.
        yield (b"," if start else b"") + orjson.dumps(chunks)[1:-1]


def fragment_key(col: EmbeddedCollection, vector_decimals: int, encoding: str = "float") -> str:
    """Changes whenever the collection's rendered chunks would: model, rounding, encoding, IDs, texts, metadata."""
    rounding = str(vector_decimals) if encoding == "float" else encoding
    digest = hashlib.sha256(f"{INDEX_FORMAT_VERSION}|{col.model}|{col.dimension}|{rounding}".encode())
    for chunk in col.chunks:
        digest.update(orjson.dumps([chunk.id, chunk.text, chunk.metadata()]))
    return digest.hexdigest()


def _line(handle: BinaryIO) -> bytes:
    line = handle.readline()
    return line[:-1] if line.endswith(b"\n") else line


class FragmentCache:
    """Each collection's rendered chunks from the last publish, so an update re-renders only
    the collections that changed (rendering is most of the cost of a 50 MB index).

    A fragment file is ``<key>\n<SHA-256 of the body>\n<body>``: the body is spliced into the
    index as it is, so a damaged one must be noticed (and re-rendered), never published.
    Bodies are read, checked, rendered and written piece by piece (:meth:`pieces`): a large
    collection's is hundreds of megabytes."""

    def __init__(self, folder: Path | None, staging: Path | None = None) -> None:
        self.folder = folder
        # Where a fragment is written while it renders (with the index, so for as long):
        # the generation's folder, which a kill's leftovers go with (see atomic_open).
        self.staging = staging

    def pieces(self, col: EmbeddedCollection, vector_decimals: int, encoding: str = "float") -> Iterator[bytes]:
        """The collection's rendered chunks in pieces: from its fragment when that is current
        and intact, else rendered (and the fragment rewritten as they pass)."""
        key = fragment_key(col, vector_decimals, encoding)
        path = self.folder / f"{col.collection}.json" if self.folder else None
        if path is None:
            yield from iter_collection(col, vector_decimals, encoding)
            return
        if path.is_file() and _fragment_current(path, key):
            with path.open("rb") as handle:
                _line(handle)  # the key
                _line(handle)  # the digest, checked above
                while block := handle.read(_READ_BLOCK):
                    yield block
            return
        digest = hashlib.sha256()
        with atomic_open(path, self.staging) as handle:
            # The body's digest is known only at the end: a placeholder of its length, filled in then.
            handle.write(key.encode("ascii") + b"\n" + b"0" * digest.digest_size * 2 + b"\n")
            for piece in iter_collection(col, vector_decimals, encoding):
                handle.write(piece)
                digest.update(piece)
                yield piece
            handle.seek(len(key.encode("ascii")) + 1)
            handle.write(digest.hexdigest().encode())


def _fragment_current(path: Path, key: str) -> bool:
    """Whether the fragment at ``path`` was rendered under ``key`` and its body matches its digest."""
    with path.open("rb") as handle:
        if _line(handle).decode("ascii", "replace") != key:
            return False
        expected = _line(handle)
        digest = hashlib.sha256()
        while block := handle.read(_READ_BLOCK):
            digest.update(block)
    return digest.hexdigest().encode() == expected


@dataclass(frozen=True)
class WrittenIndex:
    """What :func:`write_index` wrote: the index's size and SHA-256 (the sidecar carries both;
    also what rag_assets.index.lexical_json.write_lexical wrote)."""

    size: int
    sha256: str


class DigestingWriter:
    """A binary file that also counts and hashes what goes through it."""

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.size = 0
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.handle.write(data)
        self.size += len(data)
        self.digest.update(data)


def _write_index_to(
    out: DigestingWriter,
    header: IndexHeader,
    collections: Iterable[EmbeddedCollection],
    vector_decimals: int,
    fragments: FragmentCache | None,
) -> WrittenIndex:
    """The index's bytes into ``out``: the header's fields, then every collection's chunks
    (in collection name order) in one array, a comma between collections that have any."""
    cache = fragments or FragmentCache(None)
    head = orjson.dumps(header.as_json())
    out.write(head[:-1] + b',"chunks":[')
    any_before = False
    for col in in_name_order(collections):
        started = False
        for piece in cache.pieces(col, vector_decimals, header.vector_encoding):
            if not piece:
                continue
            if not started:
                if any_before:
                    out.write(b",")
                started = any_before = True
            out.write(piece)
    out.write(b"]}")
    return WrittenIndex(out.size, out.digest.hexdigest())


def render_index(
    header: IndexHeader,
    collections: Iterable[EmbeddedCollection],
    vector_decimals: int,
    fragments: FragmentCache | None = None,
) -> bytes:
    """The whole index as compact JSON bytes, chunks in collection then chunk order."""
    buffer = io.BytesIO()
    _write_index_to(DigestingWriter(buffer), header, collections, vector_decimals, fragments)
    return buffer.getvalue()


def write_index(
    path: Path,
    header: IndexHeader,
    collections: Iterable[EmbeddedCollection],
    vector_decimals: int,
    fragments: FragmentCache | None = None,
) -> WrittenIndex:
    """:func:`render_index`'s bytes written to ``path`` as they are made, never held whole
    (the index of a million chunks is gigabytes); its size and SHA-256."""
    with path.open("wb") as handle:
        return _write_index_to(DigestingWriter(handle), header, collections, vector_decimals, fragments)


def chunk_ids_digest(ids: Iterable[str]) -> str:
    """SHA-256 over the sorted chunk IDs: lets checks compare outputs without parsing the index."""
    # Each ID and a newline, hashed as one joined string: an update per ID cost 0.09 s at
    # 100,000 chunks, the join 0.01 s (IDs read in order are sorted again in linear time).
    ordered = sorted(ids)
    joined = "\n".join(ordered) + "\n" if ordered else ""
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def render_meta(
    header: IndexHeader,
    chunk_ids: Iterable[str],
    index_payload: bytes | WrittenIndex,
    lexical: dict[str, Any] | None = None,
    vectors: dict[str, Any] | None = None,
    files: dict[str, str] | None = None,
    chunking: str | None = None,
    index_bytes: int | None = None,
) -> bytes:
    """The sidecar: the header, the index's size and SHA-256 (so a reader can tell a damaged
    or foreign index), a digest of its chunk IDs, the browser search's BM25 file
    (``lexical``: file, sizeBytes, sha256; rag_assets.index.browser) when one was written, and
    the binary vector file (``vectors``, the same fields) for ``int16-bin``, and the other files
    of the generation (``files``: name -> the start of its SHA-256, see :data:`FILE_DIGEST_CHARS`;
    the manifest and the browser's static files), so that every published file is checked against this one. ``index_payload``:
    the index's bytes, or what :func:`write_index` says of them. ``chunk_ids``: every chunk's ID
    (their digest lets a check compare the index with the store). ``index_bytes``: a segmented
    index's bytes with its segments' chunk files (``indexBytes``, what `rag status` shows as its
    size; ``sizeBytes`` is the commit file's own)."""
    if not isinstance(index_payload, WrittenIndex):
        index_payload = WrittenIndex(len(index_payload), hashlib.sha256(index_payload).hexdigest())
    meta = header.as_json()
    meta["sizeBytes"] = index_payload.size
    meta["indexSha256"] = index_payload.sha256
    meta["chunkIdsSha256"] = chunk_ids_digest(chunk_ids)
    if index_bytes is not None:
        meta["indexBytes"] = index_bytes
    if lexical is not None:
        meta["lexical"] = lexical
    if vectors is not None:
        meta["vectors"] = vectors
    if files is not None:
        meta["files"] = files
    if chunking is not None:
        meta["chunking"] = chunking  # the chunker settings: a change re-chunks every collection
    return orjson.dumps(meta)


# The sidecar's ``files`` hold the first 16 hex digits (64 bits) of each file's SHA-256: enough to
# notice a torn, replaced or edited file, and the sidecar a browser polls stays small (under 1 KB
# for the sample content); the index, the BM25 and the vector files keep their full digests.
FILE_DIGEST_CHARS = 16


def digest_entry(data: bytes) -> str:
    """A file's entry in the sidecar's ``files``: the start of its SHA-256."""
    return hashlib.sha256(data).hexdigest()[:FILE_DIGEST_CHARS]


def chunk_ids_in_order(index_path: Path) -> list[str]:
    """The chunk IDs of a published index in its order (parses the whole index: for a repair
    of a file that follows that order, never for a check)."""
    return [chunk["id"] for chunk in read_index(index_path)["chunks"]]


def read_index(index_path: Path) -> dict[str, Any]:
    """A published index with its chunks: a segmented one's (format 2.0, see
    rag_assets.index.segments) read from its segments in order, an older single file as it is.
    Every chunk at once: for checks and tests, not for a publish."""
    index = orjson.loads(index_path.read_bytes())
    if isinstance(index, dict) and "segments" in index and "chunks" not in index:
        folder = segment_folder(index_path)
        index["chunks"] = [
            chunk
            for entry in index["segments"]
            for chunk in orjson.loads((folder / Path(entry["chunks"]["file"]).name).read_bytes())["chunks"]
        ]
    return index


def segment_folder(index_path: Path) -> Path:
    """Where the segments of the index at ``index_path`` are: ``data/segments`` for a
    generation's (``data/generations/<id>/``), else ``segments`` beside it (``public/``)."""
    folder = index_path.parent
    if folder.parent.name == "generations":
        return folder.parent.parent / "segments"
    return folder / "segments"


def read_meta(meta_path: Path) -> dict[str, Any] | None:
    """The sidecar, or None when it is missing or damaged (not a JSON object)."""
    try:
        meta = orjson.loads(meta_path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) else None
