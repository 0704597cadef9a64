"""Vector encodings of the public JSON index: plain floats, or compact base64 (float16, int8).

A chunk's ``embedding`` is, by ``public_index.vector_encoding`` in rag.yaml:

- ``float``: a JSON array of numbers rounded to ``vector_decimals`` places (the seed's format,
  which existing readers expect; the default);
- ``float16``: base64 of the components as little-endian IEEE half floats (2 bytes each);
- ``int8``: base64 of the components as signed bytes, ``round(x / scale)``, with the
  per-vector ``scale = max |x| / 127`` in the chunk's ``embeddingScale``: the component is
  ``byte * scale`` (1 byte each);
- ``int16``: the same with little-endian signed 16-bit steps, ``scale = max |x| / 32767``
  (2 bytes each, as float16, but a uniform step: about ten times finer than float16's on a
  unit vector's typical components, so the top-10 holds where float16's barely does);
- ``int16-bin``: int16's steps and scales, not in the JSON but in one raw binary file beside
  it (:mod:`rag_assets.index.vector_file`); the chunks then carry no ``embedding``.

At 1536 dimensions a vector costs about 11 KB as rounded floats, 4 KB as float16 or int16
and 2 KB as int8 (base64 included). ``bench/precision.py`` measures how often the top-10 changes.
"""

from __future__ import annotations

import base64

import numpy as np

ENCODINGS = ("float", "float16", "int8", "int16")  # in the JSON index
FILE_ENCODINGS = ("int16-bin",)  # in embeddings-vectors.bin (rag_assets.index.vector_file)
# Symmetric ranges (-127..127, -32767..32767), so a vector and its negation encode alike.
LEVELS = {"int8": (127, "<i1"), "int16": (32767, "<i2")}


def encode_float16(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode("ascii")


def decode_float16(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f2").astype(np.float32)


def scale_of(vector: np.ndarray, encoding: str) -> float:
    """The per-vector step: the largest magnitude maps to the top level (1.0 for an all-zero vector)."""
    top = float(np.max(np.abs(vector))) if len(vector) else 0.0
    # float32, as the reader will hold it: the steps are rounded against the published scale.
    return float(np.float32(top / LEVELS[encoding][0])) if top > 0 else 1.0


def encode_scaled(vector: np.ndarray, encoding: str) -> tuple[str, float]:
    """(base64 of the signed steps, scale) for ``int8`` or ``int16``."""
    levels, dtype = LEVELS[encoding]
    scale = scale_of(vector, encoding)
    steps = np.clip(np.rint(np.asarray(vector, dtype=np.float64) / scale), -levels, levels)
    return base64.b64encode(steps.astype(dtype).tobytes()).decode("ascii"), scale


def decode_scaled(text: str, scale: float, encoding: str) -> np.ndarray:
    steps = np.frombuffer(base64.b64decode(text), dtype=LEVELS[encoding][1])
    return steps.astype(np.float32) * np.float32(scale)


def encode_rows(matrix: np.ndarray, encoding: str, vector_decimals: int) -> list[dict]:
    """Per row, the chunk fields that carry its vector (``embedding``, and for int8 and int16
    ``embeddingScale``) in ``encoding``."""
    if encoding == "float":
        rounded = np.round(matrix.astype(np.float64), vector_decimals)
        # Negative zeros print as "-0.0"; normalising them saves bytes and keeps output stable.
        rounded[rounded == 0] = 0.0
        return [{"embedding": row} for row in rounded.tolist()]
    if encoding == "float16":
        return [{"embedding": encode_float16(row)} for row in matrix]
    if encoding in FILE_ENCODINGS:
        return [{} for _ in matrix]  # the vectors go to the binary file
    if encoding in LEVELS:
        out = []
        for row in matrix:
            text, scale = encode_scaled(row, encoding)
            out.append({"embedding": text, "embeddingScale": scale})
        return out
    raise ValueError(f"unknown vector encoding {encoding!r}; one of {', '.join(ENCODINGS)}")


def decode_chunk(chunk: dict, encoding: str) -> np.ndarray | None:
    """A published chunk's vector as float32 (None when it has none)."""
    value = chunk.get("embedding")
    if value is None:
        return None
    if encoding == "float16":
        return decode_float16(value)
    if encoding in LEVELS:
        return decode_scaled(value, chunk["embeddingScale"], encoding)
    return np.asarray(value, dtype=np.float32)
