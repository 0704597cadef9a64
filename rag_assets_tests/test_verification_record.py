"""``rag check`` and ``rag status`` verify only what changed since the last verification.

On a real build of the sample content: a second ``rag check`` reads no file it verified
before; a file whose bytes change is verified again and its damage reported, even when its
size and mtime are put back with ``os.utime``; ``rag check --deep`` verifies everything again.
The verifications are counted by rag_assets.base.verified's public counter (and printed).
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import closing
from pathlib import Path

import pytest

from rag_assets.base import verified
from rag_assets.config import load_config
from rag_assets.index import generations
from rag_assets.serve.cli import main

from .conftest import SAMPLE_CONTENT


def write_config(folder: Path) -> Path:
    config = folder / "rag.yaml"
    config.write_text(f"content_dir: {SAMPLE_CONTENT}\noutput_dir: {folder / 'out'}\nembedder: hashing\nvaults: []\n")
    return config


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("verified-built")
    assert main(["build", "--config", str(write_config(folder))]) == 0
    return folder / "out"


@pytest.fixture
def site(built: Path, tmp_path: Path) -> Path:
    """A fresh copy of the built site (its own record) and its config."""
    config = write_config(tmp_path)
    shutil.copytree(built, tmp_path / "out", symlinks=True)
    # A file changed within the racy margin is not remembered (its fingerprint could repeat):
    # let the copy's timestamps age past it, so the first check can remember them.
    time.sleep(verified.RACY_MARGIN_NS / 1e9 * 2)
    return config


def run(config: Path, *command: str) -> tuple[int, verified.VerificationCounts]:
    verified.reset_counts()
    code = main([*command, "--config", str(config)])
    return code, verified.VerificationCounts(verified.counts.performed, verified.counts.skipped)


def test_a_second_check_and_status_verify_nothing_verified_before(site: Path, capsys) -> None:
    code, first = run(site, "check")
    assert code == 0, capsys.readouterr().out
    assert first.performed >= 5 and first.skipped == 0  # index, BM25 file, manifest, store, caches...
    code, second = run(site, "check")
    out = capsys.readouterr().out
    assert code == 0
    assert (second.performed, second.skipped) == (0, first.performed)
    assert f"Verified 0 output and cache file check(s); {first.performed} unchanged" in out
    code, status = run(site, "status")
    assert code == 0 and status.performed == 0 and status.skipped >= first.performed


def test_a_changed_file_is_verified_again_and_its_damage_found(site: Path, capsys) -> None:
    code, first = run(site, "check")
    assert code == 0
    index = generations.published(load_config(site, environ={})).index_path
    before = index.stat()
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit flipped: same size...
    index.write_bytes(bytes(data))
    os.utime(index, ns=(before.st_atime_ns, before.st_mtime_ns))  # ...and the same mtime
    assert index.stat().st_size == before.st_size and index.stat().st_mtime_ns == before.st_mtime_ns
    capsys.readouterr()
    code, again = run(site, "check")
    out = capsys.readouterr().out
    assert code == 1 and str(index) in out and "SHA-256" in out, out
    assert (again.performed, again.skipped) == (1, first.performed - 1)
    # Damage is never remembered as verified: reported again, by status too.
    code, status = run(site, "status")
    assert code == 1 and status.performed == 1 and str(index) in capsys.readouterr().out


def test_a_damaged_json_cache_of_the_same_size_is_found(site: Path, capsys) -> None:
    assert run(site, "check")[0] == 0
    cache = sorted((load_config(site, environ={}).data_dir / "stat-cache").glob("*.json"))[0]  # one collection's part
    size = cache.stat().st_size
    cache.write_bytes(b"[" + b" " * (size - 2) + b"]")  # valid JSON, not an object; same size
    capsys.readouterr()
    code, again = run(site, "check")
    out = capsys.readouterr().out
    assert code == 1 and str(cache) in out and again.performed == 1, out


def test_deep_verifies_everything_again(site: Path, capsys) -> None:
    _, first = run(site, "check")
    code, deep = run(site, "check", "--deep")
    out = capsys.readouterr().out
    assert code == 0
    assert (deep.performed, deep.skipped) == (first.performed, 0)
    assert f"Verified {first.performed} output and cache file check(s)." in out


def test_a_memo_computes_again_only_after_the_file_changed(tmp_path: Path) -> None:
    """FingerprintMemo (a store's summary): kept while the file is unchanged, computed again
    after a write of the same size, and not kept while the file is racily fresh."""
    path = tmp_path / "file"
    path.write_bytes(b"one")
    memo: verified.FingerprintMemo[dict] = verified.FingerprintMemo()
    calls: list[bytes] = []

    def compute() -> dict:
        calls.append(path.read_bytes())
        return {"bytes": calls[-1]}

    time.sleep(verified.RACY_MARGIN_NS / 1e9 * 2)
    assert memo.get(path, compute) == {"bytes": b"one"}
    memo.get(path, compute)["bytes"] = b"changed by a caller"  # a copy: the memo keeps its own
    assert memo.get(path, compute) == {"bytes": b"one"} and len(calls) == 1
    path.write_bytes(b"two")  # the same size: the fingerprint's ctime (and mtime) differ
    assert memo.get(path, compute) == {"bytes": b"two"} and len(calls) == 2
    assert memo.get(path, compute) == {"bytes": b"two"} and len(calls) == 3  # just written: not kept
    time.sleep(verified.RACY_MARGIN_NS / 1e9 * 2)
    memo.get(path, compute)
    assert memo.get(path, compute) == {"bytes": b"two"} and len(calls) == 4


def test_the_store_a_publish_synced_is_not_read_again_until_it_changes(tmp_path: Path, monkeypatch, capsys) -> None:
    """The publish vouches for the store slot it synced (sound when prepared, written since only
    by its own transactions) and for the slots it seeded: neither the check after the publish,
    nor `rag check`, nor the next publishes taking a slot read it whole again; a write to it
    after the publish has it verified again."""
    from rag_assets.index import integrity, store_slots

    read: list[Path] = []
    real = integrity.sqlite_problem
    monkeypatch.setattr(integrity, "sqlite_problem", lambda path: read.append(Path(path).resolve()) or real(path))
    content = tmp_path / "content"
    shutil.copytree(SAMPLE_CONTENT, content)
    config = tmp_path / "rag.yaml"
    config.write_text(f"content_dir: {content}\noutput_dir: {tmp_path / 'out'}\nembedder: hashing\nvaults: []\n")
    assert main(["build", "--config", str(config)]) == 0
    cfg = load_config(config, environ={})
    # The slots the first publish seeded (copies of its store) are vouched for too: the next
    # publishes, which take them, do not read them whole before syncing.
    prepared: list[Path] = []
    real_slot_check = store_slots.sqlite_problem
    monkeypatch.setattr(
        store_slots, "sqlite_problem", lambda path: prepared.append(Path(path).resolve()) or real_slot_check(path)
    )
    page = next(content.glob("*/*.md"))
    for n in range(2):  # each edit's build takes another slot, synced by diff
        page.write_text(page.read_text() + f"\nOne more sentence, uqvouch{n}.\n")
        assert main(["build", "--config", str(config)]) == 0
    slot = store_slots.slot_named(generations.published(cfg).store_path)
    assert slot is not None and slot.name.startswith("rag-store-public.")
    assert slot.resolve() not in read
    assert prepared == []
    capsys.readouterr()
    code, counts = run(config, "check")
    assert code == 0 and slot.resolve() not in read, capsys.readouterr().out

    with store_slots.store.connect(slot) as conn:  # any write after the publish: read again
        conn.execute("PRAGMA user_version = 7")
    os.utime(slot)
    code, again = run(config, "check")
    assert code == 0 and slot.resolve() in read


def test_caches_changed_only_by_a_build_are_not_read_whole_at_the_next(tmp_path: Path, monkeypatch) -> None:
    """A build vouches for the caches its own sessions changed since its start's check: the next
    build's start does not quick_check them. A change by anyone else between two of its
    sessions (here a write of another connection while the build runs) breaks that: the cache
    is read whole at the next start."""
    import sqlite3

    from rag_assets.base import sqlite_cache
    from rag_assets.ingest.doc_cache import DocumentCache

    content = tmp_path / "content"
    shutil.copytree(SAMPLE_CONTENT, content)
    config = tmp_path / "rag.yaml"
    config.write_text(f"content_dir: {content}\noutput_dir: {tmp_path / 'out'}\nembedder: hashing\nvaults: []\n")
    cfg = load_config(config, environ={})
    caches = {cfg.document_cache_path.resolve(), cfg.embedding_cache_path.resolve()}
    page = next(content.glob("*/*.md"))
    checked: list[Path] = []
    real = sqlite_cache.sqlite_problem
    monkeypatch.setattr(sqlite_cache, "sqlite_problem", lambda path: checked.append(Path(path).resolve()) or real(path))

    def edit_and_build(n: int) -> set[Path]:
        checked.clear()
        page.write_text(page.read_text() + f"\nOne more sentence, uqcache{n}.\n")
        assert main(["build", "--config", str(config)]) == 0
        return set(checked) & caches

    edit_and_build(0)  # the first build: it made the caches, and vouches for them
    assert edit_and_build(1) == set()
    assert edit_and_build(2) == set()
    assert edit_and_build(3) == set()

    real_store = DocumentCache.store

    def store_then_foreign_write(self, entries):
        real_store(self, entries)
        with closing(sqlite3.connect(self.path)) as conn:  # another writer between two sessions
            conn.execute("CREATE TABLE IF NOT EXISTS foreign_rows (x)")
            conn.execute("INSERT INTO foreign_rows VALUES (1)")
            conn.commit()

    monkeypatch.setattr(DocumentCache, "store", store_then_foreign_write)
    assert edit_and_build(4) == set()  # its start: the cache as the build before left it
    monkeypatch.setattr(DocumentCache, "store", real_store)
    assert edit_and_build(5) == {cfg.document_cache_path.resolve()}
