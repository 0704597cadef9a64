"""public_index.vector_encoding: compact vectors in the JSON index, and the browser search's BM25 file."""

from __future__ import annotations

import base64
import sqlite3

import dagster as dg
import numpy as np
import orjson
import pytest

from rag_assets.config import ConfigError, load_config
from rag_assets.defs.runner import run_build
from rag_assets.index import index_json
from rag_assets.index.lexical_json import LEXICAL_NAME
from rag_assets.index.vector_codec import ENCODINGS, decode_chunk, encode_rows
from rag_assets.search.fields import bm25_call

from .test_index_json import collection


def unit_vectors(n: int, dimension: int, seed: int = 7) -> np.ndarray:
    rows = np.random.default_rng(seed).normal(size=(n, dimension)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.mark.parametrize(("encoding", "max_error"), [("float", 5e-6), ("float16", 5e-4), ("int16", 2e-5), ("int8", 5e-3)])
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
        meta = orjson.loads(index_json.render_meta(header, cols, payload))
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
    with pytest.raises(ConfigError, match=r"public_index\.vector_encoding must be 'float', 'float16', 'int16' or 'int8'"):
        load_config(config, environ={})


def test_the_bm25_file_gives_fts5_scores(write_tree, make_config):
    """The published postings, weighed with FTS5's formula (what rag-search.js computes),
    give the store's own bm25() for every chunk a term matches."""
    content = write_tree({
        "docs/vlan.md": "---\ntitle: VLANs\ntags: [network]\n---\n# VLANs\n\n## Tagging\n\nTag guests per VLAN, vlan by vlan.\n",
        "docs/zfs.md": "---\ntitle: Backups\n---\n# Backups\n\nZFS snapshots of datasets, sent to another network box.\n",
        "posts/hi.md": "---\ntitle: Hello\n---\nThe first post about the network.\n",
    })
    cfg = make_config(content)
    assert run_build(cfg, dg.DagsterInstance.ephemeral(), vaults=[]).success
    meta = orjson.loads(cfg.meta_path.read_bytes())
    assert meta["lexical"]["file"] == LEXICAL_NAME
    data = orjson.loads((cfg.public_dir / LEXICAL_NAME).read_bytes())
    ids = [c["id"] for c in orjson.loads(cfg.index_path.read_bytes())["chunks"]]
    chunks = np.frombuffer(base64.b64decode(data["postingChunks"]), dtype="<u4")
    tf = np.frombuffer(base64.b64decode(data["postingTf"]), dtype="<f4")
    doc_len = np.frombuffer(base64.b64decode(data["docLength"]), dtype="<u4")
    start = np.concatenate([[0], np.cumsum(data["counts"])])
    avgdl = data["tokens"] / data["rows"]
    with sqlite3.connect(cfg.public_store_path) as conn:
        for term in ("vlan", "network", "snapshot", "tag"):
            t = data["terms"].index(term)
            df = data["df"][t]
            idf = max(np.log((data["rows"] - df + 0.5) / (df + 0.5)), data["minIdf"])
            span = slice(start[t], start[t + 1])
            norm = data["k1"] * (1 - data["b"] + data["b"] * doc_len[chunks[span]] / avgdl)
            ours = {ids[c]: s for c, s in zip(chunks[span], idf * tf[span] * (data["k1"] + 1) / (tf[span] + norm))}
            theirs = dict(conn.execute(
                f"SELECT c.id, -{bm25_call()} FROM fts_chunks f JOIN chunks c ON c.rowid = f.rowid WHERE fts_chunks MATCH ?",
                (*data["fieldWeights"].values(), f'"{term}"'),
            ).fetchall())
            assert ours.keys() == theirs.keys() and ours
            assert all(abs(ours[k] - theirs[k]) < 1e-9 for k in ours), term
    assert data["search"]["profile"] == {"fusion": "zscore", "vectorWeight": 0.0, "bm25Weight": 1.0, "rrfK": 60, "embedder": "hashing"}
