"""The change sensor and the nightly schedule, evaluated against a real Dagster instance."""

from __future__ import annotations

import datetime
import shutil
import time

import dagster as dg

from rag_assets.definitions import build_definitions
from rag_assets.defs.partitions import COLLECTIONS_PARTITION, sync_partitions
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


def touch(path, text):
    path.write_text(text)
    # A later mtime even on coarse clocks, so the stat pre-check sees the edit.
    stamp = time.time() + 2
    import os

    os.utime(path, (stamp, stamp))


def test_sensor_requests_only_what_changed(write_tree, make_config):
    content = write_tree(TREE)
    cfg = make_config(content)
    sensor = build_change_sensor(cfg)
    with dg.instance_for_test() as instance:
        assert run_build(cfg, instance).success

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
        assert request.partition_key == "posts" and request.job_name is None  # the sensor's job: update_collection
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


def test_undoing_an_edit_runs_again(write_tree, make_config):
    content = write_tree(TREE)
    cfg = make_config(content)
    sensor = build_change_sensor(cfg)
    with dg.instance_for_test() as instance:
        sync_partitions(instance, cfg)
        cursor = evaluate(sensor, instance, None, cfg).cursor  # no index: every collection requested
        original = (content / "docs" / "c.md").read_text()
        touch(content / "docs" / "c.md", original + "\nmore")
        first = evaluate(sensor, instance, cursor, cfg)
        touch(content / "docs" / "c.md", original)
        second = evaluate(sensor, instance, first.cursor, cfg)
        assert [r.partition_key for r in second.run_requests] == ["docs"]
        assert second.run_requests[0].run_key != first.run_requests[0].run_key


def test_sensor_with_no_index_requests_every_collection(write_tree, make_config):
    cfg = make_config(write_tree(TREE))
    with dg.instance_for_test() as instance:
        result = evaluate(build_change_sensor(cfg), instance, None, cfg)
        assert sorted(r.partition_key for r in result.run_requests) == ["docs", "posts"]
        assert sorted(instance.get_dynamic_partitions(COLLECTIONS_PARTITION)) == ["docs", "posts"]


def test_nightly_schedule_requests_every_partition_as_a_full_build(write_tree, make_config):
    cfg = make_config(write_tree(TREE))
    schedule = build_nightly_schedule(cfg)
    assert schedule.cron_schedule == "0 3 * * *" and schedule.execution_timezone == "UTC"
    with dg.instance_for_test() as instance:
        sync_partitions(instance, cfg)
        when = datetime.datetime(2026, 12, 1, 3, 0, tzinfo=datetime.timezone.utc)
        context = dg.build_schedule_context(instance=instance, scheduled_execution_time=when)
        requests = list(schedule(context))
    assert sorted(r.partition_key for r in requests) == ["docs", "posts"]
    assert all(r.tags["rag/build"] == "full" for r in requests)
    assert requests[0].run_key == "nightly:2026-12-01T03:00:00+00:00:docs"
