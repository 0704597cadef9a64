"""Hostile content: symlinks out of the content folder, YAML bombs, FIFOs, undecodable names.

Most cases share one real `rag build` (a subprocess, as a user runs it) over a content
folder holding all of them at once, since one bad file must never stop the others: each
bad entry must be listed as skipped with its reason, the good files must be published,
and nothing from outside the content folder (or from a vault) may reach a public output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from rag_assets.config import load_config
from rag_assets.index.index_json import read_index
from rag_assets.ingest import parsing
from rag_assets.ingest.collections import discover_collections
from rag_assets.ingest.parsing import parse_collection, parse_markdown_file
from rag_assets.ingest.sources import combine_hashes, snapshot_collection
from rag_assets.ingest.walker import WalkPolicy, list_folder, too_large_reason
from rag_assets.serve.cli import main

from .conftest import REPO_ROOT
from .deadline import deadline

OUTSIDE_MARKER = "OUTSIDESECRETMARKER"
PRIVATE_MARKER = "PRIVATEVAULTMARKER"
BAD_NAME = os.fsdecode(b"bad\xff.md")
MAX_FILE_BYTES = 10_000
ONE_GB = 1 << 30
HANG_SECONDS = 120  # only against a hang: what a test proves is in its other assertions


def billion_laughs(levels: int = 9) -> str:
    """About 450 bytes of frontmatter whose aliases expand to 9**levels values."""
    lines = ["---", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join([*lines, "title: laughs", "---", "body text"]) + "\n"


def make_hostile_tree(base: Path) -> Path:
    """content/ with good files next to every kind of hostile entry; returns the rag.yaml."""
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(f"# Secret\n\n{OUTSIDE_MARKER} zebra\n")
    content = base / "content"
    for folder in ("docs/folder.md", "posts", "vaults/notes", "vaults/personal"):
        (content / folder).mkdir(parents=True)
    docs = content / "docs"
    (docs / "good.md").write_text("# Good\n\nA good document about vlans and bridges.\n")
    (docs / "folder.md" / "inside.md").write_text("# Inside\n\nA page inside a folder named like Markdown.\n")
    (content / "posts" / "p.md").write_text("# Post\n\nA post about zfs snapshots.\n")
    os.symlink(outside / "secret.md", docs / "passwd.md")
    os.symlink(outside, docs / "outdir")
    os.symlink("../posts/p.md", docs / "inside-link.md")  # inside the content folder: fine
    os.symlink("../vaults/personal/private.md", docs / "vault-link.md")
    os.symlink(".", docs / "loop")
    os.symlink("selfloop.md", docs / "selfloop.md")
    os.symlink(outside, content / "escape")  # a whole collection folder outside
    (docs / BAD_NAME).write_text("# Bad name\n\nA file whose name is not UTF-8.\n")
    (docs / "laughs.md").write_text(billion_laughs())
    (docs / "big.md").write_text("# Big\n\n" + "word " * (MAX_FILE_BYTES // 4))
    os.mkfifo(docs / "fifo.md")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(docs / "sock.md"))
    sock.close()  # the socket file stays
    (content / "vaults/personal/private.md").write_text(f"# Private\n\n{PRIVATE_MARKER} llama\n")
    (content / "vaults/notes/n.md").write_text("# Note\n\nA safe note about routers.\n")
    os.symlink("../personal/private.md", content / "vaults/notes/leak.md")  # Safe -> Private
    os.symlink(outside / "secret.md", content / "vaults/notes/out.md")
    config = base / "rag.yaml"
    config.write_text(
        f"""content_dir: content
output_dir: out
collections: [docs, posts, escape, "../outside", vaults]
max_file_bytes: {MAX_FILE_BYTES}
identity_map: null
vaults:
  - {{name: notes, path: content/vaults/notes, tier: safe}}
  - {{name: personal, path: content/vaults/personal, tier: private}}
"""
    )
    return config


@dataclasses.dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    max_rss_bytes: int
    seconds: float


# Linux carries a process's peak RSS across exec, and a child forked from this pytest worker
# starts with the worker's (over a GB once the local-model tests ran in it). So a small launcher
# process starts `rag` and reports the peak that wait4 gives for that grandchild alone.
LAUNCHER = (
    "import os, subprocess, sys\n"
    "proc = subprocess.Popen(sys.argv[1:])\n"
    "_, status, usage = os.wait4(proc.pid, 0)\n"
    "print(usage.ru_maxrss, file=open(os.environ['RAG_TEST_PEAK_FILE'], 'w'))\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def run_rag(args: list[str], cwd: Path, timeout: float = 300) -> Run:
    """`rag ARGS` in a subprocess, with its own peak memory (from wait4, in a small launcher)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "DAGSTER_HOME"))}
    env.update(RAG_EMBEDDER="hashing", RAG_PRIVATE_EMBEDDER="hashing", PYTHONPATH=str(REPO_ROOT))
    stamp = time.monotonic_ns()
    out, err, peak = cwd / f"stdout-{stamp}", cwd / f"stderr-{stamp}", cwd / f"peak-{stamp}"
    env["RAG_TEST_PEAK_FILE"] = str(peak)
    started = time.perf_counter()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, sys.executable, "-m", "rag_assets.serve.cli", *args],
            cwd=cwd,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        # A timeout kills the launcher and `rag` together: they share the new session's group.
        killer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        killer.start()
        try:
            proc.wait()
        finally:
            killer.cancel()
    return Run(
        proc.returncode,
        out.read_text(errors="backslashreplace"),
        err.read_text(errors="backslashreplace"),
        int(peak.read_text()) * 1024 if peak.exists() else 0,  # kilobytes on Linux
        time.perf_counter() - started,
    )


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    config = make_hostile_tree(base)
    build = run_rag(["build", "--config", str(config)], cwd=base)
    return base, config, build


def test_the_build_finishes_and_publishes_the_good_files(hostile):
    base, _, build = hostile
    assert build.returncode == 0, build.stderr
    assert "Traceback" not in build.stderr
    index = read_index(base / "out/public/embeddings-index.json")
    slugs = {(c["metadata"]["collection"], c["metadata"]["slug"]) for c in index["chunks"]}
    for expected in (("docs", "good"), ("docs", "inside-link"), ("docs", "folder.md/inside"), ("posts", "p")):
        assert expected in slugs


@pytest.mark.parametrize(
    "path, reason",
    [
        ("docs/passwd.md", "symlink to a target outside the content folder; set follow_symlinks: true to follow it"),
        ("docs/outdir", "symlink to a target outside the content folder"),
        ("docs/vault-link.md", "symlink into the note vaults folder"),
        ("docs/loop", "symlink loop"),
        ("docs/selfloop.md", "symlink loop"),
        ("docs/bad\\xff.md", "file name is not valid UTF-8"),
        ("docs/laughs.md", "frontmatter expands to more than 10,000 values through YAML aliases; remove the aliases"),
        ("docs/big.md", "more than max_file_bytes (10,000)"),
        ("docs/fifo.md", "a named pipe (FIFO), not a regular file"),
        ("docs/sock.md", "a socket, not a regular file"),
        ("docs/folder.md", "a folder named like a Markdown file"),
    ],
)
def test_each_hostile_entry_is_skipped_with_its_reason(hostile, path, reason):
    base, _, build = hostile
    assert f"  {path}: " in build.stdout and reason in build.stdout.split(f"  {path}: ", 1)[1].splitlines()[0]
    manifest = json.loads((base / "out/data/rag-manifest.json").read_text())
    assert reason in manifest["collections"]["docs"]["skipped"][path]


def test_the_walk_lists_plain_files_within_the_limit_and_skips_the_larger_ones(tmp_path):
    """The walk itself, not only the parser after it: a plain file over ``max_file_bytes`` is
    never listed (the walker's fast path for plain files keeps the limit)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "small.md").write_text("x" * 100)
    (tmp_path / "sub" / "exact.md").write_text("x" * 200)
    (tmp_path / "big.md").write_text("x" * 201)
    listing = list_folder(tmp_path, WalkPolicy(boundary=tmp_path.resolve(), max_file_bytes=200))
    assert [f.rel for f in listing.files] == ["sub/exact.md", "sub/small.md"]
    assert [(s.path, s.reason) for s in listing.skipped] == [("big.md", too_large_reason(201, 200))]


def test_collection_names_out_of_the_content_folder_are_refused(hostile):
    base, _, build = hostile
    assert (
        "folder 'escape' is not a collection: folder is a symlink to a target outside the content folder"
        in build.stdout
    )
    assert (
        "folder '../outside' is not a collection: a collection is one folder directly in the content folder"
        in build.stdout
    )
    assert "folder 'vaults' is not a collection: note vault" in build.stdout
    assert "does not exist" not in build.stdout  # refused, not "missing but built anyway"
    manifest = json.loads((base / "out/data/rag-manifest.json").read_text())
    assert set(manifest["collections"]) == {"docs", "posts"}


def _files_containing(folder: Path, marker: str) -> set[str]:
    return {p.name for p in folder.rglob("*") if p.is_file() and marker.encode() in p.read_bytes()}


def test_nothing_from_outside_or_from_a_vault_reaches_the_public_outputs(hostile):
    base, _, build = hostile
    assert build.returncode == 0, build.stderr
    out = base / "out"
    assert _files_containing(out, OUTSIDE_MARKER) == set()  # not in any output, cache or store
    # The private vault's note is in the Private store (and its embedding cache) only.
    assert _files_containing(out, PRIVATE_MARKER) <= {"rag-store.db", "rag-store.db-wal"}
    with sqlite3.connect(out / "data/rag-store-blog.db") as db:
        safe_docs = {row[0] for row in db.execute("SELECT id FROM documents")}
    assert safe_docs == {"notes/n"}
    assert "safe: 1 documents, 1 chunks, 2 skipped" in build.stdout  # leak.md and out.md


def test_check_and_dry_run_on_the_existing_index_exit_normally(hostile):
    base, config, _ = hostile
    check = run_rag(["check", "--config", str(config)], cwd=base)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Fresh: the index matches the content" in check.stdout
    assert "[docs] skipped docs/bad\\xff.md: file name is not valid UTF-8" in check.stdout
    dry = run_rag(["build", "--dry-run", "--config", str(config)], cwd=base)
    assert dry.returncode == 0, dry.stderr
    assert "[docs] unchanged" in dry.stdout and "Traceback" not in dry.stderr


def test_the_billion_laughs_build_stays_small_and_quick(hostile):
    _, _, build = hostile
    assert build.returncode == 0, build.stderr
    assert build.max_rss_bytes < ONE_GB, f"build peaked at {build.max_rss_bytes / 2**20:.0f} MiB"


def test_billion_laughs_parse_is_bounded_in_process(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "laughs.md").write_text(billion_laughs(12))
    tracemalloc.start()
    with deadline(HANG_SECONDS):  # a hang guard; the peak below proves the aliases were never expanded
        result = parse_markdown_file(root / "laughs.md", root=root, collection="docs")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert "YAML aliases" in result.reason
    assert peak < 20 * 2**20


@pytest.mark.parametrize(
    "frontmatter, reason",
    [
        ("a: &a [*a]", "nests more than 50 levels deep"),
        ("a: [" + ",".join(["1"] * 20_000) + "]", "frontmatter holds more than 10,000 values"),
        ("a: " + "x" * 200_000, "frontmatter is 200,003 characters, more than 100,000"),
    ],
)
def test_other_frontmatter_bombs_are_skipped(tmp_path, frontmatter, reason):
    (tmp_path / "a.md").write_text(f"---\n{frontmatter}\n---\nbody\n")
    result = parse_markdown_file(tmp_path / "a.md", root=tmp_path, collection="docs")
    assert reason in result.reason


def test_unreadable_and_vanishing_files_are_skipped_and_the_rest_published(tmp_path, monkeypatch, capsys):
    """Tests run as root, so chmod 000 cannot make a file unreadable: os.open is made to fail."""
    content = tmp_path / "content"
    (content / "docs").mkdir(parents=True)
    (content / "docs/good.md").write_text("# Good\n\nReadable text about vlans.\n")
    (content / "docs/locked.md").write_text("# Locked\n\nNobody may read this.\n")
    (content / "docs/vanishing.md").write_text("# Vanishing\n\nGone before it is parsed.\n")
    real_open = os.open
    real_read = parsing.read_bounded

    def hostile_open(path, flags, *args, **kwargs):
        if os.path.basename(os.fspath(path)) == "locked.md":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args, **kwargs)

    def vanishing_read(path, max_bytes):
        if path.name == "vanishing.md":  # listed and hashed, deleted just before it is parsed
            path.unlink()
        return real_read(path, max_bytes)

    monkeypatch.setattr(os, "open", hostile_open)
    monkeypatch.setattr(parsing, "read_bounded", vanishing_read)
    args = ["--content-dir", str(content), "--output-dir", str(tmp_path / "out")]
    assert main(["build", *args]) == 0
    printed = capsys.readouterr().out
    assert "docs/locked.md: cannot read file: Permission denied" in printed
    assert "docs/vanishing.md: file vanished while the build was reading the folder" in printed
    index = read_index(tmp_path / "out/public/embeddings-index.json")
    assert {c["metadata"]["slug"] for c in index["chunks"]} == {"good"}
    assert main(["check", *args]) in (0, 1)  # the vanished file makes it stale; no crash
    assert "[docs] skipped docs/locked.md: cannot read file: Permission denied" in capsys.readouterr().out


def test_a_file_deleted_between_hashing_and_parsing_is_reported_as_skipped(tmp_path, monkeypatch, capsys):
    """The parse step lists the folder again: a file hashed, then deleted before that listing,
    was missing from the index without a word while the content hash still covered it."""
    from rag_assets.defs import content as content_assets

    content = tmp_path / "content"
    (content / "docs").mkdir(parents=True)
    (content / "docs/good.md").write_text("# Good\n\nReadable text about vlans.\n")
    (content / "docs/gone.md").write_text("# Gone\n\nHashed, then deleted before it is parsed.\n")
    real_list = content_assets.list_folder
    walks = []

    def delete_then_list(root, policy, *, prefix=""):
        walks.append(root)
        if len(walks) == 2:  # the parse step's walk, after the content_hash step's
            (content / "docs/gone.md").unlink()
        return real_list(root, policy, prefix=prefix)

    monkeypatch.setattr(content_assets, "list_folder", delete_then_list)
    out = tmp_path / "out"
    assert main(["build", "--content-dir", str(content), "--output-dir", str(out)]) == 0
    assert len(walks) == 2  # one walk per step (the steps of one build share none)
    printed = capsys.readouterr().out
    assert "docs/gone.md: file vanished while the build was reading the folder; the next build" in printed
    index = read_index(out / "public/embeddings-index.json")
    assert {c["metadata"]["slug"] for c in index["chunks"]} == {"good"}


def test_a_vault_note_deleted_during_the_safe_tier_alone_is_listed_by_rag_build(tmp_path, monkeypatch, capsys):
    """Each tier hashes and parses a vault on its own: a note deleted after the Safe tier hashed
    it, before its parser listed the folder, is skipped by the Safe tier alone (the Private tier
    never sees it). `rag build` listed only the Private tier's skips, so it said "1 skipped"
    for the Safe tier and never which file or why."""
    (tmp_path / "content/posts").mkdir(parents=True)
    (tmp_path / "content/posts/p.md").write_text("# P\n\nA public post.\n")
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "kept.md").write_text("# Kept\n\nA note about vlans.\n")
    (vault / "gone.md").write_text("# Gone\n\nHashed by the Safe tier, then deleted.\n")
    config = tmp_path / "rag.yaml"
    config.write_text(
        "content_dir: content\noutput_dir: out\nembedder: {name: hashing}\nidentity_map: null\n"
        "private_tier: {embedder: hashing}\nvaults: [{name: v, path: v, tier: safe}]\n"
    )
    real_list = parsing.list_folder

    def delete_then_list(root, policy, *, prefix=""):
        if prefix == "v/":  # the first vault listing is the Safe tier's parse (its hash is taken)
            (vault / "gone.md").unlink(missing_ok=True)
        return real_list(root, policy, prefix=prefix)

    monkeypatch.setattr(parsing, "list_folder", delete_then_list)
    assert main(["build", "--config", str(config)]) == 0
    printed = capsys.readouterr().out
    assert (
        "safe: 1 documents, 1 chunks, 1 skipped" in printed and "private: 1 documents, 1 chunks, 0 skipped" in printed
    )
    assert (
        "[vault v] skipped v/gone.md (Safe tier only): file vanished while the build was reading the folder" in printed
    )


def test_skipped_symlinks_are_never_read_or_hashed(tmp_path):
    from rag_assets.ingest.boundaries import collection_policy

    config = make_hostile_tree(tmp_path)
    cfg = load_config(config, embedder="hashing", private_embedder="hashing", environ={})
    before = snapshot_collection(cfg.content_dir, "docs", policy=collection_policy(cfg))
    assert "docs/passwd.md" not in before.files and "docs/inside-link.md" in before.files
    (tmp_path / "outside/secret.md").write_text("changed outside")
    after = snapshot_collection(cfg.content_dir, "docs", policy=collection_policy(cfg))
    assert after.content_hash == before.content_hash
    parsed = parse_collection(cfg.content_dir, "docs", after.content_hash, policy=collection_policy(cfg))
    hashed_and_read = {d.path for d in parsed.documents} | {s.path for s in parsed.skipped if s.path in after.files}
    assert hashed_and_read == set(after.files)  # the parser reads exactly the hashed files


def test_follow_symlinks_follows_out_but_never_into_another_tier(tmp_path):
    from rag_assets.ingest.boundaries import collection_policy, vault_policy

    config = make_hostile_tree(tmp_path)
    (tmp_path / "content/sneaky").symlink_to(tmp_path / "content/vaults/personal")
    cfg = dataclasses.replace(
        load_config(config, embedder="hashing", private_embedder="hashing", environ={}),
        follow_symlinks=True,
        collections=None,
    )
    parsed = parse_collection(cfg.content_dir, "docs", "", policy=collection_policy(cfg))
    paths = {d.path for d in parsed.documents}
    assert {"docs/passwd.md", "docs/outdir/secret.md"} <= paths
    reasons = {s.path: s.reason for s in parsed.skipped}
    assert "symlink into the note vaults folder" in reasons["docs/vault-link.md"]
    assert "symlink loop" in reasons["docs/loop"]
    discovery = discover_collections(cfg)
    assert "escape" in discovery.collections  # followed, as configured
    assert "sneaky" in dict(discovery.excluded)  # a symlink to a vault: never public
    notes = cfg.vault("notes")
    vault = parse_collection(notes.path.parent, "notes", "", root=notes.path, policy=vault_policy(cfg, notes))
    vault_reasons = {s.path: s.reason for s in vault.skipped}
    assert "symlink into the Private vault 'personal'" in vault_reasons["notes/leak.md"]
    assert {d.path for d in vault.documents} == {"notes/n.md", "notes/out.md"}


def test_symlink_fan_out_does_not_multiply_the_walk(tmp_path):
    """Twenty folders each linking to every later one would be 2**20 paths if walked naively."""
    content = tmp_path / "content"
    folders = [content / "docs" / f"d{i}" for i in range(20)]
    for folder in folders:
        folder.mkdir(parents=True)
        (folder / "page.md").write_text(f"# {folder.name}\n\ntext\n")
    for i, folder in enumerate(folders):
        for j in range(i + 1, len(folders)):
            (folder / f"to{j}").symlink_to(folders[j])
    with deadline(HANG_SECONDS):  # a naive walk would not finish; the count below is the proof
        snapshot = snapshot_collection(content, "docs")
    assert len(snapshot.files) < 1000


def test_hashing_survives_undecodable_names():
    assert len(combine_hashes({os.fsdecode(b"docs/bad\xff.md"): "00"})) == 64
