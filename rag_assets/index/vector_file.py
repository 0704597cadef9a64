"""The public index's vectors as one raw binary file (``public_index.vector_encoding: int16-bin``).

With ``int16-bin`` the chunks of ``embeddings-index.json`` carry no ``embedding``: the vectors
are in ``embeddings-vectors.bin`` beside it, in the index's chunk order, which a browser reads
with one ``fetch`` into typed-array views (no base64, no per-chunk decode). Little-endian::

    offset 0   8 bytes   magic b"RAGVECS\\0"
           8   u32       format version (1)
          12   u32       encoding (1: int16 steps with a float32 scale per vector)
          16   u32       count (rows: the index's chunks)
          20   u32       dimension
          24   u32       header bytes (a multiple of 8: where the scales start)
          28   u32       generation length n (bytes of UTF-8)
          32   n bytes   the generation it was written for, zero-padded to the header's end
    header     f32 x count              per-vector scale (max |x| / 32767; 1.0 for a zero vector)
    + 4 count  i16 x count x dimension  steps, round(x / scale): the component is step * scale

3,076 bytes a vector at 1536 dimensions (3,072 of steps and a scale), against 4.1 KB as base64
int16 in the JSON. The sidecar names the file with its size and SHA-256 (``vectors``), so a
reader fetches it again only when it changed and notices a torn or damaged pair; the header's
generation pairs it with the index.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag_assets.index.vector_codec import FILE_ENCODINGS, LEVELS, decode_chunk

VECTORS_NAME = "embeddings-vectors.bin"
MAGIC = b"RAGVECS\0"
FORMAT_VERSION = 1
ENCODING_INT16 = 1
_FIXED = struct.Struct("<8sIIIIII")  # magic, version, encoding, count, dimension, header bytes, generation length


class VectorFileError(ValueError):
    """The file is not a vector file this version reads, or not the one its sidecar names."""


@dataclass(frozen=True)
class VectorFile:
    """A parsed vector file: the steps and scales as views of its bytes (nothing copied)."""

    generation: str | None
    scales: np.ndarray  # float32, one a row
    steps: np.ndarray  # int16, count x dimension

    def matrix(self) -> np.ndarray:
        """The vectors as float32, as the browser computes them (step times float32 scale)."""
        return self.steps.astype(np.float32) * self.scales[:, None]


def quantise_int16(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(steps, scales) of every row: vector_codec's int16 per-vector scale, all rows at once."""
    levels = LEVELS["int16"][0]
    rows = np.asarray(matrix, dtype=np.float64)
    top = np.abs(rows).max(axis=1) if rows.size else np.zeros(len(rows))
    # float32, as the reader holds it: the steps are rounded against the published scale.
    scales = np.where(top > 0, (top / levels).astype(np.float32), np.float32(1.0)).astype(np.float32)
    steps = np.clip(np.rint(rows / scales.astype(np.float64)[:, None]), -levels, levels).astype("<i2")
    return steps, scales


def render_vector_file(matrix: np.ndarray, generation: str | None) -> bytes:
    """The file's bytes for ``matrix`` (rows in the index's chunk order)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"a matrix of vectors (rows), not an array of shape {matrix.shape}")
    count, dimension = matrix.shape
    name = (generation or "").encode("utf-8")
    header_bytes = -(-(_FIXED.size + len(name)) // 8) * 8
    head = _FIXED.pack(MAGIC, FORMAT_VERSION, ENCODING_INT16, count, dimension, header_bytes, len(name)) + name
    steps, scales = quantise_int16(matrix)
    return b"".join((head.ljust(header_bytes, b"\0"), scales.astype("<f4").tobytes(), steps.tobytes()))


def parse_vector_file(data: bytes) -> VectorFile:
    """Read a vector file's bytes; VectorFileError when it is not one or is truncated."""
    if len(data) < _FIXED.size:
        raise VectorFileError(f"{len(data)} bytes: shorter than the header (truncated)")
    magic, version, encoding, count, dimension, header_bytes, name_len = _FIXED.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION or encoding != ENCODING_INT16:
        raise VectorFileError(f"not a version-{FORMAT_VERSION} int16 vector file (magic {magic!r}, version {version})")
    expected = header_bytes + 4 * count + 2 * count * dimension
    if header_bytes < _FIXED.size + name_len or len(data) != expected:
        raise VectorFileError(f"{len(data)} bytes where its header announces {expected} (truncated or damaged)")
    generation = data[_FIXED.size : _FIXED.size + name_len].decode("utf-8", "replace") or None
    scales = np.frombuffer(data, dtype="<f4", count=count, offset=header_bytes)
    steps = np.frombuffer(data, dtype="<i2", count=count * dimension, offset=header_bytes + 4 * count)
    return VectorFile(generation, scales, steps.reshape(count, dimension))


def vectors_entry(payload: bytes) -> dict[str, Any]:
    """The sidecar's ``vectors`` entry: what a reader checks the file against."""
    return {"file": VECTORS_NAME, "sizeBytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}


def read_vector_file(folder: Path, meta: dict[str, Any] | None = None) -> VectorFile:
    """The vector file of a published folder, checked against the sidecar ``meta`` when given
    (its size, SHA-256 and generation): VectorFileError for a torn or mismatched pair."""
    entry = (meta or {}).get("vectors") or {"file": VECTORS_NAME}
    data = (folder / Path(entry["file"]).name).read_bytes()
    if meta is not None:
        if entry.get("sizeBytes") != len(data):
            raise VectorFileError(
                f"is {len(data)} bytes but the sidecar says {entry.get('sizeBytes')} (truncated or replaced)"
            )
        if entry.get("sha256") != hashlib.sha256(data).hexdigest():
            raise VectorFileError(
                "content does not match the SHA-256 the sidecar records (damaged or of another build)"
            )
    parsed = parse_vector_file(data)
    if meta is not None and meta.get("generation") != parsed.generation:
        raise VectorFileError(f"belongs to generation {parsed.generation}, not {meta.get('generation')}")
    return parsed


def published_vectors(folder: Path, index: dict[str, Any], meta: dict[str, Any] | None) -> np.ndarray:
    """The vectors of a published index as float32 rows in its chunk order, whatever its
    encoding: decoded from the chunks, or read from the vector file (checked against ``meta``)."""
    encoding = index.get("vectorEncoding", "float")
    if encoding in FILE_ENCODINGS and "segments" in index:
        return _segment_vectors(folder, index)
    if encoding in FILE_ENCODINGS:
        parsed = read_vector_file(folder, meta)
        if parsed.steps.shape != (len(index["chunks"]), index["dimension"]):
            raise VectorFileError(
                f"holds {parsed.steps.shape} vectors for an index of {len(index['chunks'])} x {index['dimension']}"
            )
        return parsed.matrix()
    rows = [decode_chunk(chunk, encoding) for chunk in index["chunks"]]
    return np.vstack([np.zeros(index["dimension"], np.float32) if r is None else r for r in rows]).astype(np.float32)


def _segment_vectors(folder: Path, index: dict[str, Any]) -> np.ndarray:
    """A segmented index's vectors (rag_assets.index.segments): each segment's file, checked
    against the size and SHA-256 the index records and against the segment's chunk count."""
    from rag_assets.index.index_json import segment_folder

    segments = segment_folder(folder / "embeddings-index.json")
    parts = [np.zeros((0, index["dimension"]), dtype=np.float32)]
    for entry in index["segments"]:
        recorded = entry.get("vectors") or {}
        name = Path(str(recorded.get("file", ""))).name
        data = (segments / name).read_bytes()
        if recorded.get("sizeBytes") != len(data) or recorded.get("sha256") != hashlib.sha256(data).hexdigest():
            raise VectorFileError(f"{name} does not match the size and SHA-256 the index records (damaged)")
        parsed = parse_vector_file(data)
        if parsed.steps.shape != (entry["chunkCount"], index["dimension"]):
            raise VectorFileError(f"{name} holds {parsed.steps.shape} vectors for a segment of {entry['chunkCount']}")
        parts.append(parsed.matrix())
    return np.vstack(parts)
