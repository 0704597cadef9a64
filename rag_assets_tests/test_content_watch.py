"""The content watch (rag_assets/ingest/watch.py): after `rag build`'s planner walked the content,
the check after the publish tells by stat alone whether the content is still as walked, and
walks again whenever anything the walk read may have changed.

Real files, real `rag build` runs (in-process, as the CLI runs them). The files are written
and left alone for more than the racy margin before a watched walk, as an edit before a build
is; the racy case has its own test.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rag_assets.base.verified import RACY_MARGIN_NS
from rag_assets.config import RagConfig, load_config
from rag_assets.index.freshness import content_hash_if_unchanged, detect_changes
from rag_assets.serve.cli import main


def settle() -> None:
    """Wait past the racy margin, so what was just written may be watched."""
    time.sleep(RACY_MARGIN_NS / 1e9 * 1.5)


@pytest.fixture
def content(tmp_path: Path) -> Path:
    root = tmp_path / "content"
    for rel, text in {
        "docs/a.md": "# Alpha\n\nAbout apples and pears.\n",
        "docs/deep/b.md": "# Bravo\n\nAbout bananas.\n",
        "notes/c.md": "# Charlie\n\nAbout cherries.\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    # A broken link, skipped now, a file once its target exists: in a folder no walk lists (a
    # hidden one, two levels down), so only the skipped entry's own stat can tell.
    (root / ".store" / "sub").mkdir(parents=True)
    os.symlink(root / ".store" / "sub" / "later.md", root / "docs" / "later.md")
    return root


def config(tmp_path: Path, content: Path) -> RagConfig:
    return load_config(None, content_dir=content, output_dir=tmp_path / "out", embedder="hashing", environ={})


def watched(cfg: RagConfig) -> str:
    """A watched walk of ``cfg``'s content, after the files settled; its content hash."""
    settle()
    report = detect_changes(cfg, save_stat_cache=False, verify_outputs=False, watch=True)
    assert content_hash_if_unchanged(cfg) == report.current_hash, "a settled walk makes a watch"
    return report.current_hash


def same_size_edit(path: Path) -> None:
    """Bytes changed with the size and mtime put back: only the ctime tells."""
    before = path.stat()
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("apples", "grapes"), encoding="utf-8")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size


CHANGES: dict[str, Callable[[Path], None]] = {
    "edited, same size and mtime": lambda root: same_size_edit(root / "docs" / "a.md"),
    "added in a subfolder": lambda root: (root / "docs" / "deep" / "new.md").write_text("# New\n\nNew.\n"),
    "removed": lambda root: (root / "docs" / "deep" / "b.md").unlink(),
    "renamed": lambda root: (root / "notes" / "c.md").rename(root / "notes" / "d.md"),
    "new collection": lambda root: (root / "extra").mkdir() or (root / "extra" / "e.md").write_text("# E\n\nE.\n"),
    "broken link's target created": lambda root: (root / ".store" / "sub" / "later.md").write_text(
        "# Later\n\nLater.\n"
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_any_change_to_what_the_walk_read_sends_the_check_back_to_a_walk(tmp_path, content, change) -> None:
    cfg = config(tmp_path, content)
    before = watched(cfg)
    CHANGES[change](content)
    assert content_hash_if_unchanged(cfg) is None
    # And the walk it falls back to sees the change (the watch is not stricter than needed
    # for nothing: each of these changes the content hash).
    assert detect_changes(cfg, save_stat_cache=False, verify_outputs=False).current_hash != before


def test_a_hidden_file_is_not_content_but_only_costs_a_walk(tmp_path, content) -> None:
    cfg = config(tmp_path, content)
    before = watched(cfg)
    (content / "docs" / ".draft.md").write_text("# Hidden\n")
    assert content_hash_if_unchanged(cfg) is None
    assert detect_changes(cfg, save_stat_cache=False, verify_outputs=False).current_hash == before


def test_a_file_changed_within_the_racy_margin_is_read_again_before_it_is_watched(
    tmp_path, content, monkeypatch
) -> None:
    """A file written in the same clock tick after its stat could keep that stat: a walk that
    ends within the margin after a change to a file watches it only once the margin has passed
    and the file, with the walk's stat before and after, hashes as the walk hashed it."""
    from rag_assets.ingest import watch

    cfg = config(tmp_path, content)
    watched(cfg)
    reread: list[str] = []
    real = watch.sha256_file
    monkeypatch.setattr(watch, "sha256_file", lambda path, limit: reread.append(str(path)) or real(path, limit))
    edited = content / "notes" / "c.md"
    edited.write_text("# Charlie\n\nAbout currants.\n", encoding="utf-8")
    report = detect_changes(cfg, save_stat_cache=False, verify_outputs=False, watch=True)
    assert reread == [str(edited)]  # the racy file alone, read again
    assert content_hash_if_unchanged(cfg) == report.current_hash
    edited.write_text("# Charlie\n\nAbout cherries!\n", encoding="utf-8")
    assert content_hash_if_unchanged(cfg) is None


def test_nothing_is_watched_when_a_racy_file_reads_otherwise(tmp_path, content, monkeypatch) -> None:
    # As if its bytes had changed in the tick of the walk's stat, keeping that stat.
    from rag_assets.ingest import watch

    cfg = config(tmp_path, content)
    watched(cfg)  # an earlier watch, which the racy walk must not leave in place either
    monkeypatch.setattr(watch, "sha256_file", lambda path, limit: "0" * 64)
    (content / "notes" / "c.md").write_text("# Charlie\n\nAbout currants.\n", encoding="utf-8")
    detect_changes(cfg, save_stat_cache=False, verify_outputs=False, watch=True)
    assert content_hash_if_unchanged(cfg) is None


def test_nothing_is_watched_when_a_folder_changed_within_the_racy_margin(tmp_path, content) -> None:
    cfg = config(tmp_path, content)
    watched(cfg)
    (content / "notes" / "new.md").write_text("# New\n\nJust added.\n", encoding="utf-8")
    detect_changes(cfg, save_stat_cache=False, verify_outputs=False, watch=True)
    assert content_hash_if_unchanged(cfg) is None


def test_a_watch_answers_only_for_its_own_config(tmp_path, content) -> None:
    cfg = config(tmp_path, content)
    watched(cfg)
    other = load_config(None, content_dir=content, output_dir=tmp_path / "other", embedder="hashing", environ={})
    assert content_hash_if_unchanged(other) is None


# --- in `rag build` ------------------------------------------------------------------------------


def rag_build(tmp_path: Path, content: Path, capsys, *more: str) -> str:
    settle()
    args = ["build", "--content-dir", str(content), "--output-dir", str(tmp_path / "out"), "--embedder", "hashing"]
    assert main([*args, *more]) == 0
    return capsys.readouterr().err


@pytest.fixture
def walks_in_the_check(monkeypatch) -> list[int]:
    """How often the check after the publish walked the content (its fallback)."""
    calls: list[int] = []
    from rag_assets.index import freshness

    def counted(*args, **kwargs):
        calls.append(1)
        return detect_changes(*args, **kwargs)

    # The check's comparison (freshness.published_matches_content) walks through this name.
    monkeypatch.setattr(freshness, "detect_changes", counted)
    return calls


def test_a_build_checks_the_content_by_stat_after_its_publish(tmp_path, content, capsys, walks_in_the_check) -> None:
    assert "index_matches_content" not in rag_build(tmp_path, content, capsys)
    (content / "docs" / "a.md").write_text("# Alpha\n\nAbout apricots now.\n", encoding="utf-8")
    assert "index_matches_content" not in rag_build(tmp_path, content, capsys)
    assert walks_in_the_check == [], "the check walked again although nothing changed since the planner's walk"


def test_content_changed_during_a_build_is_still_reported(
    tmp_path, content, capsys, monkeypatch, walks_in_the_check
) -> None:
    """An edit made after the planner's walk and before the check (here: right after the
    publish) is what the check is for: it warns, from the walk it falls back to."""
    rag_build(tmp_path, content, capsys)
    from rag_assets.defs import publish

    real = publish.publish_all

    def publish_then_edit(*args, **kwargs):
        published = real(*args, **kwargs)
        (content / "notes" / "c.md").write_text("# Charlie\n\nAbout cranberries.\n", encoding="utf-8")
        return published

    monkeypatch.setattr(publish, "publish_all", publish_then_edit)
    (content / "docs" / "a.md").write_text("# Alpha\n\nAbout apricots now.\n", encoding="utf-8")
    err = rag_build(tmp_path, content, capsys)
    assert "warning: index_matches_content" in err, err
    assert walks_in_the_check == [1]


def test_a_build_of_one_collection_still_warns_that_another_changed(
    tmp_path, content, capsys, walks_in_the_check
) -> None:
    """The watch says the content is as walked, not that it is what was published: a build of
    `docs` alone leaves the edit of `notes` unpublished, and the check says so."""
    rag_build(tmp_path, content, capsys)
    (content / "notes" / "c.md").write_text("# Charlie\n\nAbout cranberries.\n", encoding="utf-8")
    (content / "docs" / "a.md").write_text("# Alpha\n\nAbout apricots now.\n", encoding="utf-8")
    err = rag_build(tmp_path, content, capsys, "--collection", "docs")
    assert "warning: index_matches_content" in err, err
