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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import orjson

from rag_assets.index.atomic import atomic_write_bytes
from rag_assets.index.vector_codec import encode_rows
from rag_assets.records import EmbeddedCollection

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
        c.collection: {"chunks": len(c.chunks), "documents": len(c.documents)}
        for c in sorted(collections, key=lambda c: c.collection)
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


def render_collection(col: EmbeddedCollection, vector_decimals: int, encoding: str = "float") -> bytes:
    """One collection's chunk objects as comma-separated JSON (no brackets), to splice in."""
    rows = encode_rows(np.asarray(col.vectors), encoding, vector_decimals)
    chunks = [
        {"id": chunk.id, "text": chunk.text, **vector, "metadata": chunk.metadata()}
        for chunk, vector in zip(col.chunks, rows)
    ]
    return orjson.dumps(chunks)[1:-1]


def fragment_key(col: EmbeddedCollection, vector_decimals: int, encoding: str = "float") -> str:
    """Changes whenever the collection's rendered chunks would: model, rounding, encoding, IDs, texts, metadata."""
    rounding = str(vector_decimals) if encoding == "float" else encoding
    digest = hashlib.sha256(f"{INDEX_FORMAT_VERSION}|{col.model}|{col.dimension}|{rounding}".encode())
    for chunk in col.chunks:
        digest.update(orjson.dumps([chunk.id, chunk.text, chunk.metadata()]))
    return digest.hexdigest()


class FragmentCache:
    """Each collection's rendered chunks from the last publish, so an update re-renders only
    the collections that changed (rendering is most of the cost of a 50 MB index).

    A fragment file is ``<key>\n<SHA-256 of the body>\n<body>``: the body is spliced into the
    index as it is, so a damaged one must be noticed (and re-rendered), never published."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def get(self, col: EmbeddedCollection, vector_decimals: int, encoding: str = "float") -> bytes:
        key = fragment_key(col, vector_decimals, encoding)
        path = self.folder / f"{col.collection}.json" if self.folder else None
        if path is not None and path.is_file():
            head, _, rest = path.read_bytes().partition(b"\n")
            digest, _, body = rest.partition(b"\n")
            if head.decode("ascii", "replace") == key and hashlib.sha256(body).hexdigest().encode() == digest:
                return body
        body = render_collection(col, vector_decimals, encoding)
        if path is not None:
            atomic_write_bytes(path, b"\n".join((key.encode("ascii"), hashlib.sha256(body).hexdigest().encode(), body)))
        return body


def render_index(
    header: IndexHeader,
    collections: Iterable[EmbeddedCollection],
    vector_decimals: int,
    fragments: FragmentCache | None = None,
) -> bytes:
    """The whole index as compact JSON bytes, chunks in collection then chunk order."""
    cache = fragments or FragmentCache(None)
    parts = [cache.get(col, vector_decimals, header.vector_encoding) for col in sorted(collections, key=lambda c: c.collection)]
    head = orjson.dumps(header.as_json())
    return head[:-1] + b',"chunks":[' + b",".join(p for p in parts if p) + b"]}"


def chunk_ids_digest(ids: Iterable[str]) -> str:
    """SHA-256 over the sorted chunk IDs: lets checks compare outputs without parsing the index."""
    digest = hashlib.sha256()
    for chunk_id in sorted(ids):
        digest.update(chunk_id.encode("utf-8") + b"\n")
    return digest.hexdigest()


def render_meta(
    header: IndexHeader,
    collections: Iterable[EmbeddedCollection],
    index_payload: bytes,
    lexical: dict[str, Any] | None = None,
    vectors: dict[str, Any] | None = None,
) -> bytes:
    """The sidecar: the header, the index's size and SHA-256 (so a reader can tell a damaged
    or foreign index), a digest of its chunk IDs, the browser search's BM25 file
    (``lexical``: file, sizeBytes, sha256; rag_assets.index.browser) when one was written, and
    the binary vector file (``vectors``, the same fields) for ``int16-bin``."""
    meta = header.as_json()
    meta["sizeBytes"] = len(index_payload)
    meta["indexSha256"] = hashlib.sha256(index_payload).hexdigest()
    meta["chunkIdsSha256"] = chunk_ids_digest(c.id for col in collections for c in col.chunks)
    if lexical is not None:
        meta["lexical"] = lexical
    if vectors is not None:
        meta["vectors"] = vectors
    return orjson.dumps(meta)


def read_index(index_path: Path) -> dict[str, Any]:
    return orjson.loads(index_path.read_bytes())


def read_meta(meta_path: Path) -> dict[str, Any] | None:
    """The sidecar, or None when it is missing or damaged (not a JSON object)."""
    try:
        meta = orjson.loads(meta_path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return meta if isinstance(meta, dict) else None
