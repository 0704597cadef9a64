"""`rag watch`'s change journal: change detection that walks only the collections it names
finds exactly what a walk of everything finds, and walks everything when it cannot be sure.

Each test runs the real `rag watch` in a subprocess (its own inotify queue, as in use) and
compares :func:`detect_changes` with the journal against the same call walking everything.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rag_assets.config import RagConfig
from rag_assets.index.freshness import ChangeReport, content_hash_if_unchanged, detect_changes
from rag_assets.ingest.change_journal import JournalFiles, watcher_alive

REPO_ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")

COLLECTIONS = ("alpha", "beta", "gamma")


def page(title: str, body: str = "Some words about the topic.") -> str:
    return f"---\ntitle: {title}\n---\n\n# {title}\n\n{body}\n"


class Watcher:
    """`rag watch` for one content and output folder, in its own process group."""

    def __init__(self, cfg: RagConfig) -> None:
        self.cfg = cfg
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "DAGSTER_"))}
        env["PYTHONPATH"] = str(REPO_ROOT)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rag_assets.serve.cli",
                "watch",
                "--content-dir",
                str(cfg.content_dir),
                "--output-dir",
                str(cfg.output_dir),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        self.banner = self.proc.stdout.readline()  # printed once every folder is watched
        assert self.banner.startswith("Watching "), self.banner + self.proc.stderr.read()  # type: ignore[union-attr]

    def signal(self, signum: int) -> None:
        os.killpg(self.proc.pid, signum)

    def stop(self) -> tuple[int, str, str]:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, out, err


@pytest.fixture
def content(write_tree: Callable[[dict[str, str]], Path]) -> Path:
    files = {f"{c}/topic-{i}.md": page(f"{c} {i}") for c in COLLECTIONS for i in range(3)}
    files.update({f"{c}/deep/er/note.md": page(f"{c} deep") for c in COLLECTIONS})
    return write_tree(files)


@pytest.fixture
def cfg(content: Path, make_config: Callable[..., RagConfig]) -> RagConfig:
    return make_config(content)


@pytest.fixture
def watcher(cfg: RagConfig) -> Iterator[Watcher]:
    running = Watcher(cfg)
    yield running
    running.stop()


def facts(report: ChangeReport) -> list[tuple]:
    """What a build plans from: each collection's status, hash, files and their changes."""
    return [
        (c.collection, c.status, c.content_hash, sorted(c.files.items()), c.added, c.changed, c.removed)
        for c in report.collections
    ]


def same_as_a_walk(cfg: RagConfig) -> ChangeReport:
    """Detect with the journal, check it against a walk of everything, return the journal's."""
    with_journal = detect_changes(cfg, save_stat_cache=False, verify_outputs=False)
    walked = detect_changes(cfg, save_stat_cache=False, verify_outputs=False, journal=False)
    assert walked.walked is None
    assert facts(with_journal) == facts(walked)
    assert with_journal.current_hash == walked.current_hash
    return with_journal


def test_each_kind_of_change_is_found_by_walking_only_the_collections_it_touched(
    cfg: RagConfig, content: Path, watcher: Watcher
) -> None:
    # The first look with a new watcher walks everything (nothing is known of its journal yet).
    assert same_as_a_walk(cfg).walked == list(COLLECTIONS)
    assert same_as_a_walk(cfg).walked == []  # nothing happened since

    (content / "alpha/topic-0.md").write_text(page("alpha 0", "An edited paragraph."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["alpha"]

    new = content / "beta/new/folder/deeper"
    new.mkdir(parents=True)
    (new / "fresh.md").write_text(page("fresh"), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["beta"]
    # A file in a folder made since: the new folders are watched too.
    (new / "fresh.md").write_text(page("fresh", "Changed inside the new folder."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["beta"]

    (content / "gamma/topic-1.md").unlink()
    assert same_as_a_walk(cfg).walked == ["gamma"]

    # A folder moved from one collection to another: both are walked, and an edit in it later
    # is seen under its new collection.
    (content / "alpha/deep").rename(content / "gamma/deep-from-alpha")
    assert same_as_a_walk(cfg).walked == ["alpha", "gamma"]
    (content / "gamma/deep-from-alpha/er/note.md").write_text(page("moved", "Edited after the move."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["gamma"]

    # A hidden folder renamed into view is a new folder: watched from then on.
    hidden = content / "beta/.drafts"
    hidden.mkdir()
    (hidden / "draft.md").write_text(page("draft"), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["beta"]
    hidden.rename(content / "beta/drafts")
    assert same_as_a_walk(cfg).walked == ["beta"]
    (content / "beta/drafts/draft.md").write_text(page("draft", "Now in view and edited."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["beta"]

    # A new collection and a removed one.
    (content / "delta").mkdir()
    (content / "delta/one.md").write_text(page("delta"), encoding="utf-8")
    shutil.rmtree(content / "beta")
    assert same_as_a_walk(cfg).walked == ["delta"]
    assert same_as_a_walk(cfg).walked == []


def test_an_edit_made_just_before_detection_is_never_missed(cfg: RagConfig, content: Path, watcher: Watcher) -> None:
    """The cookie round trip: the watcher's events of an edit made a moment ago are in the
    journal before a reader trusts it (without the round trip this fails most rounds)."""
    same_as_a_walk(cfg)
    target = content / "beta/topic-2.md"
    for round_ in range(25):
        target.write_text(page("beta 2", f"Round {round_} of edits."), encoding="utf-8")
        report = detect_changes(cfg, save_stat_cache=False, verify_outputs=False)
        assert report.walked == ["beta"], round_
        assert next(c for c in report.collections if c.collection == "beta").files["beta/topic-2.md"] == (
            hashlib.sha256(target.read_bytes()).hexdigest()
        )


def test_a_collection_with_a_symlink_is_always_walked(cfg: RagConfig, content: Path, watcher: Watcher) -> None:
    """An edit at a link's target is no event under the collection that links to it."""
    (content / "gamma/linked.md").symlink_to(content / "alpha/topic-1.md")
    same_as_a_walk(cfg)
    assert same_as_a_walk(cfg).walked == ["gamma"]
    (content / "alpha/topic-1.md").write_text(page("alpha 1", "Edited through its other name."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["alpha", "gamma"]


def test_lost_events_a_stopped_or_killed_watcher_and_a_new_one_mean_walking_everything(
    cfg: RagConfig, content: Path
) -> None:
    first = Watcher(cfg)
    same_as_a_walk(cfg)
    assert same_as_a_walk(cfg).walked == []
    # Lost events: the watcher stopped while more events happen than the kernel queues for it.
    first.signal(signal.SIGSTOP)
    queue = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    target = content / "alpha/topic-2.md"
    for _ in range(queue // 2 + 100):  # two events per write (modify, close)
        with open(target, "a", encoding="utf-8") as handle:
            handle.write("x")
    first.signal(signal.SIGCONT)
    assert same_as_a_walk(cfg).walked == list(COLLECTIONS)
    assert b"\n*\n" in JournalFiles(cfg.watch_dir).journal.read_bytes()
    assert same_as_a_walk(cfg).walked == []

    # Killed: its lock is gone, so nothing is trusted and everything is walked.
    first.signal(signal.SIGKILL)
    first.proc.wait(timeout=30)
    assert not watcher_alive(JournalFiles(cfg.watch_dir))
    (content / "beta/topic-0.md").write_text(page("beta 0", "Edited with no watcher."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked is None

    # A new watcher's journal: the first look walks everything again.
    second = Watcher(cfg)
    try:
        assert same_as_a_walk(cfg).walked == list(COLLECTIONS)
        assert same_as_a_walk(cfg).walked == []
        # One per output folder.
        third = subprocess.run(
            [sys.executable, "-m", "rag_assets.serve.cli", "watch", "--content-dir", str(cfg.content_dir)]
            + ["--output-dir", str(cfg.output_dir)],
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert third.returncode == 1
        assert "another `rag watch` already keeps" in third.stderr
    finally:
        code, out, _ = second.stop()
    assert code == 0 and "Stopped after" in out
    assert same_as_a_walk(cfg).walked is None


def test_the_check_after_a_publish_asks_the_journal_instead_of_statting_every_path(
    cfg: RagConfig, content: Path, watcher: Watcher
) -> None:
    report = detect_changes(cfg, save_stat_cache=False, verify_outputs=False, watch=True)
    assert content_hash_if_unchanged(cfg) == report.current_hash
    (content / "gamma/topic-0.md").write_text(page("gamma 0", "Edited after the walk."), encoding="utf-8")
    assert content_hash_if_unchanged(cfg) is None


def test_rag_build_and_rag_check_walk_only_what_the_journal_names(
    cfg: RagConfig, content: Path, watcher: Watcher, capsys: pytest.CaptureFixture[str]
) -> None:
    from rag_assets.serve import cli

    where = ["--content-dir", str(cfg.content_dir), "--output-dir", str(cfg.output_dir)]
    assert cli.main(["build", *where]) == 0
    assert "walked 3 of 3 collection(s)" in capsys.readouterr().out  # a new watcher: everything
    (content / "beta/topic-1.md").write_text(page("beta 1", "The zeppelin hangar opened today."), encoding="utf-8")
    assert cli.main(["build", *where]) == 0
    out = capsys.readouterr().out
    assert "rag watch's journal: walked 1 of 3 collection(s): beta" in out
    assert "[beta] 1 changed" in out
    assert cli.main(["search", "zeppelin hangar", "--json", *where]) == 0
    assert "beta/topic-1/chunk-0" in capsys.readouterr().out
    assert cli.main(["check", *where]) == 0
    out = capsys.readouterr().out
    assert "walked 0 of 3 collection(s)" in out and "Fresh" in out
    assert cli.main(["check", "--deep", *where]) == 0
    assert "rag watch's journal" not in capsys.readouterr().out  # --deep walks everything
    assert cli.main(["status", *where]) == 0
    assert "Watch       rag watch is running" in capsys.readouterr().out
    assert cli.main(["status", "--json", *where]) == 0
    assert json.loads(capsys.readouterr().out)["watch"]["running"] is True
    watcher.stop()
    assert cli.main(["status", "--json", *where]) == 0
    assert json.loads(capsys.readouterr().out)["watch"] == {
        "running": False,
        "journal": str(JournalFiles(cfg.watch_dir).journal),
    }


def test_a_hard_link_makes_every_look_walk_everything_until_it_is_gone(
    cfg: RagConfig, content: Path, watcher: Watcher
) -> None:
    """An edit through one name of a file is an event in that name's folder only: the other
    collection holding the file would be taken as unchanged."""
    same_as_a_walk(cfg)
    os.link(content / "alpha/topic-0.md", content / "beta/shared.md")  # an event in beta only
    assert same_as_a_walk(cfg).walked == list(COLLECTIONS)
    with open(content / "beta/shared.md", "a", encoding="utf-8") as handle:
        handle.write("\nEdited through the second name.\n")  # alpha's file changes, no event under alpha
    assert same_as_a_walk(cfg).walked == list(COLLECTIONS)
    (content / "beta/shared.md").unlink()
    # The event's collection, and alpha, recorded as linked at its last walk; none has a
    # second name now, so after this look the journal vouches for them again.
    assert same_as_a_walk(cfg).walked == ["alpha", "beta"]
    assert same_as_a_walk(cfg).walked == []


def test_a_content_folder_replaced_under_its_path_is_walked_and_the_watcher_stops(
    tmp_path: Path, write_tree: Callable[[dict[str, str]], Path], make_config: Callable[..., RagConfig]
) -> None:
    """The watcher follows the folder it started on; a copy put in its place (a re-clone, a
    re-extract, `mv site site.old && cp -a site.old site`, even done to a parent folder) is
    another folder with no watch on it."""
    site = tmp_path / "site"
    (site / "content/alpha").mkdir(parents=True)
    (site / "content/alpha/one.md").write_text(page("one"), encoding="utf-8")
    cfg = make_config(site / "content")
    running = Watcher(cfg)
    same_as_a_walk(cfg)
    assert same_as_a_walk(cfg).walked == []
    site.rename(tmp_path / "site.old")  # the parent: no event reaches the watcher
    shutil.copytree(tmp_path / "site.old", site, symlinks=True)
    (site / "content/alpha/one.md").write_text(page("one", "Edited in the copy."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked is None
    running.stop()

    running = Watcher(cfg)
    assert same_as_a_walk(cfg).walked == ["alpha"]
    shutil.rmtree(site / "content")
    running.proc.wait(timeout=60)  # it stops by itself
    code, _, err = running.stop()
    assert code == 1
    assert "was moved or deleted; start `rag watch` again" in err


def test_a_journal_cut_back_or_a_cookies_folder_removed_never_hides_a_change(
    cfg: RagConfig, content: Path, watcher: Watcher
) -> None:
    files = JournalFiles(cfg.watch_dir)
    same_as_a_walk(cfg)
    assert same_as_a_walk(cfg).walked == []
    # Cut back to its header (as logrotate's copytruncate would): the saved point is gone.
    header = files.journal.read_bytes().split(b"\n", 1)[0] + b"\n"
    os.truncate(files.journal, len(header))
    (content / "alpha/topic-0.md").write_text(page("alpha 0", "Edited after the cut."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == list(COLLECTIONS)
    assert same_as_a_walk(cfg).walked == []
    # The cookies folder removed: the watcher makes it again and readers wait for it (the
    # watcher is stopped for a moment so that the reader surely finds no folder first).
    watcher.signal(signal.SIGSTOP)
    shutil.rmtree(files.cookies)
    (content / "beta/topic-0.md").write_text(page("beta 0", "Edited while cookies were gone."), encoding="utf-8")
    resume = threading.Timer(0.3, watcher.signal, (signal.SIGCONT,))
    resume.start()
    try:
        assert same_as_a_walk(cfg).walked == ["beta"]
    finally:
        resume.join()
    (content / "gamma/topic-0.md").write_text(page("gamma 0", "Edited after."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["gamma"]


def test_a_cookies_folder_moved_away_or_removed_over_and_over_is_made_again(
    cfg: RagConfig, content: Path, watcher: Watcher, tmp_path: Path
) -> None:
    files = JournalFiles(cfg.watch_dir)
    same_as_a_walk(cfg)
    # Moved away (its watch follows it, with no IGNORED event): made again where readers look.
    files.cookies.rename(tmp_path / "cookies-moved")
    (content / "alpha/topic-1.md").write_text(page("alpha 1", "Edited after the move."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["alpha"]
    # Removed as fast as a shell loop can, while the watcher makes it again: it never stops.
    until = time.monotonic() + 3
    while time.monotonic() < until:
        shutil.rmtree(files.cookies, ignore_errors=True)
    assert watcher.proc.poll() is None, watcher.stop()
    (content / "beta/topic-1.md").write_text(page("beta 1", "Edited after the loop."), encoding="utf-8")
    assert same_as_a_walk(cfg).walked == ["beta"]


def test_a_line_the_watcher_did_not_write_means_walking_everything_once(
    cfg: RagConfig, content: Path, watcher: Watcher
) -> None:
    same_as_a_walk(cfg)
    with open(JournalFiles(cfg.watch_dir).journal, "ab") as journal:
        journal.write(b'"unterminated\n')  # appended by hand: what it meant is unknown
    assert same_as_a_walk(cfg).walked == list(COLLECTIONS)
    assert same_as_a_walk(cfg).walked == []  # read past it


def test_the_change_sensor_walks_only_the_collection_the_journal_names(
    cfg: RagConfig, content: Path, watcher: Watcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dagster as dg

    from rag_assets.defs.assembly import build_definitions
    from rag_assets.defs.partitions import sync_partitions
    from rag_assets.defs.runner import run_build
    from rag_assets.defs.sensors import build_change_sensor
    from rag_assets.index import collection_snapshots

    walked: list[str] = []
    real = collection_snapshots.walk_collection

    def spy(config, name, *rest):
        walked.append(name)
        return real(config, name, *rest)

    monkeypatch.setattr(collection_snapshots, "walk_collection", spy)
    sensor = build_change_sensor(cfg)
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance).success
        sync_partitions(instance, cfg)
        tick = sensor(dg.build_sensor_context(instance=instance, cursor=None, definitions=build_definitions(cfg)))
        assert not tick.run_requests
        walked.clear()
        (content / "gamma/topic-2.md").write_text(page("gamma 2", "Edited for the sensor."), encoding="utf-8")
        tick = sensor(
            dg.build_sensor_context(instance=instance, cursor=tick.cursor, definitions=build_definitions(cfg))
        )
        assert [r.partition_key for r in tick.run_requests] == ["gamma"]
        assert walked == ["gamma"]  # the other collections' snapshots as the journal vouched for them
