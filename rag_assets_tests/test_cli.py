"""The `rag` command, run as a user would: real files, real Dagster runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import dagster as dg

from rag_assets.serve.cli import main

from .conftest import PROXMOX_POST, REPO_ROOT, SAMPLE_CONTENT


def test_build_prints_progress_and_summary_then_status_reads_it(capsys, tmp_path):
    out = tmp_path / "out"
    started = time.time()
    assert main(["build", "--content-dir", str(SAMPLE_CONTENT), "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    for line in (
        "[posts] 8 documents",
        "[journal]",
        "Built in",
        "Model       rag-assets/feature-hash-v1 (384 dimensions, provider hashing)",
    ):
        assert line in printed
    assert (out / "public" / "embeddings-index.json").is_file()

    assert main(["status", "--json", "--output-dir", str(out)]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["totalDocuments"] == 30 and status["dimension"] == 384
    assert set(status["collections"]) == {"docs", "journal", "learn", "posts", "projects"}
    assert 0 <= status["ageSeconds"] <= time.time() - started + 1  # built by this test (1 s: rounding)


def test_build_one_collection_keeps_the_others(capsys, write_tree, tmp_path):
    content = write_tree({"posts/a.md": PROXMOX_POST, "docs/b.md": "# B\n\nSome documentation text."})
    args = ["--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    assert main(["build", *args]) == 0
    (content / "posts" / "c.md").write_text("# C\n\nA new post about zfs.")
    assert main(["build", "--collection", "posts", *args]) == 0
    assert "Building 1 collection(s)" in capsys.readouterr().out
    main(["status", "--json", *args])
    status = json.loads(capsys.readouterr().out)
    assert status["collections"] == {"docs": {"chunks": 1, "documents": 1}, "posts": {"chunks": 2, "documents": 2}}


def test_skipped_files_are_listed_with_reasons(capsys, write_tree, tmp_path):
    content = write_tree({"posts/a.md": PROXMOX_POST, "posts/bad.md": "---\ntitle: [x\n---\n", "loose.md": "# Loose"})
    assert main(["build", "--content-dir", str(content), "--output-dir", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "Skipped 1 file(s):" in printed and "posts/bad.md: invalid YAML frontmatter" in printed
    assert "loose.md is directly in the content folder" in printed


def test_user_errors_exit_2_with_a_message_and_no_traceback(capsys, write_tree, tmp_path):
    content = write_tree({"posts/a.md": PROXMOX_POST})
    out = ["--output-dir", str(tmp_path / "out")]
    assert main(["build", "--content-dir", str(tmp_path / "missing"), *out]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["build", "--content-dir", str(content), "--collection", "nope", *out]) == 2
    assert "unknown collection(s) nope; known: posts" in capsys.readouterr().err
    assert main(["build", "--content-dir", str(content), "--embedder", "word2vec", *out]) == 2
    assert (
        "--embedder: embedder.name must be 'auto', " in (err := capsys.readouterr().err) and "(got 'word2vec')" in err
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("chunking: {min_words: 900}")
    assert main(["build", "--config", str(bad)]) == 2
    assert "configuration error" in capsys.readouterr().err
    assert main(["status", *out]) == 1
    assert "run `rag build`" in capsys.readouterr().out


def test_help_explains_the_commands():
    proc = subprocess.run(
        [sys.executable, "-m", "rag_assets.serve.cli", "build", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    for flag in ("--collection", "--embedder", "--config", "--content-dir", "--output-dir"):
        assert flag in proc.stdout


def test_cli_runs_are_kept_in_the_project_dagster_home(tmp_path, write_tree, monkeypatch):
    """With DAGSTER_HOME set (as the README says), runs persist across processes.

    The first build is a `rag` process of its own; the second (--force, so it launches a run too)
    runs in this one, through the same main(), and needs no second start of Python, Dagster and
    the project (~3 CPU s): both runs must be in the home, where this process reads them."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    content = write_tree({"posts/a.md": PROXMOX_POST, "docs/b.md": "# B\n\ntext"})
    args = ["build", "--content-dir", str(content), "--output-dir", str(tmp_path / "o")]
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "rag_assets.serve.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    assert main([*args, "--force"]) == 0
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs()
        # One run per build: both collections and publishing (no vaults here, so no tier runs).
        assert len(runs) == 2
        assert {r.job_name for r in runs} == {"update_collection"}


def test_dry_run_reports_the_plan_and_writes_nothing(capsys, write_tree, tmp_path):
    content = write_tree({"posts/a.md": PROXMOX_POST, "docs/b.md": "# B\n\nSome documentation text."})
    args = ["--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    assert main(["build", *args]) == 0
    (content / "docs" / "b.md").write_text("# B\n\nSome documentation text, now about vlans.")
    data = tmp_path / "out" / "data"
    # SQLite's own -wal/-shm files come and go with connections (a read-only integrity check
    # included); the files that hold data must not change.
    before = {
        p: p.stat().st_mtime_ns
        for p in [*data.iterdir(), *(tmp_path / "out" / "public").iterdir()]
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }
    capsys.readouterr()
    assert main(["build", "--dry-run", *args]) == 0
    printed = capsys.readouterr().out
    assert "[docs] 1 changed: 0 added, 1 changed, 0 removed; 1 to parse, 1 of 1 chunks to embed" in printed
    assert "[posts] unchanged" in printed and "0 to parse" in printed
    after = {p: p.stat().st_mtime_ns for p in before}
    assert after == before


def test_a_site_with_note_vaults_and_no_public_collection_builds_its_tier_stores(tmp_path, capsys):
    """Only content/vaults/: nothing to publish publicly, and that must not fail the build."""
    vault = tmp_path / "content" / "vaults" / "v"
    vault.mkdir(parents=True)
    (vault / "n.md").write_text("# Note\n\nBack up the NAS nightly with restic to the offsite bucket.\n")
    config = tmp_path / "rag.yaml"
    config.write_text(
        "content_dir: content\noutput_dir: out\nidentity_map: null\nvaults:\n  - {name: v, path: content/vaults/v, tier: private}\n"
    )
    args = ["--config", str(config), "--embedder", "hashing"]
    assert main(["build", *args]) == 0
    assert main(["build", *args]) == 0
    assert "No public collections; the Safe and Private stores are up to date" in capsys.readouterr().out
    # One note: nothing for relevance to compare with, so no floor; the search itself is checked.
    assert main(["search", "restic backup", "--tier", "private", "--min-score", "0", "--config", str(config)]) == 0
    assert "v/n" in capsys.readouterr().out
