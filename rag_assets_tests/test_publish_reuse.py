"""A publish that loads only the changed collections' records.

The IO manager writes each embedded record's facts beside its pickle (content hash, model,
what the report needs); a collection whose facts say it is unchanged since the previous
generation and since the store slot's build is published from its facts, its rows in the slot
and the previous generation's segments, without unpickling its record. The outputs are those
of a publish that loads every record.
"""

from __future__ import annotations

import pickle
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from upath import UPath

from rag_assets.config import RagConfig
from rag_assets.defs.io_managers import AtomicPickleIOManager, LazyRecords
from rag_assets.index.consistency import check_public_outputs
from rag_assets.index.record_facts import facts_path, read_facts
from rag_assets.index.rejoin import rejoined
from rag_assets.ingest.parsing import parse_collection
from rag_assets.pipeline import chunk_collection, embed_collection
from rag_assets.publishing import Published, publish_all
from rag_assets.records import EmbeddedCollection

from .test_publishing import embedded_collections, write_corpus
from .test_store_slots import EMBEDDER

STAMPS = [f"2026-01-0{day}T00:00:00Z" for day in range(1, 8)]
# What differs between two publishes of the same records at the same times: the generation's ID.
VOLATILE = {"generation"}


class Counting(AtomicPickleIOManager):
    """The IO manager, noting which records it unpickles."""

    loads: list[str]

    def load_from_path(self, context, path):  # type: ignore[override]
        self.loads.append(Path(str(path)).name)
        return super().load_from_path(context, path)


def publish_lazily(cfg: RagConfig, records: Path, collections: list[EmbeddedCollection], built_at: str):
    """Write the records as a run does (pickle and facts), then publish them through the lazy
    mapping; the names of the records unpickled, and what the publish wrote."""
    writer = AtomicPickleIOManager(base_dir=str(records))
    paths = {}
    for col in collections:
        paths[col.collection] = UPath(records / col.collection)
        # A run writes only the partitions it materialises: those whose content changed.
        path = paths[col.collection]
        if not path.exists() or pickle.loads(path.read_bytes()).content_hash != col.content_hash:
            writer.dump_to_path(None, col, paths[col.collection])
    manager = Counting(base_dir=str(records))
    manager.loads = []
    published = publish_all(rejoined(cfg, LazyRecords(manager, paths)), cfg, built_at)
    return manager.loads, published


def edited(cfg: RagConfig, name: str) -> EmbeddedCollection:
    """``name`` after a paragraph of one of its files changed (a new content hash)."""
    content = cfg.content_dir
    page = content / name / "page-001.md"
    page.write_text(page.read_text() + "\nA new closing paragraph about lighthouses.\n")
    parsed = parse_collection(content, name, f"hash-{name}-edited")
    return embed_collection(chunk_collection(parsed, cfg.chunking), EMBEDDER)[0]


def outputs(cfg: RagConfig, published: Published) -> dict:
    """What a reader sees of the published generation, but the generation's ID."""
    index = {k: v for k, v in orjson.loads(cfg.index_path.read_bytes()).items() if k not in VOLATILE}
    manifest = {k: v for k, v in orjson.loads(cfg.manifest_path.read_bytes()).items() if k not in VOLATILE}
    with closing(sqlite3.connect(cfg.public_store_path)) as conn:
        chunks = conn.execute("SELECT id, document_id, chunk_index, text, embedding FROM chunks ORDER BY id").fetchall()
        documents = conn.execute("SELECT * FROM documents ORDER BY id").fetchall()
        sources = conn.execute("SELECT * FROM sources ORDER BY collection").fetchall()
    meta = orjson.loads(cfg.meta_path.read_bytes())
    return {
        "index": index,
        "manifest": manifest,
        "chunks": chunks,
        "documents": documents,
        "sources": sources,
        "chunkIdsSha256": meta["chunkIdsSha256"],
        "facts": published.collections,
    }


@pytest.fixture
def sites(tmp_path: Path):
    """Two sites of the same three collections, each published three times (every store slot
    filled): one through the lazy records, one from the records in memory."""
    content = tmp_path / "content"
    write_corpus(content, collections=3, pages=4)
    collections = embedded_collections(content)
    lazy = RagConfig(content_dir=content, output_dir=tmp_path / "lazy")
    whole = RagConfig(content_dir=content, output_dir=tmp_path / "whole")
    for stamp in STAMPS[:3]:
        publish_lazily(lazy, tmp_path / "records", collections, stamp)
        publish_all(collections, whole, stamp)
    return lazy, whole, collections, tmp_path / "records"


def test_an_edit_loads_only_the_edited_collection_and_publishes_the_same_outputs(sites) -> None:
    lazy, whole, collections, records = sites
    changed = edited(lazy, "col1")
    now = [changed if c.collection == "col1" else c for c in collections]

    loads, published = publish_lazily(lazy, records, now, STAMPS[3])
    reference = publish_all(now, whole, STAMPS[3])

    assert loads == ["col1"]
    assert outputs(lazy, published) == outputs(whole, reference)
    assert published.header.total_chunks == sum(len(c.chunks) for c in now)
    assert check_public_outputs(lazy).ok
    # Nothing changed since: the next two publishes still load col1 (each takes a store slot
    # that holds col1's old rows, synced from the record); once every slot has, none is loaded.
    for stamp, expected in ((STAMPS[4], ["col1"]), (STAMPS[5], ["col1"]), (STAMPS[6], [])):
        loads, published = publish_lazily(lazy, records, now, stamp)
        reference = publish_all(now, whole, stamp)
        assert loads == expected
        assert outputs(lazy, published) == outputs(whole, reference)


def test_a_record_without_its_facts_is_loaded(sites) -> None:
    lazy, _, collections, records = sites
    facts_path(records / "col0").unlink()
    # A record written again by a version that writes no facts: the old facts are not its.
    (records / "col2").write_bytes(pickle.dumps(collections[2]))
    assert read_facts(records / "col2") is None and read_facts(records / "col1") is not None

    loads, _ = publish_lazily(lazy, records, collections, STAMPS[3])

    assert sorted(loads) == ["col0", "col2"]
    assert check_public_outputs(lazy).ok


def test_another_vector_encoding_renders_every_collection_again(sites) -> None:
    lazy, _, collections, records = sites
    before = {s["chunks"]["file"] for s in orjson.loads(lazy.index_path.read_bytes())["segments"]}

    loads, published = publish_lazily(replace(lazy, vector_encoding="int8"), records, collections, STAMPS[3])

    assert sorted(loads) == ["col0", "col1", "col2"]
    after = {s["chunks"]["file"] for s in orjson.loads(lazy.index_path.read_bytes())["segments"]}
    assert after and not after & before
    assert published.segments_written
    # And back: the int8 segments are the previous generation's now, so nothing is reused either.
    loads, _ = publish_lazily(lazy, records, collections, STAMPS[4])
    assert sorted(loads) == ["col0", "col1", "col2"]
