"""The offline feature-hashing embedder."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from rag_assets.embed import (
    Embedder,
    HashingEmbedder,
    UnknownEmbedderError,
    create_embedder,
)


def test_implements_the_embedder_interface():
    emb = create_embedder("hashing")
    assert isinstance(emb, Embedder)
    assert emb.dimension == 384 and emb.model == "rag-assets/feature-hash-v1"


def test_vectors_are_unit_length_float32_and_shaped():
    vectors = HashingEmbedder(dimension=64).embed_documents(["alpha beta", "gamma", ""])
    assert vectors.shape == (3, 64) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0)
    assert not vectors[2].any()  # empty text: a zero vector, not NaN


def test_deterministic_across_processes():
    code = "from rag_assets.embed import HashingEmbedder as H; print(H().embed_query('vlan on proxmox')[:5].tolist())"
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout for _ in range(2)}
    assert len(outputs) == 1
    assert outputs.pop().strip() == str(HashingEmbedder().embed_query("vlan on proxmox")[:5].tolist())


def test_similar_texts_score_higher_than_unrelated_ones():
    emb = HashingEmbedder()
    docs = emb.embed_documents(
        ["configure a vlan aware bridge on proxmox", "bake sourdough bread with a long cold proof"]
    )
    query = emb.embed_query("proxmox vlan bridge")
    assert docs[0] @ query > docs[1] @ query + 0.2


def test_cjk_text_is_matched_through_character_bigrams():
    emb = HashingEmbedder()
    docs = emb.embed_documents(["我们使用虚拟局域网隔离物联网设备", "今天天气很好适合散步"])
    query = emb.embed_query("虚拟局域网")
    assert docs[0] @ query > docs[1] @ query


def test_unknown_name_says_which_exist():
    with pytest.raises(UnknownEmbedderError, match="hashing"):
        create_embedder("word2vec")
