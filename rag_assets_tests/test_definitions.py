"""End to end through Dagster: every partition materialised in-process with a real instance.

The builds use in-memory instances (``DagsterInstance.ephemeral``: the same runs, event logs and
materialisations, read through the same API, without SQLite commits), except the one that is
about the project's on-disk dagster.yaml."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.config import load_config
from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.jobs import (
    INDEX_COLLECTION_JOB,
    PUBLISH_JOB,
    UPDATE_COLLECTION_JOB,
)
from rag_assets.defs.partitions import (
    COLLECTIONS_PARTITION,
    range_tags,
    sync_partitions,
)
from rag_assets.defs.runner import run_build
from rag_assets.index.index_json import read_index, read_meta
from rag_assets.index.manifest import read_manifest
from rag_assets.ingest.collections import discover_collections

from .conftest import CORPORA, PROXMOX_POST, REPO_ROOT, SAMPLE_CONTENT, check_sample_build


def build_everything(cfg, instance) -> dg.ExecuteInProcessResult:
    """One run of the update job over every collection partition, as `rag build` does."""
    defs = build_definitions(cfg)
    sync_partitions(instance, cfg)
    keys = list(instance.get_dynamic_partitions(COLLECTIONS_PARTITION))
    return defs.resolve_job_def(UPDATE_COLLECTION_JOB).execute_in_process(instance=instance, tags=range_tags(keys))


def metadata_of(result: dg.ExecuteInProcessResult, asset: str, partition: str | None = None) -> dict:
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        if mat.asset_key.to_user_string() == asset and mat.partition == partition:
            return {k: v.value for k, v in mat.metadata.items()}
    raise AssertionError(f"{asset} {partition or ''} was not materialised")


def partitions_of(result: dg.ExecuteInProcessResult, asset: str) -> set[str]:
    return {
        e.event_specific_data.materialization.partition
        for e in result.get_asset_materialization_events()
        if e.event_specific_data.materialization.asset_key.to_user_string() == asset
    }


BAD_INPUT_TREE = {
    "posts/homelab-proxmox-setup.md": PROXMOX_POST,
    "posts/windows.md": b"\xef\xbb\xbf---\r\ntitle: CRLF\r\n---\r\nSome text with CRLF endings.\r\n",
    "posts/broken-yaml.md": "---\ntitle: 'unterminated\n---\nbody",
    "posts/latin1.md": "r\xe9sum\xe9".encode("latin-1"),
    "posts/empty.md": "",
    "posts/photo.jpg": b"\xff\xd8\xff\xe0\0\x10JFIF",
    "docs/guide.mdx": "import X from 'x'\n\n# Guide\n\nUse <X /> to do things.\n",
    "docs/dupe.md": "# Setup\n\none\n\n## Verify\n\na\n\n## Verify\n\nb\n",
    "bad...name/note.md": "# Never indexed",
}


def test_bad_input_is_reported_and_everything_else_is_indexed(write_tree, make_config):
    cfg = make_config(write_tree(BAD_INPUT_TREE))
    with dg.DagsterInstance.ephemeral() as instance:
        result = build_everything(cfg, instance)
    assert result.success
    assert partitions_of(result, "embeddings") == {"docs", "posts"}  # the forbidden folder name is not a partition

    parsed = metadata_of(result, "parsed_documents", "posts")
    assert parsed["documents"] == 2 and parsed["skipped_files"] == 4
    for needle in ("broken-yaml.md", "invalid YAML", "latin1.md", "UTF-8", "empty.md", "photo.jpg"):
        assert needle in parsed["skipped"]

    index = read_index(cfg.index_path)
    ids = {c["id"] for c in index["chunks"]}
    assert {"posts/homelab-proxmox-setup/chunk-0", "posts/windows/chunk-0", "docs/guide/chunk-0"} <= ids
    assert index["collections"] == {"docs": {"chunks": 2, "documents": 2}, "posts": {"chunks": 2, "documents": 2}}
    published = metadata_of(result, "public_index")
    assert published["skipped_files"] == 4 and "photo.jpg" in published["skipped"]


def test_sample_content_builds_into_every_output(make_config):
    cfg = make_config(SAMPLE_CONTENT)
    with dg.DagsterInstance.ephemeral() as instance:
        publish = build_everything(cfg, instance)
        assert publish.success
        assert len(instance.get_runs()) == 1  # every collection and publishing: one run
        checks = publish.get_asset_check_evaluations()
        assert {c.check_name: c.passed for c in checks} == {
            "outputs_consistent": True,
            "index_complete": True,
            "index_matches_content": True,
            "index_recent": True,
            "embedding_service": True,
        }
        # Metadata the UI shows for each step, per partition.
        assert metadata_of(publish, "content_hash", "posts")["files"] >= 5
        assert "headingPath" not in metadata_of(publish, "chunks", "posts")["preview"]  # rendered as a path, not JSON
        assert metadata_of(publish, "embeddings", "posts")["model"] == "rag-assets/feature-hash-v1"
        index_meta = metadata_of(publish, "public_index")
        for key in (
            "documents",
            "chunks",
            "per_collection",
            "model",
            "dimension",
            "content_hash",
            "index_size",
            "preview",
            "skipped",
        ):
            assert key in index_meta
        # Each partition's materialisation carries its own collection's figures.
        for name in ("docs", "posts"):
            parsed = metadata_of(publish, "parsed_documents", name)
            assert parsed["documents"] == len(list((SAMPLE_CONTENT / name).rglob("*.md*")))
            assert metadata_of(publish, "content_hash", name)["folder"].endswith(name)

    assert partitions_of(publish, "embeddings") == {"docs", "journal", "learn", "posts", "projects"}
    index = read_index(cfg.index_path)
    assert index["version"] and index["dimension"] == 384 and index["model"] == "rag-assets/feature-hash-v1"
    assert index["totalChunks"] == len(index["chunks"]) >= 25
    chunk = index["chunks"][0]
    assert set(chunk) == {"id", "text", "embedding", "metadata"}
    assert set(chunk["metadata"]) == {
        "collection",
        "slug",
        "title",
        "chunkIndex",
        "totalChunks",
        "headingPath",
        "wordCount",
        "tags",
    }
    assert len(chunk["embedding"]) == 384

    meta = read_meta(cfg.meta_path)
    assert cfg.meta_path.stat().st_size < 1000  # header, per-collection counts, size, digests, generation
    assert meta["contentHash"] == index["contentHash"] and meta["sizeBytes"] == cfg.index_path.stat().st_size

    with sqlite3.connect(cfg.public_store_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        n_chunks = conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        assert n_chunks == index["totalChunks"]
        hits = conn.execute(
            "SELECT c.id FROM fts_chunks f JOIN chunks c ON c.rowid = f.rowid WHERE fts_chunks MATCH 'vlan' "
            "ORDER BY bm25(fts_chunks) LIMIT 3"
        ).fetchall()
        assert any(h[0].startswith("posts/homelab-proxmox-setup/") for h in hits)
        (blob,) = conn.execute("SELECT embedding FROM chunks LIMIT 1").fetchone()
        assert len(blob) == 384 * 4
        assert conn.execute("SELECT model, dimension FROM embeddings_meta").fetchone() == (
            "rag-assets/feature-hash-v1",
            384,
        )

    manifest = read_manifest(cfg.manifest_path)
    assert manifest["stats"]["totalChunks"] == index["totalChunks"]
    assert "posts/homelab-proxmox-setup" in manifest["documents"]


def test_a_sample_build_with_a_persistent_instance_is_three_runs_with_metadata_per_partition(tmp_path):
    """What `tasks.py build` does: the project's dagster.yaml, a real DAGSTER_HOME, rag.yaml's vaults."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    cfg = load_config(REPO_ROOT / "rag.yaml", output_dir=tmp_path / "out", embedder="hashing", environ={})
    collections = discover_collections(cfg).collections
    with dg.DagsterInstance.from_config(str(home)) as instance:
        outcome = run_build(cfg, instance, full=True)
        check_sample_build(instance, outcome, collections)
    assert [c.collection for c in outcome.collections] == list(collections)


def test_a_collection_not_built_yet_is_left_out_and_named(write_tree, make_config):
    cfg = make_config(write_tree({"posts/a.md": PROXMOX_POST, "docs/b.md": "# B\n\ntext"}))
    defs = build_definitions(cfg)
    with dg.DagsterInstance.ephemeral() as instance:
        sync_partitions(instance, cfg)
        defs.resolve_job_def(INDEX_COLLECTION_JOB).execute_in_process(partition_key="posts", instance=instance)
        publish = defs.resolve_job_def(PUBLISH_JOB).execute_in_process(instance=instance)
    assert metadata_of(publish, "public_index")["not_built"] == "docs"
    assert set(read_index(cfg.index_path)["collections"]) == {"posts"}


@pytest.mark.parametrize("corpus", ["hugo-docs", "jekyll-docs"])
def test_real_corpus_builds_with_every_file_accounted_for(corpus, make_config):
    content = CORPORA / corpus / "content"
    if not content.is_dir():
        pytest.skip(f"{content} is not present")
    cfg = make_config(content)
    with dg.DagsterInstance.ephemeral() as instance:
        result = build_everything(cfg, instance)
    assert result.success
    collections = discover_collections(cfg).collections
    on_disk = {p.relative_to(content).as_posix() for p in content.rglob("*") if p.is_file()}
    loose = set(discover_collections(cfg).loose_files)
    indexed = {d["path"] for d in read_manifest(cfg.manifest_path)["documents"].values()}
    skipped = set()
    parsed_by_collection = result.output_for_node("parsed_documents")
    for name in collections:
        skipped |= {s.path for s in parsed_by_collection[name].skipped}
    assert indexed | skipped | loose == on_disk
    assert not indexed & skipped
    assert len(indexed) >= 0.95 * len(on_disk)


def test_the_workspace_is_the_one_code_location_and_reads_the_config_it_is_given(tmp_path):
    """workspace.yaml names the lazy ``defs``: the configuration is read when the location
    loads, from $RAG_CONFIG; a broken one fails the load with its message, not the import.
    With no target, Dagster's CLI loads the top-level workspace.yaml, as `dagster dev` does.

    Two CLI processes (each starts Python and Dagster, ~6 CPU s): the broken configuration
    through ``-w`` from another folder, the good one with no target from the checkout."""
    workspace = REPO_ROOT / "workspace.yaml"
    assert "tool.dagster" not in (REPO_ROOT / "pyproject.toml").read_text()  # one entry point only
    bad = tmp_path / "bad.yaml"
    bad.write_text("chunking: {min_words: 900}\n")

    def validate(config: Path, *target: str, cwd: Path) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_")}
        return subprocess.run(
            [sys.executable, "-m", "dagster", "definitions", "validate", *target],
            cwd=cwd,
            env={**env, "RAG_CONFIG": str(config)},
            capture_output=True,
            text=True,
            timeout=300,
        )

    broken = validate(bad, "-w", str(workspace), cwd=tmp_path)
    assert broken.returncode != 0 and "chunking.min_words must not exceed target_words" in broken.stdout + broken.stderr
    good = validate(REPO_ROOT / "rag.yaml", cwd=REPO_ROOT)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Validation successful for code location rag_assets." in good.stdout + good.stderr
