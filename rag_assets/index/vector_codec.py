"""Vector encodings of the public JSON index: plain floats, or compact base64 (float16, int8).

A chunk's ``embedding`` is, by ``public_index.vector_encoding`` in rag.yaml:

- ``float``: a JSON array of numbers rounded to ``vector_decimals`` places (the seed's format,
  which existing readers expect; the default);
- ``float16``: base64 of the components as little-endian IEEE half floats (2 bytes each);
- ``int8``: base64 of the components as signed bytes, ``round(x / scale)``, with the
  per-vector ``scale = max |x| / 127`` in the chunk's ``embeddingScale``: the component is
  ``byte * scale`` (1 byte each).

At 1536 dimensions a vector costs about 11 KB as rounded floats, 4 KB as float16 and 2 KB as
int8 (base64 adds a third). ``bench/precision.py`` measures how often the top-10 changes.
"""

from __future__ import annotations

import base64

import numpy as np

ENCODINGS = ("float", "float16", "int8")
INT8_LEVELS = 127  # symmetric: -127..127, so a vector and its negation encode alike


def encode_float16(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f2").tobytes()).decode("ascii")


def decode_float16(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f2").astype(np.float32)


def int8_scale(vector: np.ndarray) -> float:
    """The per-vector step: the largest magnitude maps to 127 (1.0 for an all-zero vector)."""
    top = float(np.max(np.abs(vector))) if len(vector) else 0.0
    # float32, as the reader will hold it: the bytes are rounded against the published scale.
    return float(np.float32(top / INT8_LEVELS)) if top > 0 else 1.0


def encode_int8(vector: np.ndarray) -> tuple[str, float]:
    """(base64 of the signed bytes, scale)."""
    scale = int8_scale(vector)
    steps = np.clip(np.rint(np.asarray(vector, dtype=np.float64) / scale), -INT8_LEVELS, INT8_LEVELS)
    return base64.b64encode(steps.astype(np.int8).tobytes()).decode("ascii"), scale


def decode_int8(text: str, scale: float) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.int8).astype(np.float32) * np.float32(scale)


def encode_rows(matrix: np.ndarray, encoding: str, vector_decimals: int) -> list[dict]:
    """Per row, the chunk fields that carry its vector (``embedding``, and for int8
    ``embeddingScale``) in ``encoding``."""
    if encoding == "float":
        rounded = np.round(matrix.astype(np.float64), vector_decimals)
        # Negative zeros print as "-0.0"; normalising them saves bytes and keeps output stable.
        rounded[rounded == 0] = 0.0
        return [{"embedding": row} for row in rounded.tolist()]
    if encoding == "float16":
        return [{"embedding": encode_float16(row)} for row in matrix]
    if encoding == "int8":
        out = []
        for row in matrix:
            text, scale = encode_int8(row)
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
    if encoding == "int8":
        return decode_int8(value, chunk["embeddingScale"])
    return np.asarray(value, dtype=np.float32)
