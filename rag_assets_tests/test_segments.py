"""The public index as segments (rag_assets.index.segments): stable names, an edit that writes
only its segment's files, garbage collection that keeps what a kept generation names, the
older single-file index still read, a damaged segment noticed and made again, and change
detection reading only the changed collections' ledger segments.

Real builds of a small tree (in-process Dagster, the hashing embedder) with segments of at most
two chunks, so that one collection spans several segments.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import orjson
import pytest

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.index import generations, segments
from rag_assets.index.freshness import detect_changes
from rag_assets.index.index_json import IndexHeader, read_index, render_index
from rag_assets.index.manifest import read_manifest
from rag_assets.index.segment_publish import SegmentPublisher
from rag_assets.index.segments import bucket_count, bucket_of, known_files
from rag_assets.serve.cli import main

TREE = {
    f"docs/note-{i}.md": f"---\ntitle: Note {i}\n---\nNote {i} is about topic {i} and little else.\n" for i in range(8)
}
TREE["posts/hello.md"] = "---\ntitle: Hello\n---\nThe first post, about nothing in particular.\n"


@pytest.fixture(autouse=True)
def small_segments(monkeypatch):
    monkeypatch.setattr(segments, "MAX_SEGMENT_CHUNKS", 2)


def build(content: Path, out: Path, encoding: str = "int16-bin"):
    out.mkdir(parents=True, exist_ok=True)
    config = out / "rag.yaml"
    config.write_text(
        f"content_dir: {content}\noutput_dir: {out}\nembedder: hashing\nvaults: []\n"
        f"public_index: {{vector_encoding: {encoding}}}\n"
    )
    cfg = load_config(config, environ={})
    assert run_build(cfg, dg.DagsterInstance.ephemeral(), vaults=[]).success
    return cfg


def segment_files(cfg) -> set[str]:
    return {p.name for p in (cfg.data_dir / "segments").iterdir()}


def test_buckets_are_powers_of_two_and_a_document_keeps_its_bucket():
    assert [bucket_count(n, 4) for n in (0, 4, 5, 8, 9, 17)] == [1, 1, 2, 2, 4, 8]
    assert bucket_of("docs/a", 8) == bucket_of("docs/a", 8)
    assert {bucket_of(f"docs/{i}", 8) for i in range(200)} == set(range(8))
    # Doubling the buckets splits one: a document's bucket is kept or moves up by the old count.
    assert all(bucket_of(f"d{i}", 8) % 4 == bucket_of(f"d{i}", 4) for i in range(100))


def test_segment_names_are_the_same_in_two_builds_of_the_same_content(write_tree, tmp_path):
    content = write_tree(TREE)
    first, second = build(content, tmp_path / "a"), build(content, tmp_path / "b")
    index = orjson.loads(first.index_path.read_bytes())
    assert len([s for s in index["segments"] if s["collection"] == "docs"]) > 1
    # The ledger parts hold each document's indexing time, which differs between the builds.
    same = [{n for n in segment_files(cfg) if not n.endswith(".ledger.json")} for cfg in (first, second)]
    assert same[0] == same[1] and len(same[0]) == 3 * len(index["segments"])
    assert read_index(first.index_path)["chunks"] == read_index(second.index_path)["chunks"]


def test_an_edit_writes_only_its_segments_files_and_gc_keeps_what_kept_generations_name(write_tree, tmp_path):
    content = write_tree(TREE)
    cfg = build(content, tmp_path / "out")
    first = segment_files(cfg)
    first_generation = generations.published(cfg)
    (content / "docs" / "note-3.md").write_text("---\ntitle: Note 3\n---\nNote 3 now talks about zebras.\n")
    build(content, tmp_path / "out")
    second = segment_files(cfg)
    written = second - first
    # The edited note's segment: its chunks, vectors, BM25 postings and ledger part, nothing else.
    assert sorted(name.split(".", 1)[1] for name in written) == [
        "bm25.json",
        "chunks.json",
        "ledger.json",
        "vectors.bin",
    ]
    assert first <= second  # the previous generation is kept, and so are the files it names
    (content / "docs" / "note-5.md").write_text("---\ntitle: Note 5\n---\nNote 5 now talks about otters.\n")
    build(content, tmp_path / "out")
    kept = generations.candidates(cfg)
    assert first_generation.id not in {g.id for g in kept}
    named = set().union(*(known_files(g.index_path, g.manifest_path) for g in kept))
    assert segment_files(cfg) == named  # every file named by a kept generation, and only those
    assert not first <= segment_files(cfg)  # the oldest generation's edited segment went with it
    assert main(["check", "--config", str(cfg.output_dir / "rag.yaml")]) == 0


def test_an_older_single_file_index_is_read_and_its_ledger_carried_over(write_tree, tmp_path):
    content = write_tree(TREE)
    cfg = build(content, tmp_path / "out")
    gen = generations.published(cfg)
    index = read_index(gen.index_path)
    # The same chunks as a 1.0 index (chunks inline) reads back as the same index.
    header = IndexHeader(
        index["model"], index["dimension"], index["provider"], index["builtAt"], index["contentHash"], 0, {}
    )
    old = tmp_path / "old-index.json"
    collections: list = []
    old.write_bytes(render_index(header, collections, 5)[:-2] + orjson.dumps(index["chunks"])[1:-1] + b"]}")
    assert read_index(old)["chunks"] == index["chunks"]
    # A 1.0 manifest (the ledger inline): the next publish takes each document's first indexing from it.
    manifest = read_manifest(gen.manifest_path)
    assert manifest is not None and len(manifest["documents"]) == len(TREE)
    for entry in manifest["documents"].values():
        entry["indexedAt"] = "2000-01-01T00:00:00Z"
    manifest.pop("ledger")
    manifest["version"] = "1.0"
    gen.manifest_path.write_bytes(orjson.dumps(manifest))
    build(content, tmp_path / "out")  # the manifest no longer matches its sidecar: republished
    migrated = read_manifest(generations.published(cfg).manifest_path)
    assert migrated is not None and "ledger" in migrated
    assert {e["indexedAt"] for e in migrated["documents"].values()} == {"2000-01-01T00:00:00Z"}


def test_a_damaged_segment_is_reported_and_made_again_by_the_next_build(write_tree, tmp_path, capsys):
    content = write_tree(TREE)
    cfg = build(content, tmp_path / "out")
    config = str(cfg.output_dir / "rag.yaml")
    assert main(["check", "--config", config]) == 0
    index = orjson.loads(cfg.index_path.read_bytes())
    path = cfg.public_dir / index["segments"][0]["chunks"]["file"]
    good = path.read_bytes()
    path.write_bytes(good.replace(b"Note", b"Nope", 1))  # same size, other bytes
    capsys.readouterr()
    assert main(["check", "--config", config]) == 1
    assert path.name in capsys.readouterr().out
    assert main(["build", "--config", config]) == 0
    assert path.read_bytes() == good
    assert main(["check", "--config", config]) == 0


def test_an_unchanged_collection_is_named_again_without_its_records(write_tree, tmp_path):
    """SegmentPublisher.reuse: a publish that loads only the changed collections names the
    previous generation's segments of the others as they were, ledger included."""
    content = write_tree(TREE)
    cfg = build(content, tmp_path / "out")
    gen = generations.published(cfg)
    publisher = SegmentPublisher(
        cfg.data_dir,
        gen.store_path,
        tmp_path,
        5,
        "int16-bin",
        "2026-12-03T00:00:00Z",
        gen.index_path,
        gen.manifest_path,
    )
    try:
        assert publisher.reuse("docs") and not publisher.reuse("no-such-collection")
    finally:
        publisher.close()
    before = orjson.loads(gen.index_path.read_bytes())["segments"]
    assert [s.as_json() for s in publisher.segments] == [s for s in before if s["collection"] == "docs"]
    ledger = orjson.loads(gen.manifest_path.read_bytes())["ledger"]
    assert publisher.ledger == [e for e in ledger if e["collection"] == "docs"]
    assert publisher.documents == 8 and publisher.written == []


def test_change_detection_reads_only_the_changed_collections_ledger(write_tree, tmp_path):
    """An edit reads its collection's ledger segments, not the corpus's: with the ledger of an
    unchanged collection gone, the edit is still seen as one changed file (reading the whole
    ledger made every collection new). Without a readable ledger of the changed collection,
    every collection is new, as with a damaged manifest."""
    content = write_tree(TREE)
    cfg = build(content, tmp_path / "out")
    gen = generations.published(cfg)
    ledger = {e["collection"]: e["ledger"]["file"] for e in orjson.loads(gen.manifest_path.read_bytes())["ledger"]}
    only_docs = read_manifest(gen.manifest_path, collections={"docs"})
    assert only_docs is not None and {d["path"].split("/")[0] for d in only_docs["documents"].values()} == {"docs"}
    (content / "docs" / "note-3.md").write_text("---\ntitle: Note 3\n---\nNote 3 now talks about zebras.\n")
    (cfg.public_dir / ledger["posts"]).unlink()
    assert read_manifest(gen.manifest_path) is None  # the whole ledger cannot be read any more
    report = detect_changes(cfg, save_stat_cache=False, verify_outputs=False)
    status = {c.collection: (c.status, c.changed, c.added) for c in report.collections}
    assert status == {"docs": ("changed", ["docs/note-3.md"], []), "posts": ("unchanged", [], [])}
    (cfg.public_dir / ledger["docs"]).unlink()
    report = detect_changes(cfg, save_stat_cache=False, verify_outputs=False)
    assert {c.collection: c.status for c in report.collections} == {"docs": "new", "posts": "new"}
