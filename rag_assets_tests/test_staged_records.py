"""A step over a range of partitions stages each record on disk as it makes it (StagedRecords):
the step holds one partition's record at a time, the IO manager renames the files into place,
and what a killed or failed step staged is removed."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.defs.io_managers import AtomicPickleIOManager
from rag_assets.defs.ranges import for_each_partition
from rag_assets.defs.staged_records import STAGING, StagedRecords, StagingFolder, remove_abandoned
from rag_assets.index.record_facts import read_facts
from rag_assets.records import EmbeddedCollection

from .test_publishing import embedded_collections, write_corpus


class Record:
    """A stand-in for a partition's record, large enough to matter and watched by a weakref."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.skipped = [f"{key}/skipped.md"]
        self.payload = b"x" * 100_000


def run_range(asset: dg.AssetsDefinition, records_dir: Path, first: str, last: str):
    """One run of ``asset`` over the partitions ``first`` to ``last``, as `rag build` runs a
    range, with the project's IO manager (on an instance of its own)."""
    with dg.DagsterInstance.ephemeral() as instance:
        return dg.materialize(
            [asset],
            instance=instance,
            resources={"io_manager": AtomicPickleIOManager(base_dir=str(records_dir))},
            tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
            raise_on_error=False,
        )


def test_a_step_holds_one_record_at_a_time_and_keeps_only_what_it_asks_for(tmp_path: Path) -> None:
    partitions = dg.StaticPartitionsDefinition(["a", "b", "c"])
    alive: list[weakref.ref] = []
    seen_alive: list[int] = []

    @dg.asset(partitions_def=partitions, dagster_type=dg.Any)
    def records(context: dg.AssetExecutionContext):
        def work(key: str):
            gc.collect()
            seen_alive.append(sum(1 for ref in alive if ref() is not None))
            record = Record(key)
            alive.append(weakref.ref(record))
            return record, {}

        return for_each_partition(context, "collection", work, records_dir=tmp_path, keep=lambda r: r.skipped)

    result = run_range(records, tmp_path, "a", "c")
    assert result.success
    # No earlier partition's record was alive while the next one was made.
    assert seen_alive == [0, 0, 0]
    out = result.output_for_node("records")
    assert isinstance(out, StagedRecords)
    assert [out.kept(k) for k in out] == [["a/skipped.md"], ["b/skipped.md"], ["c/skipped.md"]]
    # In place where the IO manager keeps them, read back whole; nothing left staged.
    assert sorted(p.name for p in (tmp_path / "records").iterdir()) == ["a", "b", "c"]
    assert out["b"].payload == b"x" * 100_000


def test_a_failed_step_leaves_no_staged_file_and_no_record(tmp_path: Path) -> None:
    partitions = dg.StaticPartitionsDefinition(["a", "b"])

    @dg.asset(partitions_def=partitions, dagster_type=dg.Any)
    def records(context: dg.AssetExecutionContext):
        def work(key: str):
            if key == "b":
                raise ValueError("unreadable")
            return Record(key), {}

        return for_each_partition(context, "collection", work, records_dir=tmp_path)

    result = run_range(records, tmp_path, "a", "b")
    assert not result.success
    assert list((tmp_path / "records").iterdir()) == []


def test_an_embedded_record_gets_its_facts_when_it_is_put_in_place(tmp_path: Path, embedded_docs) -> None:
    col: EmbeddedCollection = embedded_docs
    staged = StagedRecords(tmp_path / "embeddings")
    staged.add("col0", col)
    target = tmp_path / "embeddings" / "col0"
    assert not target.exists()
    manager = AtomicPickleIOManager(base_dir=str(tmp_path))
    manager.commit_staged(staged, "col0", target)
    staged.discard()
    facts = read_facts(target)
    assert facts is not None and facts.content_hash == col.content_hash
    assert facts.facts.chunks == len(col.chunks)
    assert [c.id for c in staged["col0"].chunks] == [c.id for c in col.chunks]


def test_a_killed_steps_staging_folder_goes_and_a_live_ones_stays(tmp_path: Path) -> None:
    root = tmp_path / "embeddings" / STAGING
    # A step in another process stages a file and is killed with SIGKILL.
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from rag_assets.defs.staged_records import StagingFolder
        folder = StagingFolder(Path({str(root)!r}))
        (folder.path / ".docs.x.tmp").write_bytes(b"half a record")
        print(folder.path, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    killed_folder = Path(proc.stdout.readline().strip())
    live = StagingFolder(root)  # this step's, held while the other is still running
    assert killed_folder.is_dir()  # its owner lives: not taken for abandoned
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    remove_abandoned(root)
    assert not killed_folder.exists()
    assert live.path.is_dir()
    live.remove()
    assert not root.exists()


@pytest.fixture
def embedded_docs(tmp_path: Path) -> EmbeddedCollection:
    content = tmp_path / "content"
    write_corpus(content, collections=1, pages=3)
    return embedded_collections(content)[0]


def test_a_steps_input_is_unpickled_per_lookup_and_not_kept(tmp_path: Path) -> None:
    # The inputs of parse, chunk and embed (defs/content.py's one_at_a_time): LazyRecords with
    # nothing kept, also for records without chunks (a parse's, a snapshot's).
    from upath import UPath

    from rag_assets.defs.io_managers import LazyRecords

    manager = AtomicPickleIOManager(base_dir=str(tmp_path))
    path = UPath(tmp_path / "parsed" / "a")
    manager.dump_to_path(None, Record("a"), path)
    lazy = LazyRecords(manager, {"a": path}, keep_chunks=0)
    first = weakref.ref(lazy["a"])
    gc.collect()
    assert first() is None
    assert lazy["a"].skipped == ["a/skipped.md"]


def test_a_one_partition_steps_record_goes_to_the_next_read_once_while_its_file_is_unchanged(tmp_path: Path) -> None:
    from rag_assets.defs import record_handoff
    from rag_assets.defs.staged_records import load_pickle

    partitions = dg.StaticPartitionsDefinition(["a", "b"])
    made: list[Record] = []

    @dg.asset(partitions_def=partitions, dagster_type=dg.Any)
    def records(context: dg.AssetExecutionContext):
        def work(key: str):
            made.append(Record(key))
            return made[-1], {}

        return for_each_partition(context, "collection", work, records_dir=tmp_path)

    record_handoff.forget()
    assert run_range(records, tmp_path, "a", "a").success
    path = tmp_path / "records" / "a"
    assert load_pickle(path) is made[-1]  # the object itself, not unpickled
    again = load_pickle(path)
    assert again is not made[-1] and again.payload == made[-1].payload  # once only
    # The file replaced since (another build): read from disk.
    assert run_range(records, tmp_path, "a", "a").success
    os.utime(path, ns=(1, 1))
    assert load_pickle(path) is not made[-1]
    # A run of two partitions holds nothing for the next step.
    assert run_range(records, tmp_path, "a", "b").success
    assert all(load_pickle(tmp_path / "records" / key) is not made[-i] for i, key in ((1, "b"), (2, "a")))


def test_a_large_record_is_not_held_for_the_next_step(tmp_path: Path) -> None:
    from rag_assets.defs import record_handoff

    class Big:
        documents = [None] * (record_handoff.MAX_ITEMS + 1)

    path = tmp_path / "big"
    path.write_bytes(b"x")
    record_handoff.offer(path, Big())
    assert record_handoff.take(path) == (False, None)
    small = Record("s")
    record_handoff.offer(path, small)
    assert record_handoff.take(tmp_path / "other") == (False, None)
    assert record_handoff.take(path) == (True, small)
    assert record_handoff.take(path) == (False, None)


def test_an_edits_build_hands_the_edited_records_on_without_unpickling_them(write_tree, tmp_path, monkeypatch) -> None:
    from rag_assets.defs import staged_records
    from rag_assets.serve.cli import main

    pages = {f"docs/page-{i}.md": f"---\ntitle: Page {i}\n---\nPage {i} is about otters.\n" for i in range(4)}
    pages["posts/hello.md"] = "---\ntitle: Hello\n---\nA post about nothing.\n"
    content = write_tree(pages)
    out = tmp_path / "out"
    out.mkdir()
    config = out / "rag.yaml"
    config.write_text(f"content_dir: {content}\noutput_dir: {out}\nembedder: hashing\nvaults: []\n")
    assert main(["build", "--config", str(config)]) == 0
    (content / "docs" / "page-2.md").write_text("---\ntitle: Page 2\n---\nPage 2 is about zebras now.\n")
    unpickled: list[str] = []
    load = staged_records.pickle.load
    monkeypatch.setattr(
        staged_records.pickle,
        "load",
        lambda handle: unpickled.append("/".join(Path(handle.name).parts[-2:])) or load(handle),
    )
    assert main(["build", "--config", str(config)]) == 0  # the planner runs the docs partition alone
    # Each step's input from the step before, the publish's from the embed step: none read from disk.
    assert not unpickled, unpickled
    assert main(["search", "zebras", "--config", str(config), "--json"]) == 0
    assert main(["check", "--config", str(config)]) == 0
