"""The tiers' log files beside their stores: searches, answers and admin actions never write the
store (so a build finds it verified and does not ``quick_check`` it again), an older store's
log tables move into the log file once, and a damaged log file is set aside, never in the way."""

from __future__ import annotations

import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rag_assets.base import verified
from rag_assets.base.sqlite_cache import sqlite_problem
from rag_assets.base.verified import VerificationRecord
from rag_assets.config import RagConfig
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.index import integrity, store, tier_logs
from rag_assets.index.admin_actions import AdminAction, recent_actions, record_action
from rag_assets.index.answer_log import AnswerRecord, read_answers, write_answer
from rag_assets.index.params import SearchParams
from rag_assets.pipeline import utc_now_iso
from rag_assets.publishing import publish_all
from rag_assets.search.retrieval import SearchIndex
from rag_assets.search.search_log import read_log

from .test_publishing import corrupt_pages, embedded_collections, write_corpus

EMBEDDER = HashingEmbedder(dimension=64)
PARAMS = SearchParams(mode="bm25", k=3)


@pytest.fixture
def site(tmp_path: Path) -> RagConfig:
    content = tmp_path / "content"
    write_corpus(content, collections=2, pages=4)
    cfg = RagConfig(content_dir=content, output_dir=tmp_path / "out")
    publish_all(embedded_collections(content), cfg, utc_now_iso())
    return cfg


def state(path: Path) -> tuple[int, int, int, int, bytes]:
    """What the verification record compares (size, mtime, ctime, inode), and the bytes."""
    st = path.stat()
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, path.read_bytes()


def answer(question: str, session: str = "s1") -> AnswerRecord:
    return AnswerRecord(question, question, "an answer", ["col0/page-0"], "m", 1.0, False, session=session)


def test_searches_answers_and_admin_actions_leave_the_store_as_the_build_verified_it(site, tmp_path) -> None:
    real = site.public_store_path.resolve()
    record = VerificationRecord(tmp_path / "verified.json")
    assert record.run(real, "quick_check", lambda: sqlite_problem(real)) is None
    record.entries = {str(real): {"quick_check": verified.fingerprint(real) or []}}  # past the racy margin
    before = state(real)

    index = SearchIndex(site.public_store_path)
    for query in ("proxmox", "vlan"):
        index.search(query, EMBEDDER, PARAMS)
    write_answer(site.public_store_path, answer("how do I add a vlan?"))
    record_action(site.public_store_path, AdminAction("loopback", "audit", "ok", tier="public"))
    index.close()

    assert state(real) == before  # nor its WAL: the fingerprint is whole
    verified.reset_counts()
    assert record.run(real, "quick_check", lambda: "must not be read") is None
    assert (verified.counts.performed, verified.counts.skipped) == (0, 1)
    assert read_log(site.public_store_path)[2] == 2
    assert [a.question for a in read_answers(site.public_store_path)[0]] == ["how do I add a vlan?"]
    assert [a.action for a in recent_actions(site.public_store_path)] == ["audit"]


def older_store(site: RagConfig, tmp_path: Path) -> Path:
    """A Private store as an older version left it: the logs in its own tables (the search log
    from before calibrated relevance), no log file."""
    path = tmp_path / "data" / "rag-store.db"
    path.parent.mkdir()
    shutil.copyfile(site.public_store_path, path)
    with closing(store.connect(path)) as conn:
        conn.execute(
            "CREATE TABLE search_log (id INTEGER PRIMARY KEY, at TEXT NOT NULL, query TEXT NOT NULL,"
            " params JSON, results JSON, top_score REAL, latency_ms REAL)"
        )
        conn.execute("INSERT INTO search_log(id, at, query, results) VALUES (5, 't1', 'older one', '[]')")
        conn.execute("INSERT INTO search_log(id, at, query, results) VALUES (9, 't2', 'older two', '[]')")
    with closing(store.connect(path)) as conn:
        conn.executescript(tier_logs.SCHEMA.replace("store_migration", "unused"))  # answer_log, admin_actions
        conn.execute("DROP TABLE unused")
    write_answer_into_store(path)
    return path


def write_answer_into_store(path: Path) -> None:
    with closing(store.connect(path)) as conn:
        conn.execute(
            "INSERT INTO answer_log(at, session, question, query, abstained) VALUES ('t0', 'nas', 'older?', 'older', 0)"
        )


def test_an_older_stores_logs_move_to_the_log_file_once(site, tmp_path) -> None:
    path = older_store(site, tmp_path)
    assert not tier_logs.log_path(path).exists()

    recent, _, total = read_log(path)  # the first open moves them
    assert total == 2 and [r["query"] for r in recent] == ["older two", "older one"]
    assert recent[0]["topRelevance"] is None  # a column the older log lacked
    with closing(sqlite3.connect(path)) as conn:
        left = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not left & set(tier_logs.TABLES)  # moved, not copied

    index = SearchIndex(path)
    index.search("proxmox", EMBEDDER, PARAMS)
    index.close()
    recent, _, total = read_log(path)
    assert total == 3 and recent[0]["query"] == "proxmox"  # the ids go on after the moved ones
    with closing(sqlite3.connect(tier_logs.log_path(path))) as conn:
        assert [r[0] for r in conn.execute("SELECT id FROM search_log ORDER BY id")] == [5, 9, 10]
    assert [a.question for a in read_answers(path, session="nas")[0]] == ["older?"]
    assert read_answers(path)[1] == 1  # once: the moved rows were not moved again


def test_a_store_that_cannot_be_written_keeps_its_tables_but_they_move_once(site, tmp_path) -> None:
    path = older_store(site, tmp_path)
    drop = tier_logs.drop_legacy
    tier_logs.drop_legacy = lambda _path: False  # a read-only store: the tables stay
    try:
        assert read_log(path)[2] == 2
    finally:
        tier_logs.drop_legacy = drop
    assert read_log(path)[2] == 2  # marked as moved: not copied a second time
    with closing(sqlite3.connect(tier_logs.log_path(path))) as conn:
        assert conn.execute("SELECT count(*) FROM store_migration").fetchone()[0] == 1
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("DELETE FROM search_log WHERE id = 5")  # rows of the older table changed after the move...
        conn.commit()
    with closing(sqlite3.connect(tier_logs.log_path(path))) as conn:
        conn.execute("DELETE FROM search_log")  # ...and the log emptied (rag log reads the log file only)
        conn.commit()
    assert read_log(path)[2] == 0  # the older table is not read again


def test_a_damaged_log_file_is_set_aside_and_blocks_no_search(site) -> None:
    path = site.public_store_path
    index = SearchIndex(path)
    index.search("proxmox", EMBEDDER, PARAMS)
    index.close()
    logs = tier_logs.log_path(path)
    logs.write_bytes(b"not a database at all " * 400)
    assert [d.path for d in integrity.log_damage(site)] == [logs]  # reported by rag check / status
    assert not integrity.output_damage(site)  # and not the outputs' damage: nothing to rebuild

    index = SearchIndex(path)
    assert index.search("vlan", EMBEDDER, PARAMS).hits  # the search is not failed
    index.close()
    aside = [p for p in logs.parent.iterdir() if p.name.startswith(logs.name + ".damaged-")]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"not a database")  # kept for its owner
    assert [r["query"] for r in read_log(path)[0]] == ["vlan"]
    assert not integrity.log_damage(site)


def test_a_log_file_damaged_while_open_is_set_aside_at_the_next_write(site) -> None:
    path = site.public_store_path
    index = SearchIndex(path)
    for n in range(200):  # pages enough to damage in the middle
        index.search(f"proxmox {n}", EMBEDDER, PARAMS)
    index.close()
    logs = tier_logs.log_path(path)
    corrupt_pages(logs)
    assert sqlite_problem(logs)
    assert write_answer(path, answer("after the damage")) is True
    assert [a.question for a in read_answers(path)[0]] == ["after the damage"]
    assert sqlite_problem(logs) is None


def test_a_search_that_finds_its_log_damaged_sets_it_aside_and_the_next_one_logs(site) -> None:
    path = site.public_store_path
    index = SearchIndex(path)
    for n in range(200):
        index.search(f"proxmox {n}", EMBEDDER, PARAMS)
    index.close()
    logs = tier_logs.log_path(path)
    corrupt_pages(logs)  # the search log's first pages: its insert fails, the open does not

    index = SearchIndex(path)
    assert index.search("vlan", EMBEDDER, PARAMS).hits  # its row is lost, not the search
    assert index.search("bridge", EMBEDDER, PARAMS).hits
    index.close()
    assert [r["query"] for r in read_log(path)[0]] == ["bridge"]
    aside = [p for p in logs.parent.iterdir() if p.name.startswith(logs.name + ".damaged-")]
    assert len([p for p in aside if not p.name.endswith("-wal")]) == 1  # with its WAL, if it had one
