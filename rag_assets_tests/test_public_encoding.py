"""public_index.vector_encoding: compact vectors in the JSON index or a binary file, and the browser search's BM25 file."""

from __future__ import annotations

import base64
import hashlib
import sqlite3

import dagster as dg
import numpy as np
import orjson
import pytest

from rag_assets.config import ConfigError, load_config
from rag_assets.defs.runner import run_build
from rag_assets.index import index_json, segments
from rag_assets.index.fields import bm25_call
from rag_assets.index.vector_codec import ENCODINGS, decode_chunk, encode_rows
from rag_assets.index.vector_file import (
    VECTORS_NAME,
    VectorFileError,
    parse_vector_file,
    published_vectors,
    read_vector_file,
    render_vector_file,
    vectors_entry,
)
from rag_assets.serve.cli import main

from .test_index_json import collection


def unit_vectors(n: int, dimension: int, seed: int = 7) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, dimension)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize(
    ("encoding", "max_error"), [("float", 5e-6), ("float16", 5e-4), ("int16", 2e-5), ("int8", 5e-3)]
)
def test_each_encoding_round_trips_within_its_precision(encoding, max_error):
    vectors = unit_vectors(20, 1536)
    vectors[3] = 0.0  # an all-zero vector (a failed chunk) stays zero
    decoded = np.vstack([decode_chunk(fields, encoding) for fields in encode_rows(vectors, encoding, 5)])
    assert decoded.dtype == np.float32 and decoded.shape == vectors.shape
    assert np.abs(decoded - vectors).max() < max_error
    assert not decoded[3].any()


def test_a_1536_dimension_vector_fits_the_budget_in_the_compact_encodings():
    """The vector part of a chunk; with a Hugo chunk's text and metadata (about 1.5 KB) int16
    and float16 stay under 6 KB a chunk, int8 under 4 KB (bench/precision.py measures it)."""
    vectors = unit_vectors(5, 1536)
    sizes = {e: max(len(orjson.dumps(f)) for f in encode_rows(vectors, e, 5)) for e in ENCODINGS}
    assert sizes["float16"] <= 4200 and sizes["int16"] <= 4250 and sizes["int8"] <= 2250
    assert sizes["float"] > 11000  # what the compact encodings save


def test_the_index_says_its_encoding_and_the_float_index_keeps_the_seed_format(tmp_path):
    cols = [collection("posts", unit_vectors(2, 8))]
    for encoding in ENCODINGS:
        header = index_json.index_header(
            cols, model="m", dimension=8, built_at="2026-01-01T00:00:00Z", content_hash="abc", vector_encoding=encoding
        )
        payload = index_json.render_index(header, cols, 5, index_json.FragmentCache(tmp_path / "fragments"))
        index = orjson.loads(payload)
        meta = orjson.loads(index_json.render_meta(header, [c.id for col in cols for c in col.chunks], payload))
        if encoding == "float":
            assert "vectorEncoding" not in index and "vectorEncoding" not in meta
            assert isinstance(index["chunks"][0]["embedding"], list)
        else:
            assert index["vectorEncoding"] == meta["vectorEncoding"] == encoding
            assert isinstance(index["chunks"][0]["embedding"], str)
        assert np.allclose(decode_chunk(index["chunks"][1], encoding), cols[0].vectors[1], atol=5e-3)


def test_the_setting_is_validated(tmp_path):
    config = tmp_path / "rag.yaml"
    config.write_text("public_index: {vector_encoding: int8}\n")
    assert load_config(config, environ={}).vector_encoding == "int8"
    config.write_text("")
    assert load_config(config, environ={}).vector_encoding == "float"
    config.write_text("public_index: {vector_encoding: int4}\n")
    with pytest.raises(
        ConfigError, match=r"public_index\.vector_encoding must be 'float', 'float16', 'int16', 'int8' or 'int16-bin'"
    ):
        load_config(config, environ={})
    config.write_text("public_index: {vector_encoding: int16-bin}\n")
    assert load_config(config, environ={}).vector_encoding == "int16-bin"


def test_the_float_index_is_byte_for_byte_the_previous_versions():
    """The default's bytes, pinned: SHA-256 of an index and sidecar rendered before int16-bin existed."""
    rows = np.random.default_rng(11).normal(size=(3, 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    cols = [collection("posts", rows[:2]), collection("docs", rows[2:])]
    header = index_json.index_header(
        cols, model="m", dimension=16, built_at="2026-01-01T00:00:00Z", content_hash="abc", generation="g1"
    )
    payload = index_json.render_index(header, cols, 5)
    meta = index_json.render_meta(
        header,
        [c.id for col in cols for c in col.chunks],
        payload,
        {"file": "embeddings-bm25.json", "sizeBytes": 1, "sha256": "x"},
    )
    assert hashlib.sha256(payload).hexdigest() == "d4d51041a76517d329e8001819bc87331e5abe4c4efa9976a0da07f3681a21e6"
    assert hashlib.sha256(meta).hexdigest() == "938dd01460bd1ed1b3175deeada68debe9030f2826f366707ddc0b5a42a46357"


def test_the_vector_file_round_trips_as_int16_in_the_json_does():
    vectors = unit_vectors(7, 1536)
    vectors[2] = 0.0
    payload = render_vector_file(vectors, "20260101T000000Z-abc123")
    assert len(payload) == 32 + 24 + 7 * (4 + 2 * 1536)  # header (padded to 8), scales, steps
    parsed = parse_vector_file(payload)
    assert parsed.generation == "20260101T000000Z-abc123" and parsed.steps.shape == (7, 1536)
    in_json = np.vstack([decode_chunk(f, "int16") for f in encode_rows(vectors, "int16", 5)])
    assert np.array_equal(parsed.matrix(), in_json)  # the same steps and scales as base64 int16
    assert not parsed.matrix()[2].any()
    assert parse_vector_file(render_vector_file(np.zeros((0, 8)), None)).steps.shape == (0, 8)


def test_a_truncated_or_mismatched_vector_file_is_refused(tmp_path):
    payload = render_vector_file(unit_vectors(3, 32), "g1")
    meta = {"generation": "g1", "vectors": vectors_entry(payload)}
    (tmp_path / VECTORS_NAME).write_bytes(payload)
    assert read_vector_file(tmp_path, meta).steps.shape == (3, 32)
    with pytest.raises(VectorFileError, match="truncated"):
        parse_vector_file(payload[:-2])
    with pytest.raises(VectorFileError, match="not a version-1"):
        parse_vector_file(b"RAGVECS\0" + b"\x09" * 40)
    (tmp_path / VECTORS_NAME).write_bytes(payload[:-64])
    with pytest.raises(VectorFileError, match="sidecar says"):
        read_vector_file(tmp_path, meta)
    other = render_vector_file(unit_vectors(3, 32, seed=8), "g1")  # same size, another build's
    (tmp_path / VECTORS_NAME).write_bytes(other)
    with pytest.raises(VectorFileError, match="SHA-256"):
        read_vector_file(tmp_path, meta)
    (tmp_path / VECTORS_NAME).write_bytes(render_vector_file(unit_vectors(3, 32), "g2"))
    with pytest.raises(VectorFileError, match="generation g2"):
        read_vector_file(
            tmp_path, {"generation": "g1", "vectors": vectors_entry((tmp_path / VECTORS_NAME).read_bytes())}
        )


def test_an_int16_bin_build_writes_the_vector_file_and_a_damaged_one_is_rebuilt(write_tree, tmp_path, capsys):
    content = write_tree(
        {
            "docs/vlan.md": "---\ntitle: VLANs\n---\n# VLANs\n\nTag guests per VLAN on a vlan-aware bridge.\n",
            "posts/hi.md": "---\ntitle: Hello\n---\nThe first post about the network.\n",
        }
    )
    config = tmp_path / "rag.yaml"
    config.write_text(
        f"content_dir: {content}\noutput_dir: {tmp_path / 'out'}\nembedder: hashing\nvaults: []\n"
        "public_index: {vector_encoding: int16-bin}\n"
    )
    cfg = load_config(config, environ={})
    args = ["--config", str(config)]
    assert main(["build", *args]) == 0
    index, meta = index_json.read_index(cfg.index_path), orjson.loads(cfg.meta_path.read_bytes())
    assert index["vectorEncoding"] == meta["vectorEncoding"] == "int16-bin"
    assert all("embedding" not in c for c in index["chunks"])
    # Each segment's vectors in a file of its own, named by the index with its size and digest.
    files = [cfg.public_dir / s["vectors"]["file"] for s in index["segments"]]
    assert len(files) == 2 and all(f.name.endswith(".vectors.bin") for f in files)
    published = published_vectors(cfg.public_dir, index, meta)  # through the link public/segments
    with sqlite3.connect(cfg.public_store_path) as conn:
        stored = dict(conn.execute("SELECT id, embedding FROM chunks").fetchall())
    expected = np.vstack([np.frombuffer(stored[c["id"]], dtype=np.float32) for c in index["chunks"]])
    assert np.abs(published - expected).max() < 2e-5  # rows in the index's chunk order
    vectors = files[0].resolve()
    good = vectors.read_bytes()
    vectors.write_bytes(good[:-100])  # torn
    capsys.readouterr()
    assert main(["check", *args]) == 1
    assert vectors.name in capsys.readouterr().out
    assert main(["build", *args]) == 0
    assert "republishing" in capsys.readouterr().out  # rendered again, under the same name
    assert vectors.read_bytes() == good
    assert main(["check", *args]) == 0
    # Back to float: the vectors go back into the chunks, and no link leads nowhere.
    config.write_text(config.read_text().replace("int16-bin", "float"))
    capsys.readouterr()
    assert main(["build", *args]) == 0
    assert "vector_encoding changed (int16-bin -> float): republishing" in capsys.readouterr().out
    assert main(["check", *args]) == 0
    index = orjson.loads(cfg.index_path.read_bytes())
    assert all("vectors" not in s for s in index["segments"])
    assert all(p.exists() for p in cfg.public_dir.iterdir())


def merged_postings(cfg) -> tuple[dict, list[str]]:
    """The segments' BM25 postings joined as rag-search.js joins them (mergeLexical): one term
    numbering, chunk positions offset by the segments before, FTS5's statistics summed."""
    index = orjson.loads(cfg.index_path.read_bytes())
    ids = [c["id"] for c in index_json.read_index(cfg.index_path)["chunks"]]
    parts = [orjson.loads((cfg.public_dir / s["lexical"]["file"]).read_bytes()) for s in index["segments"]]
    postings: dict[str, list[tuple[int, float]]] = {}
    doc_len: list[int] = []
    for part in parts:
        positions = np.frombuffer(base64.b64decode(part["postingChunks"]), dtype="<u4")
        tf = np.frombuffer(base64.b64decode(part["postingTf"]), dtype="<f4")
        at = 0
        for term, n in zip(part["terms"], part["df"]):
            postings.setdefault(term, []).extend(
                (len(doc_len) + int(c), float(f)) for c, f in zip(positions[at : at + n], tf[at : at + n])
            )
            at += n
        doc_len.extend(np.frombuffer(base64.b64decode(part["docLength"]), dtype="<u4").tolist())
    data = {
        **index["lexical"],
        "postings": postings,
        "docLength": doc_len,
        "rows": len(doc_len),
        "tokens": sum(doc_len),
    }
    return data, ids


def test_the_segments_bm25_postings_give_fts5_scores(write_tree, make_config, monkeypatch):
    """The published postings of every segment, joined and weighed with FTS5's formula (what
    rag-search.js computes), give the store's own bm25() for every chunk a term matches; with
    one chunk a segment, so that every statistic is a sum over segments."""
    monkeypatch.setattr(segments, "MAX_SEGMENT_CHUNKS", 1)
    content = write_tree(
        {
            "docs/vlan.md": "---\ntitle: VLANs\ntags: [network]\n---\n# VLANs\n\n## Tagging\n\nTag guests per VLAN, vlan by vlan.\n",
            "docs/zfs.md": "---\ntitle: Backups\n---\n# Backups\n\nZFS snapshots of datasets, sent to another network box.\n",
            "posts/hi.md": "---\ntitle: Hello\n---\nThe first post about the network.\n",
        }
    )
    cfg = make_config(content)
    assert run_build(cfg, dg.DagsterInstance.ephemeral(), vaults=[]).success
    assert "lexical" not in orjson.loads(cfg.meta_path.read_bytes())  # in the index's segments now
    data, ids = merged_postings(cfg)
    assert len(orjson.loads(cfg.index_path.read_bytes())["segments"]) >= 2
    avgdl = data["tokens"] / data["rows"]
    with sqlite3.connect(cfg.public_store_path) as conn:
        for term in ("vlan", "network", "snapshot", "tag"):
            found = data["postings"][term]
            df = len(found)
            idf = max(np.log((data["rows"] - df + 0.5) / (df + 0.5)), data["minIdf"])
            ours = {}
            for chunk, tf in found:
                norm = data["k1"] * (1 - data["b"] + data["b"] * data["docLength"][chunk] / avgdl)
                ours[ids[chunk]] = idf * tf * (data["k1"] + 1) / (tf + norm)
            theirs = dict(
                conn.execute(
                    f"SELECT c.id, -{bm25_call()} FROM fts_chunks f JOIN chunks c ON c.rowid = f.rowid WHERE fts_chunks MATCH ?",
                    (*data["fieldWeights"].values(), f'"{term}"'),
                ).fetchall()
            )
            assert ours.keys() == theirs.keys() and ours
            assert all(abs(ours[k] - theirs[k]) < 1e-9 for k in ours), term
    assert data["search"]["profile"] == {
        "fusion": "zscore",
        "vectorWeight": 0.0,
        "bm25Weight": 1.0,
        "rrfK": 60,
        "embedder": "hashing",
    }
