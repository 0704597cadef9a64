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


# Texts that exercise every path of the batched embedder: ASCII (the translate-and-split
# tokenizer), non-ASCII and CJK (the regular expression), repeated words and bigrams
# (counts above one), underscores and digits, case folding into ASCII (the Kelvin sign),
# empty and one-word texts (no bigram), and a word repeated hundreds of times.
EDGE_TEXTS = [
    "",
    "one",
    "Alpha beta alpha BETA alpha beta gamma_delta 42 42 x-y x_y",
    "Caf\u00e9 na\u00efve \u201cquoted\u201d \u2014 dash; \u212a kelvin",
    "我们使用虚拟局域网隔离物联网设备 and VLANs 虚拟",
    "word " * 300,
    "tabs\tand\nnewlines\r\n and  double  spaces!!",
    "\u0130stanbul \u00df stra\u00dfe",
]


def test_batched_vectors_are_bit_identical_to_the_plain_definition():
    from rag_assets.embed.hashing import reference_vector

    rng = np.random.default_rng(3)
    vocab = ["alpha", "beta", "gamma", "delta", "vlan", "proxmox", "bridge", "the", "a", "of", "数据", "caf\u00e9"]
    random_texts = [" ".join(rng.choice(vocab, size=int(rng.integers(0, 60)))) for _ in range(40)]
    # Hundreds of distinct words with uneven counts in few buckets: float32 sums that come out
    # differently when the same additions are made in another order.
    many = [" ".join(f"w{int(i)}" for i in rng.zipf(1.3, size=400) if i < 10_000) for _ in range(10)]
    texts = EDGE_TEXTS + random_texts + many
    for dimension in (7, 64, 384, 1536):
        emb = HashingEmbedder(dimension)
        # Twice over: the second pass reads every word and pair from the memo.
        for _ in range(2):
            got = emb.embed_documents(texts)
            want = np.stack([reference_vector(t, dimension) for t in texts])
            assert got.dtype == np.float32 and np.array_equal(got, want)
        for text in texts[:4]:
            assert np.array_equal(emb.embed_query(text), reference_vector(text, dimension))


def test_batched_vectors_do_not_depend_on_the_batch_or_the_memo():
    texts = EDGE_TEXTS * 3
    whole = HashingEmbedder().embed_documents(texts)
    one_by_one = np.stack([HashingEmbedder().embed_query(t) for t in texts])
    assert np.array_equal(whole, one_by_one)


def test_the_tokenizer_splits_ascii_as_the_regular_expression_does():
    import re

    from rag_assets.embed.hashing import tokenize

    word = re.compile(r"\w+")
    ascii_texts = ["".join(chr(c) for c in range(128)) * 2, "a_b-c.d/e\\f g\x00h\x7fi", "MiXeD CaSe_99 z"]
    for text in ascii_texts + EDGE_TEXTS:
        if text.lower().isascii():
            assert tokenize(text) == word.findall(text.lower())


def test_the_key_table_finds_what_was_added_across_growth_and_collisions():
    from rag_assets.embed.key_table import KeyTable

    rng = np.random.default_rng(11)
    table = KeyTable(bits=4)  # 16 slots: grows several times below
    # Keys that differ only in high bits, low bits, or are 0 and the largest: all must stay apart.
    special = np.array([0, 1, 1 << 32, (1 << 32) | 1, (1 << 64) - 1, 1 << 63], dtype=np.uint64)
    rest = np.unique(rng.integers(0, 1 << 62, size=5_000, dtype=np.int64)).astype(np.uint64)
    batches = [special, rest[:7], rest[7:1000], rest[1000:]]
    added: list[np.ndarray] = []
    for batch in batches:
        values = (batch % np.uint64(1_000_003)).astype(np.int64) + 1
        table.add(batch, values)
        added.append(batch)
        everything = np.concatenate(added)
        slots = table.find(everything)
        assert (slots >= 0).all() and len(set(slots.tolist())) == everything.size == len(table)
        assert np.array_equal(table.keys[slots], everything)
        assert np.array_equal(table.values[slots], (everything % np.uint64(1_000_003)).astype(np.int64) + 1)
    absent = np.array([2, 3, (1 << 32) | 2], dtype=np.uint64)
    assert (table.find(absent) == -1).all()
