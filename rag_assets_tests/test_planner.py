"""One planner for every trigger: `rag build`, the sensors, the nightly schedules and a run
launched from the UI run the same plan (rag_assets/planning.py), executed for real."""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import dagster as dg
import yaml

from rag_assets.config import load_config
from rag_assets.config.schema import HashingSection
from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.partitions import (
    COLLECTIONS_PARTITION,
    covering_range,
    sync_partitions,
)
from rag_assets.defs.runner import run_build
from rag_assets.defs.schedules import build_nightly_schedule
from rag_assets.defs.sensors import build_change_sensor, build_vault_sensor
from rag_assets.index.index_json import read_index, read_meta
from rag_assets.planning import Reason, observe, plan
from rag_assets.serve.cli import main

from .conftest import PROXMOX_POST
from .test_sensors import build_index, evaluate, partitions_of, touch

TREE = {
    "posts/a.md": PROXMOX_POST,
    "posts/b.md": "# B\n\nbridges and bonds on the small box",
    "docs/c.md": "# C\n\nzfs datasets and their snapshots",
    "docs/d.md": "# D\n\nbackups to a second pool, weekly",
}
# What the outputs of two builds must agree on (the sidecar) to be the same index.
SAME = (
    "contentHash",
    "chunkIdsSha256",
    "model",
    "dimension",
    "vectorEncoding",
    "chunking",
    "totalChunks",
    "collections",
)


def write_config(root: Path, **settings) -> Path:
    """rag.yaml for a twin: its content and outputs, the hashing embedder, the given settings."""
    data = {
        "content_dir": str(root / "content"),
        "output_dir": str(root / "out"),
        "embedder": {"name": "hashing", "hashing": {"dimension": settings.get("dimension", 384)}},
        "chunking": {"target_words": settings.get("target_words", 400)},
        "public_index": {"vector_encoding": settings.get("encoding", "float")},
        "evaluation": {"questions": []},
    }
    path = root / "rag.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / "content" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def outputs(root: Path) -> dict:
    meta = read_meta(root / "out" / "public" / "embeddings-meta.json")
    assert meta is not None
    return {key: meta.get(key) for key in SAME}


# Each change, applied alike to both twins: (name, edit of the content, new settings, expected reasons).
def edit(root):
    touch(root / "content" / "posts" / "b.md", "# B\n\nbridges, bonds and vlans")


def add(root):
    touch(root / "content" / "posts" / "new.md", "# New\n\na note on ceph and its monitors")


def remove(root):
    (root / "content" / "docs" / "d.md").unlink()


def rename(root):
    (root / "content" / "posts" / "new.md").rename(root / "content" / "posts" / "renamed.md")


def new_collection(root):
    write_files(root, {"learn/x.md": "# X\n\nnew notes on learning rust"})


def removed_collection(root):
    shutil.rmtree(root / "content" / "learn")


def nothing(root):
    pass


STEPS = [
    ("edit", edit, {}, {Reason.FILES_CHANGED}),
    ("add", add, {}, {Reason.FILES_ADDED}),
    ("remove", remove, {}, {Reason.FILES_REMOVED}),
    ("rename", rename, {}, {Reason.FILES_RENAMED}),
    ("new collection", new_collection, {}, {Reason.NEW_COLLECTION}),
    ("removed collection", removed_collection, {}, {Reason.COLLECTION_REMOVED}),
    ("encoding", nothing, {"encoding": "int8"}, {Reason.ENCODING_CHANGED}),
    ("chunker", nothing, {"encoding": "int8", "target_words": 300}, {Reason.CHUNKER_CHANGED}),
    ("model", nothing, {"encoding": "int8", "target_words": 300, "dimension": 256}, {Reason.MODEL_CHANGED}),
]


def test_rag_build_and_the_sensor_run_the_same_plan_for_every_kind_of_change(tmp_path, capsys):
    """Twin A is kept by `rag build`, twin B by the change sensor's runs; after each change,
    the sensor requests the partitions of A's plan (in one range), and both outputs agree.

    Twin B's instance is Dagster's ephemeral (in-memory) one, as `rag build` uses when
    DAGSTER_HOME is unset: the sensor reads only its dynamic partitions, which it holds like an
    on-disk instance; the storages themselves are covered by the make_instance tests (SQLite,
    PostgreSQL). Eighteen builds on a SQLite instance cost about twice the CPU."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        write_files(root, TREE)
    config_a, config_b = write_config(a), write_config(b)
    assert main(["build", "--config", str(config_a)]) == 0
    with dg.DagsterInstance.ephemeral() as instance:
        cfg_b = load_config(config_b)
        assert run_build(cfg_b, instance).success
        cursor = evaluate(build_change_sensor(cfg_b), instance, None, cfg_b).cursor
        assert outputs(a) == outputs(b)
        for name, change, settings, reasons in STEPS:
            for root in (a, b):
                change(root)
            config_a, config_b = write_config(a, **settings), write_config(b, **settings)
            cfg_a, cfg_b = load_config(config_a), load_config(config_b)
            planned = plan(cfg_a, observe(cfg_a, save_stat_cache=False))
            assert planned.reasons() == reasons, name
            capsys.readouterr()
            assert main(["build", "--config", str(config_a)]) == 0, name
            printed = capsys.readouterr().out
            assert f"Building {len(planned.collections)} collection(s)" in printed or not planned.collections

            result = evaluate(build_change_sensor(cfg_b), instance, cursor, cfg_b)
            cursor = result.cursor
            [request] = result.run_requests
            order = list(instance.get_dynamic_partitions(COLLECTIONS_PARTITION))
            if planned.collections:
                assert request.job_name == "update_collection", name
                assert partitions_of(request, instance, COLLECTIONS_PARTITION) == covering_range(
                    order, planned.keys(cfg_a)
                )
                assert request.tags["rag/build"] == ("full" if planned.full else "incremental")
            else:
                assert request.job_name == "publish_index" and planned.publish, name
            job = build_definitions(cfg_b).resolve_job_def(request.job_name)
            assert job.execute_in_process(
                instance=instance, partition_key=request.partition_key, tags=request.tags
            ).success
            assert outputs(a) == outputs(b), name
            for cfg in (cfg_a, cfg_b):  # both current: nothing more to do, for any trigger
                assert plan(cfg, observe(cfg)).empty, name
            assert not evaluate(build_change_sensor(cfg_b), instance, cursor, cfg_b).run_requests, name
        assert outputs(b)["dimension"] == 256 and outputs(b)["vectorEncoding"] == "int8"


def test_the_nightly_schedule_runs_the_forced_plan(write_tree, make_config, make_instance):
    cfg = make_config(write_tree(TREE))
    with make_instance() as instance:
        sync_partitions(instance, cfg)
        when = datetime.datetime(2026, 12, 2, 3, 0, tzinfo=datetime.UTC)
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=when)
        [request] = build_nightly_schedule(cfg).evaluate_tick(context).run_requests
        forced = plan(cfg, observe(cfg), force=True)
        assert forced.reasons() == {Reason.FORCED} and forced.full
        assert partitions_of(request, instance, COLLECTIONS_PARTITION) == forced.keys(cfg) == ["docs", "posts"]
        assert request.tags["rag/build"] == "full"


def vectors_of_index(cfg) -> set[int]:
    """The length of every vector in the published JSON index (float encoding)."""
    index = read_index(cfg.index_path)
    return {len(chunk["embedding"]) for chunk in index["chunks"]}


def test_a_partition_materialised_from_the_ui_after_a_model_change_publishes_one_model(
    write_tree, make_config, make_instance
):
    """The UI's "materialize" of one partition after the embedder changed: no MixedModelsError;
    the publish step embeds the other partitions' records again, so the index holds one model."""
    cfg = make_config(write_tree(TREE))
    with make_instance() as instance:
        assert run_build(cfg, instance).success
        assert read_meta(cfg.meta_path)["dimension"] == 384
        changed = dataclasses.replace(
            cfg, embedding=cfg.embedding.model_copy(update={"hashing": HashingSection(dimension=256)})
        )
        job = build_definitions(changed).resolve_job_def("update_collection")
        result = job.execute_in_process(instance=instance, partition_key="posts", raise_on_error=False)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        materialised = {
            e.event_specific_data.materialization.partition
            for e in result.get_asset_materialization_events()
            if e.event_specific_data.materialization.asset_key.to_user_string() == "embeddings"
        }
        assert materialised == {"posts"}  # Dagster's partitions keep their meaning
        meta = read_meta(cfg.meta_path)
        assert meta["dimension"] == 256
        assert set(meta["collections"]) == {"docs", "posts"}  # nothing published was lost
        assert vectors_of_index(cfg) == {256}
        with closing(sqlite3.connect(cfg.public_store_path)) as conn:
            dims = {d for (d,) in conn.execute("SELECT DISTINCT dimension FROM embeddings_meta")}
            sizes = {n for (n,) in conn.execute("SELECT DISTINCT length(embedding) FROM chunks")}
        assert dims == {256} and len(sizes) == 1  # every stored vector of the one dimension
        assert main(["check", "--content-dir", str(cfg.content_dir), "--output-dir", str(cfg.output_dir)]) == 0


def test_the_vault_sensor_and_rag_build_plan_the_same_vaults(write_tree, make_config, make_instance, tmp_path):
    """Notes edited, the Safe rules changed, a vault gone from a tier: the vault sensor asks for
    the vaults (and purge) the planner gives `rag build`, with the typed reason of each."""
    from .test_sensors import VAULT_TREE, vault_config

    content = write_tree(VAULT_TREE)
    identity = tmp_path / "map.json"
    identity.write_text(json.dumps({"rules": []}))
    cfg = dataclasses.replace(vault_config(content, make_config), identity_map_path=identity)
    with make_instance() as instance, dg.DagsterInstance.ephemeral() as builds:
        assert build_index(cfg, instance, builds).success  # the builds' runs on their own instance

        def sensor_vaults(config) -> dict[str, list[str]]:
            data = evaluate(build_vault_sensor(config), instance, None, config)
            jobs = {"update_safe_vaults": "safe", "update_private_vaults": "private"}
            from rag_assets.defs.partitions import VAULT_PARTITIONS

            out = {}
            for request in data.run_requests:
                if request.job_name in jobs:
                    tier = jobs[request.job_name]
                    out[tier] = partitions_of(request, instance, VAULT_PARTITIONS[tier])
                else:
                    out["purge"] = [request.job_name]
            return out

        touch(content / "vaults" / "me" / "diary.md", "# Diary\n\nDentist moved to Wednesday.\n")
        planned = plan(cfg, observe(cfg))
        assert planned.reasons() == {Reason.VAULT_NOTES_CHANGED} and planned.vaults == {"private": ["me"]}
        assert sensor_vaults(cfg) == planned.vaults
        assert run_build(cfg, builds, collections=[], vaults=planned.vault_names, publish=False).success

        identity.write_text(
            json.dumps({"rules": [{"kind": "user", "literal": "blue pot", "placeholder": "[USER:pot]"}]})
        )
        planned = plan(cfg, observe(cfg))
        assert planned.reasons() == {Reason.SAFE_RULES_CHANGED} and planned.vaults == {"safe": ["notes"]}
        assert sensor_vaults(cfg) == planned.vaults
        assert run_build(cfg, builds, collections=[], vaults=planned.vault_names, publish=False).success

        without = dataclasses.replace(cfg, vaults=tuple(v for v in cfg.vaults if v.name != "me"))
        planned = plan(without, observe(without))
        assert planned.reasons() == {Reason.VAULT_DEPARTED} and planned.purge == {"private": ["me"]}
        assert sensor_vaults(without) == {"purge": ["refresh_tier_stores"]}
        assert plan(cfg, observe(cfg)).empty
