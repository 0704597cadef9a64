"""Sharded collections: a collection split into partitions `<collection>~<i>` publishes exactly
what it publishes unsharded, shard by shard, in any order, and stays right through edits,
deletions, the change sensor and a change of its shard count.

Real Dagster runs in ephemeral instances, real files; one small generated collection.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path

import dagster as dg
import orjson
import pytest

from rag_assets.config import ConfigError, RagConfig, load_config
from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.jobs import INDEX_COLLECTION_JOB, PUBLISH_JOB, UPDATE_COLLECTION_JOB
from rag_assets.defs.partitions import COLLECTIONS_PARTITION, RANGE_END_TAG, RANGE_START_TAG, sync_partitions
from rag_assets.defs.runner import QUIET_RUN_CONFIG, run_build
from rag_assets.defs.sensors import build_change_sensor
from rag_assets.index.consistency import check_public_outputs
from rag_assets.index.freshness import detect_changes
from rag_assets.index.index_json import read_index
from rag_assets.index.segments import known_files
from rag_assets.ingest.collections import discover_collections
from rag_assets.ingest.shards import Shard, shard_for_key, shard_index

BUILT_AT = "2026-12-01T12:00:00Z"
PUBLISHED = ("embeddings-index.json", "embeddings-meta.json", "rag-manifest.json")


def slug_trio_stem(count: int) -> str:
    """A stem whose .markdown, .md and .mdx files share a slug, with the first of them (in path
    order, the parser's owner) in one shard and the other two together in another: the case
    where a shard names a different owner than the whole collection would."""
    for n in range(10_000):
        stem = f"guide-{n}"
        first, second, third = (shard_index(f"{stem}{ext}", count) for ext in (".markdown", ".md", ".mdx"))
        if second == third != first:
            return stem
    raise AssertionError("no such stem")


def generated_tree(root: Path, count: int) -> None:
    """Twenty pages over two folders, a non-Markdown file, an empty file and a slug trio."""
    docs = root / "docs"
    for i in range(20):
        folder = docs / ("guides" if i % 3 == 0 else "")
        folder.mkdir(parents=True, exist_ok=True)
        words = " ".join(f"w{(i * 7 + j) % 97}" for j in range(60 + i * 5))
        (folder / f"page-{i:02d}.md").write_text(
            f"---\ntitle: Page {i}\ndate: 2026-01-{i % 28 + 1:02d}\ntags: [t{i % 4}]\n---\n# Page {i}\n\n{words}.\n\n"
            f"## Part two\n\nmore words uq{i}x about shards {words[:80]}.\n"
        )
    (docs / "image.png").write_bytes(b"\x89PNG not markdown")
    (docs / "empty.md").write_text("")
    stem = slug_trio_stem(count)
    for ext in (".markdown", ".md", ".mdx"):
        (docs / f"{stem}{ext}").write_text(f"# {stem} {ext}\n\ntext of the {ext} file uq{ext[1:]}x.\n")
    (root / "posts").mkdir()
    (root / "posts" / "one.md").write_text("# One\n\nposts stay unsharded.\n")


def sharded(cfg: RagConfig, **shards: int) -> RagConfig:
    return dataclasses.replace(cfg, collection_shards=shards)


@pytest.fixture
def fixed_clock(monkeypatch):
    """One build time and generation name, so two builds can be compared byte for byte."""
    monkeypatch.setattr("rag_assets.defs.publish.utc_now_iso", lambda: BUILT_AT)
    monkeypatch.setattr("rag_assets.index.generations.new_generation_id", lambda built_at: "20261201T120000Z-fixed")


def published_bytes(cfg: RagConfig) -> dict[str, bytes]:
    folder = cfg.index_path.resolve().parent
    named = known_files(folder / "embeddings-index.json", folder / "rag-manifest.json")
    segments = {name: (cfg.data_dir / "segments" / name).read_bytes() for name in sorted(named)}
    return (
        {name: (folder / name).read_bytes() for name in PUBLISHED}
        | segments
        | {"store": cfg.public_store_path.resolve().read_bytes()}
    )


def index_text(cfg: RagConfig) -> str:
    """The published index with its segments' chunks, as text (to look for a word)."""
    return orjson.dumps(read_index(cfg.index_path)).decode()


def store_rows(cfg: RagConfig) -> list:
    with closing(sqlite3.connect(f"file:{cfg.public_store_path}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT id, text FROM chunks ORDER BY id").fetchall()


def run_job(defs: dg.Definitions, instance: dg.DagsterInstance, job: str, partition: str | None = None):
    result = defs.resolve_job_def(job).execute_in_process(
        instance=instance, raise_on_error=False, run_config=QUIET_RUN_CONFIG, partition_key=partition
    )
    return result


@pytest.fixture
def content(tmp_path: Path) -> Path:
    generated_tree(tmp_path / "content", 3)
    return tmp_path / "content"


@pytest.fixture
def unsharded_bytes(content: Path, make_config, tmp_path: Path, fixed_clock) -> dict[str, bytes]:
    cfg = make_config(content, output_dir=tmp_path / "plain")
    with dg.DagsterInstance.ephemeral() as instance:
        outcome = run_build(cfg, instance)
        assert outcome.success, outcome.error
    return published_bytes(cfg)


# --- the split --------------------------------------------------------------------------------


def test_the_shard_of_a_file_is_a_stable_hash_of_its_path_in_the_collection() -> None:
    # SHA-256, not Python's per-process salted hash(): the same on every machine and run.
    assert [shard_index(f"page-{i}.md", 4) for i in range(8)] == [shard_index(f"page-{i}.md", 4) for i in range(8)]
    assert shard_index("a/b.md", 7) == int.from_bytes(__import__("hashlib").sha256(b"a/b.md").digest()[:8], "big") % 7
    assert {shard_index(f"page-{i}.md", 4) for i in range(40)} == {0, 1, 2, 3}
    shard = Shard("docs", 1, 3)
    assert shard.key == "docs~1" and Shard("docs").key == "docs"
    assert shard.holds("docs/x/y.md") == (shard_index("x/y.md", 3) == 1)


def test_partition_keys_follow_the_configured_shard_count(tmp_path: Path, make_config) -> None:
    (tmp_path / "content" / "docs").mkdir(parents=True)
    (tmp_path / "content" / "posts").mkdir()
    (tmp_path / "content" / "odd~1").mkdir()  # would pass for a shard of `odd`
    cfg = sharded(make_config(tmp_path / "content"), docs=2)
    discovery = discover_collections(cfg)
    assert discovery.collections == ("docs", "posts")
    assert any(folder == "odd~1" and "'~'" in reason for folder, reason in discovery.excluded)
    assert shard_for_key(cfg, "docs~1") == Shard("docs", 1, 2)
    for stale in ("docs", "docs~2", "docs~01", "posts~0"):
        with pytest.raises(ValueError):
            shard_for_key(cfg, stale)
    with dg.DagsterInstance.ephemeral() as instance:
        sync_partitions(instance, cfg)
        assert instance.get_dynamic_partitions(COLLECTIONS_PARTITION) == ["docs~0", "docs~1", "posts"]


def test_shards_are_validated_in_rag_yaml(tmp_path: Path) -> None:
    config = tmp_path / "rag.yaml"
    config.write_text("shards:\n  docs: 0\n  posts: two\n  big: 2.5\n  'a~b': 2\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config, environ={})
    message = str(caught.value)
    assert "4 problems" in message
    assert "shards.docs" in message and "shards.posts" in message and "shards.big" in message and "'~'" in message
    config.write_text("shards:\n  docs: 4\n  2024: 2\n  not-a-folder-yet: 3\n")  # like weights: unknown names are fine
    cfg = load_config(config, environ={})
    assert (cfg.shard_count("docs"), cfg.shard_count("2024"), cfg.shard_count("posts")) == (4, 2, 1)


# --- byte-identical publishing -----------------------------------------------------------------


def test_shards_built_one_by_one_in_any_order_publish_exactly_the_unsharded_outputs(
    content: Path, make_config, tmp_path: Path, unsharded_bytes: dict[str, bytes]
) -> None:
    cfg = sharded(make_config(content, output_dir=tmp_path / "sharded"), docs=3)
    defs = build_definitions(cfg)
    with dg.DagsterInstance.ephemeral() as instance:
        sync_partitions(instance, cfg)
        assert instance.get_dynamic_partitions(COLLECTIONS_PARTITION) == ["docs~0", "docs~1", "docs~2", "posts"]
        for key in ("docs~2", "posts", "docs~0"):  # each its own run, out of order
            assert run_job(defs, instance, INDEX_COLLECTION_JOB, key).success
        # One shard missing: publishing would drop its files, so it refuses.
        refused = run_job(defs, instance, PUBLISH_JOB)
        assert not refused.success
        assert not cfg.index_path.exists()
        assert run_job(defs, instance, INDEX_COLLECTION_JOB, "docs~1").success
        assert run_job(defs, instance, PUBLISH_JOB).success

        # Each shard partition says in the UI which collection it is and how many files it holds.
        records = instance.fetch_materializations(dg.AssetKey("content_hash"), limit=10).records
        meta = {r.partition_key: {k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records}
        files = {
            key: sum(
                1
                for p in (content / "docs").rglob("*")
                if p.is_file() and shard_for_key(cfg, key).holds(f"docs/{p.relative_to(content / 'docs').as_posix()}")
            )
            for key in ("docs~0", "docs~1", "docs~2")
        }
        for key, count in files.items():
            assert (meta[key]["collection"], meta[key]["shard"], meta[key]["files"]) == (
                "docs",
                f"{int(key[-1]) + 1} of 3",
                count,
            )
        assert sum(files.values()) == 25 and min(files.values()) > 0
        assert "collection" not in meta["posts"]

    assert published_bytes(cfg) == unsharded_bytes
    assert check_public_outputs(cfg).ok


def test_edits_deletions_and_a_new_shard_count_keep_the_outputs_those_of_the_unsharded_collection(
    content: Path, make_config, tmp_path: Path
) -> None:
    cfg = sharded(make_config(content, output_dir=tmp_path / "sharded"), docs=3)
    sensor = build_change_sensor(cfg)
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance).success
        ids_before = {row[0] for row in store_rows(cfg)}

        # A current index: the sensor, starting from the manifest and the ledger, requests nothing.
        first = sensor(dg.build_sensor_context(instance=instance, cursor=None, definitions=build_definitions(cfg)))
        assert not first.run_requests, first.run_requests

        # An edit: the sensor asks for the one shard holding the file.
        page = content / "docs" / "page-04.md"
        page.write_text(page.read_text() + "\nAn edit with uqeditx.\n")
        stamp = time.time() + 2
        os.utime(page, (stamp, stamp))
        edited = sensor(
            dg.build_sensor_context(instance=instance, cursor=first.cursor, definitions=build_definitions(cfg))
        )
        [request] = edited.run_requests
        shard_key = f"docs~{shard_index('page-04.md', 3)}"
        assert request.partition_key == shard_key and request.job_name == UPDATE_COLLECTION_JOB
        result = (
            build_definitions(cfg)
            .resolve_job_def(UPDATE_COLLECTION_JOB)
            .execute_in_process(
                instance=instance, partition_key=shard_key, tags=request.tags, run_config=QUIET_RUN_CONFIG
            )
        )
        assert result.success
        assert "uqeditx" in index_text(cfg)

        # A deletion removes the file's chunks from every output.
        (content / "docs" / "page-07.md").unlink()
        assert run_build(cfg, instance, collections=["docs"]).success
        assert not [cid for cid in {row[0] for row in store_rows(cfg)} if cid.startswith("docs/page-07/")]
        assert any(cid.startswith("docs/page-07/") for cid in ids_before)

        # Three shards become two: the old partitions go, the collection is re-indexed whole,
        # nothing is published twice or lost.
        two = sharded(cfg, docs=2)
        assert [(c.collection, c.summary()) for c in detect_changes(two).changed] == [
            ("docs", "re-index needed: its shard count changed")
        ]
        resharded = build_change_sensor(two)(
            dg.build_sensor_context(instance=instance, cursor=edited.cursor, definitions=build_definitions(two))
        )
        [request] = resharded.run_requests
        assert (request.tags[RANGE_START_TAG], request.tags[RANGE_END_TAG]) == ("docs~0", "docs~1")
        [deletion] = resharded.dynamic_partitions_requests
        assert isinstance(deletion, dg.DeleteDynamicPartitionsRequest) and list(deletion.partition_keys) == ["docs~2"]
        assert run_build(two, instance).success
        assert instance.get_dynamic_partitions(COLLECTIONS_PARTITION) == ["docs~0", "docs~1", "posts"]
        assert not detect_changes(two).changed
        # ... and back to one: the plain partition again.
        one = sharded(cfg)
        assert run_build(one, instance).success
        assert instance.get_dynamic_partitions(COLLECTIONS_PARTITION) == ["posts", "docs"]
        assert check_public_outputs(one).ok
        final = store_rows(one)

    # The same content built unsharded from scratch holds the same chunks.
    plain = make_config(content, output_dir=tmp_path / "plain")
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(plain, instance).success
    assert final == store_rows(plain)
    assert len({cid for cid, _ in final}) == len(final)


def test_rag_build_after_an_edit_re_indexes_only_the_shard_holding_the_file(
    content: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    from rag_assets.defs import content as content_assets
    from rag_assets.serve.cli import main

    config = tmp_path / "rag.yaml"
    config.write_text("shards:\n  docs: 3\n")
    args = ["--config", str(config), "--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    walks: list[Path] = []
    real_list = content_assets.list_folder
    monkeypatch.setattr(
        content_assets, "list_folder", lambda root, *a, **k: walks.append(root) or real_list(root, *a, **k)
    )
    assert main(["build", *args]) == 0
    # One walk of each collection folder per step (hash, parse): docs's 3 shards share theirs.
    assert sorted(walks) == sorted([content / "docs", content / "posts"] * 2)
    first = capsys.readouterr().out
    assert all(f"[docs~{i}]" in first for i in range(3)), first
    page = content / "docs" / "guides" / "page-03.md"
    page.write_text(page.read_text() + "\nEdited: uqclix.\n")
    assert main(["build", *args]) == 0
    printed = capsys.readouterr().out
    edited = f"docs~{shard_index('guides/page-03.md', 3)}"
    assert f"[{edited}]" in printed, printed
    assert [line for line in printed.splitlines() if line.startswith("[docs~")] == [
        line for line in printed.splitlines() if line.startswith(f"[{edited}]")
    ]
    cfg = load_config(config, content_dir=content, output_dir=tmp_path / "out", environ={})
    assert "uqclix" in index_text(cfg)
    assert main(["check", *args]) == 0


def test_an_edit_rejoins_only_the_edited_sharded_collection(content: Path, tmp_path: Path, monkeypatch) -> None:
    """An unchanged sharded collection is published from its shards' facts and the facts kept
    of its last rejoin, not unpickled and rejoined; the outputs are an unsharded build's."""
    from rag_assets.index import rejoin as rejoin_module
    from rag_assets.serve.cli import main

    for i in range(6):
        (content / "posts" / f"post-{i}.md").write_text(f"# Post {i}\n\nposts in shards too, uq{i}post.\n")
    config = tmp_path / "rag.yaml"
    config.write_text("shards:\n  docs: 3\n  posts: 2\n")
    args = ["--config", str(config), "--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    joins: list[str] = []
    real_rejoin = rejoin_module.rejoin
    monkeypatch.setattr(rejoin_module, "rejoin", lambda name, shards: joins.append(name) or real_rejoin(name, shards))
    assert main(["build", *args]) == 0
    assert sorted(joins) == ["docs", "posts"]
    cfg = load_config(config, content_dir=content, output_dir=tmp_path / "out", environ={})
    assert (cfg.intermediate_dir / "joined" / "posts.json").is_file()

    for n in range(3):  # every store slot taken in turn: each publish keeps posts from its facts
        joins.clear()
        page = content / "docs" / "guides" / "page-03.md"
        page.write_text(page.read_text() + f"\nEdited: uqclix{n}.\n")
        assert main(["build", *args]) == 0
        assert joins == ["docs"]
        assert f"uqclix{n}" in index_text(cfg)
    # Joined facts that are not those of the shards' records (a record changed since): rejoined.
    joined = cfg.intermediate_dir / "joined" / "posts.json"
    joined.write_bytes(joined.read_bytes().replace(b'"chunks":', b'"chunks":1', 1))
    (content / "docs" / "page-01.md").write_text("# Page 1\n\nrewritten uqlast.\n")
    joins.clear()
    assert main(["build", *args]) == 0
    assert sorted(joins) == ["docs", "posts"]
    assert main(["check", *args]) == 0

    (tmp_path / "plain.yaml").write_text("")
    plain = ["--config", str(tmp_path / "plain.yaml"), "--content-dir", str(content), "--output-dir"]
    assert main(["build", *plain, str(tmp_path / "plain")]) == 0
    plain_cfg = load_config(tmp_path / "plain.yaml", content_dir=content, output_dir=tmp_path / "plain", environ={})
    assert store_rows(cfg) == store_rows(plain_cfg)
    assert read_index(cfg.index_path)["chunks"] == read_index(plain_cfg.index_path)["chunks"]


def test_shard_splits_are_kept_by_content_hash(content: Path, tmp_path: Path, monkeypatch) -> None:
    """A collection's shard hashes are cut once per content: kept by its content hash and shard
    count, cut again when either changes, and always those split_snapshot makes."""
    from rag_assets.ingest import shards as shards_module
    from rag_assets.ingest.shards import ShardSplits, collection_shards, split_snapshot
    from rag_assets.ingest.sources import snapshot_collection

    cuts: list[int] = []
    real = shards_module.split_snapshot
    monkeypatch.setattr(shards_module, "split_snapshot", lambda snap, shards: cuts.append(1) or real(snap, shards))
    cfg = sharded(RagConfig(content_dir=content, output_dir=tmp_path / "out"), docs=3)
    path = tmp_path / "shard-splits.json"
    three = collection_shards(cfg, "docs")
    snapshot = snapshot_collection(content, "docs")
    first = ShardSplits(path)
    assert first.split(snapshot, three) == split_snapshot(snapshot, three) and len(cuts) == 1
    first.save()
    again = ShardSplits(path)
    assert again.split(snapshot, three) == split_snapshot(snapshot, three) and len(cuts) == 1  # kept
    (content / "docs" / "page-01.md").write_text("# Page 1\n\nchanged\n")
    changed = snapshot_collection(content, "docs")
    assert again.split(changed, three) == split_snapshot(changed, three) and len(cuts) == 2  # new content
    two = collection_shards(sharded(cfg, docs=2), "docs")
    assert again.split(changed, two) == split_snapshot(changed, two) and len(cuts) == 3  # another count
    path.write_bytes(b"[damaged")
    assert ShardSplits(path).split(changed, three) == split_snapshot(changed, three)


def test_publishing_takes_the_records_of_the_current_shard_layout_only(make_config, tmp_path: Path) -> None:
    import numpy as np

    from rag_assets.index.rejoin import IncompleteShardsError, rejoin_collections
    from rag_assets.records import EmbeddedCollection, ShardPart

    def record(shard: ShardPart | None) -> EmbeddedCollection:
        return EmbeddedCollection("docs", "h", [], [], np.zeros((0, 4), np.float32), "m", 4, shard=shard)

    unsharded, leftover = record(None), record(ShardPart(0, 2, {}))
    cfg = make_config(tmp_path)
    # A partition of the old layout not yet synced away is not the collection's.
    assert rejoin_collections(cfg, {"docs": unsharded, "docs~0": leftover}) == [unsharded]
    # Under 2 shards: one shard's record is not the collection, nor is a record made as shard 0 of 3.
    with pytest.raises(IncompleteShardsError, match="docs~1"):
        rejoin_collections(sharded(cfg, docs=2), {"docs~0": leftover})
    with pytest.raises(IncompleteShardsError, match="docs~0"):
        rejoin_collections(
            sharded(cfg, docs=2), {"docs~0": record(ShardPart(0, 3, {})), "docs~1": record(ShardPart(1, 2, {}))}
        )
    assert [
        r.collection
        for r in rejoin_collections(sharded(cfg, docs=2), {"docs~0": leftover, "docs~1": record(ShardPart(1, 2, {}))})
    ] == ["docs"]


def test_an_edit_after_the_embedder_dimension_changed_re_embeds_every_shard(tmp_path: Path, capsys) -> None:
    # Same model name, another dimension: an incremental build re-embedded only the edited
    # shard, and publishing then refused the collection (its shards of two dimensions), build
    # after build, since the ledger called the other shards current.
    from rag_assets.serve.cli import main

    content = tmp_path / "content"
    for i in range(6):
        (content / "docs").mkdir(parents=True, exist_ok=True)
        (content / "docs" / f"d{i}.md").write_text(f"# Doc {i}\n\nwords of doc {i}.\n")
    config = tmp_path / "rag.yaml"
    config.write_text("embedder: {name: hashing}\nshards:\n  docs: 3\n")
    args = ["--config", str(config), "--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    assert main(["build", *args]) == 0
    config.write_text("embedder: {name: hashing, hashing: {dimension: 128}}\nshards:\n  docs: 3\n")
    (content / "docs" / "d1.md").write_text("# Doc 1\n\nedited.\n")
    assert main(["build", *args]) == 0, capsys.readouterr().err
    cfg = load_config(config, content_dir=content, output_dir=tmp_path / "out", environ={})
    assert orjson_dimension(cfg) == 128
    assert main(["check", *args]) == 0


def orjson_dimension(cfg: RagConfig) -> int:
    import json

    return json.loads(cfg.meta_path.read_text())["dimension"]


def test_back_to_unsharded_never_publishes_the_record_made_before_the_collection_was_sharded(
    tmp_path: Path, capsys
) -> None:
    # The plain `docs` record left from before the split holds the content of then; the ledger
    # no longer names `docs` (its shards replaced it), and an unsharded collection missing from
    # the ledger was trusted: a later build of another collection published that old record.
    from rag_assets.serve.cli import main

    content = tmp_path / "content"
    (content / "docs").mkdir(parents=True)
    (content / "posts").mkdir()
    for i in range(6):
        (content / "docs" / f"d{i}.md").write_text(f"# Doc {i}\n\nwords of doc {i}.\n")
    (content / "posts" / "p.md").write_text("# Post\n\na post.\n")
    config = tmp_path / "rag.yaml"
    args = ["--config", str(config), "--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    config.write_text("embedder: {name: hashing}\n")
    assert main(["build", *args]) == 0
    config.write_text("embedder: {name: hashing}\nshards:\n  docs: 3\n")
    (content / "docs" / "d1.md").write_text("# Doc 1\n\nedited while sharded uqshardedx.\n")
    assert main(["build", *args]) == 0
    config.write_text("embedder: {name: hashing}\n")
    assert main(["build", *args]) == 0
    (content / "posts" / "p.md").write_text("# Post\n\nan edited post.\n")
    assert main(["build", *args]) == 0
    cfg = load_config(config, content_dir=content, output_dir=tmp_path / "out", environ={})
    assert "uqshardedx" in index_text(cfg)
    assert main(["check", *args]) == 0


def test_a_build_stopped_while_writing_the_shard_records_is_completed_by_the_next_build(
    content: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    # The ledger said every shard of the run held its new files before the IO manager had
    # written their records: a build stopped between two record writes (a kill, a full disk)
    # left a shard's old record under a ledger entry calling it current, and every later
    # build republished that old record instead of re-indexing the shard.
    from rag_assets.defs.io_managers import AtomicPickleIOManager
    from rag_assets.serve.cli import main

    config = tmp_path / "rag.yaml"
    config.write_text("shards:\n  docs: 3\n")
    args = ["--config", str(config), "--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    assert main(["build", *args]) == 0
    page = content / "docs" / "page-05.md"
    page.write_text(page.read_text() + "\nEdited: uqstoppedx.\n")
    shard = f"docs~{shard_index('page-05.md', 3)}"
    # The step's records are staged as it makes them and put in place by the IO manager.
    original = AtomicPickleIOManager.commit_staged

    def stopped(self, records, key, target) -> None:
        if target.parent.name == "embeddings" and key == shard:
            raise OSError("no space left on device")
        original(self, records, key, target)

    monkeypatch.setattr(AtomicPickleIOManager, "commit_staged", stopped)
    assert main(["build", *args]) != 0
    monkeypatch.setattr(AtomicPickleIOManager, "commit_staged", original)
    capsys.readouterr()
    assert main(["build", *args]) == 0
    cfg = load_config(config, content_dir=content, output_dir=tmp_path / "out", environ={})
    assert "uqstoppedx" in index_text(cfg), capsys.readouterr().out
    assert main(["check", *args]) == 0


def test_a_shard_record_left_from_an_earlier_layout_of_the_same_count_is_not_published(
    content: Path, make_config, tmp_path: Path
) -> None:
    # 3 shards, then 2 (docs~2's record stays on disk), an edit in that shard's files, then 3
    # again: docs~2's record is made as shard 2 of 3, so it passed for current although it
    # holds the files of before the edit. Materialising the other shards and publishing (the
    # UI's way) published it: the edit was lost.
    three = sharded(make_config(content, output_dir=tmp_path / "out"), docs=3)
    stem = next(f"page-{i:02d}" for i in range(20) if shard_index(f"page-{i:02d}.md", 3) == 2 and i % 3)
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(three, instance).success
        assert run_build(sharded(three, docs=2), instance).success
        page = content / "docs" / f"{stem}.md"
        page.write_text(page.read_text() + "\nEdited: uqlayoutx.\n")
        sync_partitions(instance, three)
        defs = build_definitions(three)
        for key in ("docs~0", "docs~1"):
            assert run_job(defs, instance, INDEX_COLLECTION_JOB, key).success
        for _ in range(2):  # and a refusal is not forgotten by the next publish
            published = run_job(defs, instance, PUBLISH_JOB)
            assert not published.success or "uqlayoutx" in index_text(three)
        assert check_public_outputs(three).ok
        # rag build re-indexes the shard and publishes the edit.
        assert run_build(three, instance, partitions=detect_changes(three).changed[0].partitions).success
        assert "uqlayoutx" in index_text(three)


def test_concurrent_shard_runs_keep_every_ledger_entry(tmp_path: Path) -> None:
    """Runs of different shards note their records in the one ledger at the same time (Celery
    workers, concurrent partition runs); each read-modify-write must keep the others' entries."""
    import multiprocessing

    from rag_assets.index.freshness import read_indexed_collections

    from .shard_ledger_worker import record_partitions

    (tmp_path / "content" / "docs").mkdir(parents=True)
    keys = [f"docs~{i}" for i in range(64)]
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=record_partitions, args=(str(tmp_path / "out"), str(tmp_path / "content"), keys[w::4], 64)
        )
        for w in range(4)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    cfg = sharded(RagConfig(content_dir=tmp_path / "content", output_dir=tmp_path / "out"), docs=64)
    assert read_indexed_collections(cfg) == {key: f"hash-of-{key}" for key in keys}
