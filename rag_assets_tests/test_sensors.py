"""The change sensor and the nightly schedule, evaluated against a real Dagster instance."""

from __future__ import annotations

import dataclasses
import datetime
import shutil
import time

import dagster as dg

from rag_assets.defs.assembly import build_definitions
from rag_assets.defs.partitions import (
    COLLECTIONS_PARTITION,
    RANGE_END_TAG,
    RANGE_START_TAG,
    sync_partitions,
    sync_vault_partitions,
)
from rag_assets.defs.runner import run_build
from rag_assets.defs.schedules import build_nightly_schedule
from rag_assets.defs.sensors import build_change_sensor

from .conftest import PROXMOX_POST

TREE = {"posts/a.md": PROXMOX_POST, "posts/b.md": "# B\n\nbridges and bonds", "docs/c.md": "# C\n\nzfs datasets"}


def evaluate(sensor, instance, cursor, cfg):
    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=build_definitions(cfg))
    result = sensor(context)  # the documented way to test a sensor: call it with a built context
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
    return result


def partitions_of(request: dg.RunRequest, instance: dg.DagsterInstance, partitions: str) -> list[str]:
    """The partitions one run request covers: its partition key, or its range in Dagster's order."""
    if request.partition_key is not None:
        return [request.partition_key]
    keys = list(instance.get_dynamic_partitions(partitions))
    start, end = keys.index(request.tags[RANGE_START_TAG]), keys.index(request.tags[RANGE_END_TAG])
    return keys[start : end + 1]


def build_index(cfg, instance: dg.DagsterInstance, builds: dg.DagsterInstance | None = None, **kwargs):
    """`rag build` of ``cfg`` (run_build) whose runs go to ``builds`` (default: a new ephemeral
    instance), then ``instance`` given the partitions the build registers, as if it had run there.

    The sensors and schedules read nothing of an instance but its dynamic partitions, so the
    index a test starts from needs no build on the instance under test (SQLite, PostgreSQL): on
    the ephemeral one, a build costs about half the CPU of one on SQLite, and less again than
    one on PostgreSQL. The runs the sensors request still execute on the instance under test.
    """
    if builds is None:
        with dg.DagsterInstance.ephemeral() as builds:
            outcome = run_build(cfg, builds, **kwargs)
    else:
        outcome = run_build(cfg, builds, **kwargs)
    sync_partitions(instance, cfg)
    sync_vault_partitions(instance, cfg)
    return outcome


def touch(path, text):
    path.write_text(text)
    # A later mtime even on coarse clocks, so the stat pre-check sees the edit.
    stamp = time.time() + 2
    import os

    os.utime(path, (stamp, stamp))


def test_sensor_requests_only_what_changed(write_tree, make_config, make_instance):
    content = write_tree(TREE)
    cfg = make_config(content)
    sensor = build_change_sensor(cfg)
    with make_instance() as instance:
        assert build_index(cfg, instance).success

        # Fresh index, no cursor: the sensor starts from the manifest and requests nothing.
        result = evaluate(sensor, instance, None, cfg)
        assert not result.run_requests and "no change" in (result.skip_reason.skip_message or "")
        cursor = result.cursor

        # No change: still nothing.
        result = evaluate(sensor, instance, cursor, cfg)
        assert not result.run_requests

        # An edit in one collection: exactly one request, for that partition.
        touch(content / "posts" / "b.md", "# B\n\nbridges, bonds and vlans")
        result = evaluate(sensor, instance, cursor, cfg)
        [request] = result.run_requests
        assert request.partition_key == "posts" and request.job_name == "update_collection"
        assert request.run_key.startswith("posts:")
        cursor = result.cursor
        assert not evaluate(sensor, instance, cursor, cfg).run_requests  # the same content never runs twice

        # A deletion and a rename are changes of that collection.
        (content / "posts" / "a.md").unlink()
        result = evaluate(sensor, instance, cursor, cfg)
        assert [r.partition_key for r in result.run_requests] == ["posts"]
        cursor = result.cursor
        (content / "docs" / "c.md").rename(content / "docs" / "renamed.md")
        result = evaluate(sensor, instance, cursor, cfg)
        assert [r.partition_key for r in result.run_requests] == ["docs"]
        cursor = result.cursor

        # A new collection folder becomes a partition and is indexed.
        (content / "learn").mkdir()
        (content / "learn" / "x.md").write_text("# X\n\nnew notes")
        result = evaluate(sensor, instance, cursor, cfg)
        assert [r.partition_key for r in result.run_requests] == ["learn"]
        assert "learn" in instance.get_dynamic_partitions(COLLECTIONS_PARTITION)
        cursor = result.cursor

        # A removed folder loses its partition and triggers a republish without it.
        shutil.rmtree(content / "learn")
        result = evaluate(sensor, instance, cursor, cfg)
        [request] = result.run_requests
        assert request.job_name == "publish_index"
        assert "learn" not in instance.get_dynamic_partitions(COLLECTIONS_PARTITION)


def test_undoing_an_edit_runs_again(write_tree, make_config, make_instance):
    content = write_tree(TREE)
    cfg = make_config(content)
    sensor = build_change_sensor(cfg)
    with make_instance() as instance:
        sync_partitions(instance, cfg)
        cursor = evaluate(sensor, instance, None, cfg).cursor  # no index: every collection requested
        original = (content / "docs" / "c.md").read_text()
        touch(content / "docs" / "c.md", original + "\nmore")
        first = evaluate(sensor, instance, cursor, cfg)
        touch(content / "docs" / "c.md", original)
        second = evaluate(sensor, instance, first.cursor, cfg)
        assert [r.partition_key for r in second.run_requests] == ["docs"]
        assert second.run_requests[0].run_key != first.run_requests[0].run_key


def test_sensor_with_no_index_requests_every_collection_in_one_run(write_tree, make_config, make_instance):
    cfg = make_config(write_tree(TREE))
    with make_instance() as instance:
        result = evaluate(build_change_sensor(cfg), instance, None, cfg)
        [request] = result.run_requests
        assert request.job_name == "update_collection"
        assert partitions_of(request, instance, COLLECTIONS_PARTITION) == ["docs", "posts"]
        assert sorted(instance.get_dynamic_partitions(COLLECTIONS_PARTITION)) == ["docs", "posts"]


def test_several_changed_collections_are_one_run_that_indexes_each(write_tree, make_config, make_instance):
    tree = {**TREE, "learn/l.md": "# L\n\nlearning notes", "projects/p.md": "# P\n\na project"}
    content = write_tree(tree)
    cfg = make_config(content)
    sensor = build_change_sensor(cfg)
    with make_instance() as instance:
        assert build_index(cfg, instance).success
        cursor = evaluate(sensor, instance, None, cfg).cursor
        touch(content / "docs" / "c.md", "# C\n\nzfs datasets and snapshots")
        touch(content / "projects" / "p.md", "# P\n\na project, now finished")
        result = evaluate(sensor, instance, cursor, cfg)
        [request] = result.run_requests
        assert request.job_name == "update_collection" and request.tags["rag/build"] == "incremental"
        covered = partitions_of(request, instance, COLLECTIONS_PARTITION)
        # Both changed collections, and those between them in Dagster's order (re-checked, cheap).
        assert covered[0] == "docs" and covered[-1] == "projects"
        assert not evaluate(sensor, instance, result.cursor, cfg).run_requests  # the same content never runs twice

        job = build_definitions(cfg).resolve_job_def(request.job_name)
        run = job.execute_in_process(instance=instance, partition_key=request.partition_key, tags=request.tags)
        assert run.success
        materialised = {
            e.event_specific_data.materialization.partition
            for e in run.get_asset_materialization_events()
            if e.event_specific_data.materialization.asset_key.to_user_string() == "embeddings"
        }
        assert materialised == set(covered)


def test_nightly_schedule_requests_one_full_run_over_every_partition(write_tree, make_config, make_instance):
    cfg = make_config(write_tree(TREE))
    schedule = build_nightly_schedule(cfg)
    assert schedule.cron_schedule == "0 3 * * *" and schedule.execution_timezone == "UTC"
    with make_instance() as instance:
        sync_partitions(instance, cfg)
        when = datetime.datetime(2026, 12, 1, 3, 0, tzinfo=datetime.UTC)
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=when)
        [request] = schedule.evaluate_tick(context).run_requests
        assert partitions_of(request, instance, COLLECTIONS_PARTITION) == ["docs", "posts"]
    assert request.tags["rag/build"] == "full"
    assert request.run_key == "nightly:2026-12-01T03:00:00+00:00"


def test_sensor_run_requests_resolve_against_their_jobs(write_tree, make_config, make_instance):
    """Dagster itself validates the requests (job names the sensor targets), as the daemon does."""
    content = write_tree(TREE)
    cfg = make_config(content)
    with make_instance() as instance:
        assert build_index(cfg, instance).success
        shutil.rmtree(content / "docs")
        context = dg.build_sensor_context(instance=instance, cursor=None, definitions=build_definitions(cfg))
        data = build_change_sensor(cfg).evaluate_tick(context)
        assert [r.job_name for r in data.run_requests] == ["publish_index"]


VAULT_TREE = {
    **TREE,
    "vaults/notes/nas.md": "---\ntitle: NAS\n---\n# NAS\n\nThe NAS admin password: Tr0ub4dor-and-3 is rotated yearly.\n",
    "vaults/me/diary.md": "# Diary\n\nDentist on Tuesday; the spare key is under the blue pot.\n",
}


def vault_config(content, make_config, vaults=("notes:safe", "me:private")):
    from rag_assets.config import VaultConfig

    entries = tuple(VaultConfig(name, content / "vaults" / name, tier) for name, tier in (v.split(":") for v in vaults))
    return dataclasses.replace(make_config(content), vaults=entries)


def test_vault_sensor_syncs_partitions_reindexes_changes_and_purges_removed_vaults(
    write_tree, make_config, make_instance
):
    from rag_assets.defs.partitions import (
        PRIVATE_VAULTS_PARTITION,
        SAFE_VAULTS_PARTITION,
    )
    from rag_assets.defs.sensors import build_vault_sensor
    from rag_assets.index import store

    content = write_tree(VAULT_TREE)
    cfg = vault_config(content, make_config)

    def tick(config, cursor):
        context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=build_definitions(config))
        sensor = build_vault_sensor(config)
        data = sensor(context)
        # Every request names a job the sensor targets (what Dagster checks when it resolves them).
        assert {r.job_name for r in data.run_requests} <= {t.job_name for t in sensor.targets}
        for request in data.dynamic_partitions_requests or []:
            if isinstance(request, dg.AddDynamicPartitionsRequest):
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            else:
                for key in request.partition_keys:
                    instance.delete_dynamic_partition(request.partitions_def_name, key)
        return data

    def run(config, request):
        job = build_definitions(config).resolve_job_def(request.job_name)
        result = job.execute_in_process(instance=instance, partition_key=request.partition_key, tags=request.tags)
        assert result.success

    def requested(data) -> list[tuple[str, list[str]]]:
        partitions = {"update_safe_vaults": SAFE_VAULTS_PARTITION, "update_private_vaults": PRIVATE_VAULTS_PARTITION}
        return sorted((r.job_name, partitions_of(r, instance, partitions[r.job_name])) for r in data.run_requests)

    with make_instance() as instance:
        # Before any build: each tier's partitions appear (the private vault `me` is not a
        # partition of the Safe tier) and both tiers are requested, one run each.
        data = tick(cfg, None)
        assert list(instance.get_dynamic_partitions(SAFE_VAULTS_PARTITION)) == ["notes"]
        assert sorted(instance.get_dynamic_partitions(PRIVATE_VAULTS_PARTITION)) == ["me", "notes"]
        assert requested(data) == [("update_private_vaults", ["notes", "me"]), ("update_safe_vaults", ["notes"])]
        # Requested but not yet run: not requested again.
        assert not tick(cfg, data.cursor).run_requests
        for request in data.run_requests:
            run(cfg, request)
        data = tick(cfg, data.cursor)
        assert not data.run_requests

        # One edit in the safe vault: that vault only, in both tiers that hold it.
        touch(content / "vaults" / "notes" / "nas.md", "# NAS\n\nThe NAS now has a second pool for backups.\n")
        data = tick(cfg, data.cursor)
        assert requested(data) == [("update_private_vaults", ["notes"]), ("update_safe_vaults", ["notes"])]
        for request in data.run_requests:
            run(cfg, request)
        assert "second pool" in " ".join(t for (t,) in store_rows(cfg.safe_store_path, "SELECT text FROM chunks"))

        # The private vault leaves the config: its partition goes and a purge run is requested.
        without = vault_config(content, make_config, vaults=("notes:safe",))
        data = tick(without, data.cursor)
        assert list(instance.get_dynamic_partitions(PRIVATE_VAULTS_PARTITION)) == ["notes"]
        assert list(instance.get_dynamic_partitions(SAFE_VAULTS_PARTITION)) == ["notes"]
        assert [r.job_name for r in data.run_requests] == ["refresh_tier_stores"]
        run(without, data.run_requests[0])
        assert set(store.summarise(cfg.private_store_path).per_collection) == {"notes"}
        assert not tick(without, data.cursor).run_requests


def store_rows(path, sql):
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()
