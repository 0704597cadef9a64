"""The public JSON index, its sidecar, and atomic replacement."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from rag_assets.base import atomic
from rag_assets.index import index_json
from rag_assets.records import Chunk, Document, EmbeddedCollection


def collection(name: str, vectors: np.ndarray) -> EmbeddedCollection:
    doc = Document(name, "d", f"{name}/d.md", "D", "", [], {}, "", "2026-01-01", "sha")
    chunks = [
        Chunk(f"{name}/d/chunk-{i}", f"text {i}", name, "d", "D", i, len(vectors), [], 2, [])
        for i in range(len(vectors))
    ]
    return EmbeddedCollection(name, "h", [doc], chunks, vectors.astype(np.float32), "m", vectors.shape[1])


def test_index_round_trips_with_rounded_vectors_and_sorted_collections(tmp_path):
    cols = [
        collection("posts", np.array([[0.123456789, -0.0000001, 0.5]])),
        collection("docs", np.array([[1.0, 0.0, 0.0]])),
    ]
    header = index_json.index_header(cols, model="m", dimension=3, built_at="2026-01-01T00:00:00Z", content_hash="abc")
    payload = index_json.render_index(header, cols, 5)
    meta_payload = index_json.render_meta(header, [c.id for col in cols for c in col.chunks], payload)
    (tmp_path / "i.json").write_bytes(payload)
    (tmp_path / "m.json").write_bytes(meta_payload)
    index_bytes, meta_bytes = len(payload), len(meta_payload)
    data = index_json.read_index(tmp_path / "i.json")
    assert [c["id"] for c in data["chunks"]] == ["docs/d/chunk-0", "posts/d/chunk-0"]
    assert data["chunks"][1]["embedding"] == [0.12346, 0.0, 0.5]  # rounded; -0.0 printed as 0.0
    assert b"-0.0" not in (tmp_path / "i.json").read_bytes()
    assert data["totalChunks"] == 2 and data["collections"]["posts"] == {"chunks": 1, "documents": 1}
    meta = index_json.read_meta(tmp_path / "m.json")
    assert "chunks" not in meta and meta["sizeBytes"] == index_bytes == (tmp_path / "i.json").stat().st_size
    assert meta_bytes < 600  # header fields + size + index digest + chunk-ID digest


def test_a_failed_write_leaves_the_previous_file_and_no_temp_files(tmp_path, monkeypatch):
    target = tmp_path / "out.json"
    atomic.atomic_write_bytes(target, b"old")

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        atomic.atomic_write_bytes(target, b"new contents")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_rendered_index_is_compact_json():
    cols = [collection("posts", np.eye(2, 4))]
    header = index_json.index_header(cols, model="m", dimension=4, built_at="t", content_hash="h")
    payload = index_json.render_index(header, cols, 5)
    assert b"\n" not in payload and b": " not in payload
    assert orjson.loads(payload)["chunks"][0]["embedding"] == [1.0, 0.0, 0.0, 0.0]
