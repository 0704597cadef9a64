"""The public store's rotating slots, and a publish that holds one collection's records at a time.

Each generation links one of three store slots; a publish syncs the slot no generation on
disk names (the one two back) by diff, never copying the current store, leaves the slots of
the current and the previous generation untouched (readers may be reading them), and leaves
the logs in their file beside the store's link (searches never write a slot); an older store's
log tables move there at the next publish. The lazy records: a publish
through the IO manager's mapping never holds every collection's records at once.
"""

from __future__ import annotations

import gc
import hashlib
import pickle
import sqlite3
import weakref
from contextlib import closing
from pathlib import Path

import pytest
from upath import UPath

from rag_assets.config import RagConfig
from rag_assets.defs.io_managers import AtomicPickleIOManager, LazyRecords
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.index import generations, integrity, store, store_slots, tier_logs
from rag_assets.index.admin_actions import AdminAction, recent_actions, record_action
from rag_assets.index.consistency import check_public_outputs
from rag_assets.index.params import SearchParams
from rag_assets.index.rejoin import rejoined
from rag_assets.pipeline import utc_now_iso
from rag_assets.publishing import publish_all
from rag_assets.records import RecordSequence
from rag_assets.search.retrieval import SearchIndex

from .test_publishing import corrupt_pages, embedded_collections, write_corpus

EMBEDDER = HashingEmbedder(dimension=64)


@pytest.fixture
def site(tmp_path: Path) -> tuple[RagConfig, list]:
    content = tmp_path / "content"
    write_corpus(content, collections=3, pages=4)
    return RagConfig(content_dir=content, output_dir=tmp_path / "out"), embedded_collections(content)


def slot_of_current(cfg: RagConfig) -> Path:
    slot = store_slots.slot_named(generations.published(cfg).store_path)
    assert slot is not None
    return slot


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def log_queries(path: Path) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(path)) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT id, query FROM search_log ORDER BY id")]


@pytest.fixture
def copies(monkeypatch) -> list[Path]:
    """The slots started as a whole copy of the current store (SQLite's backup API)."""
    made: list[Path] = []
    copy = store_slots.copy_store

    def counted(source: Path | None, target: Path, **kwargs) -> bool:
        made.append(target)
        return copy(source, target, **kwargs)

    monkeypatch.setattr(store_slots, "copy_store", counted)
    return made


def test_publishes_rotate_through_three_slots_syncing_by_diff(site, copies) -> None:
    cfg, collections = site
    used, first_sync, ids = [], [], []
    for _ in range(3):  # within a second or two: the IDs must still sort in publish order
        published = publish_all(collections, cfg, utc_now_iso())
        used.append(slot_of_current(cfg))
        first_sync.append(published.store_sync)
        ids.append(generations.published(cfg).id)
    assert used == [store_slots.slot_path(cfg, n) for n in range(3)] and ids == sorted(ids)
    # The first build writes its slot whole and then makes the other two copies of it (under a
    # temporary name), so the next two publishes sync theirs by diff, as every later one does.
    # (The first publish asks for a copy of its own slot too: there is no current store to copy.)
    seeded = [used[0], *(slot.with_name(slot.name + ".partial") for slot in used[1:])]
    assert first_sync[0].chunks_written == sum(len(c.chunks) for c in collections)
    assert [s.chunks_written for s in first_sync[1:]] == [0, 0] and copies == seeded
    inode = used[0].stat().st_ino
    readers = {p: digest(p) for p in used[1:]}  # the current and the previous generation's slots

    edited = collections[:1] + collections[2:]  # one collection gone
    published = publish_all(edited, cfg, utc_now_iso())

    # The slot of two generations back, in place (same file), by diff: nothing rewritten but
    # the gone collection's rows; the slots readers may hold are not touched.
    assert slot_of_current(cfg) == used[0] and used[0].stat().st_ino == inode
    assert published.store_sync.chunks_written == 0 and not published.store_sync.full_rewrite
    assert {p: digest(p) for p in readers} == readers
    assert copies == seeded  # no whole copy after the first build
    with closing(sqlite3.connect(cfg.public_store_path)) as conn:
        names = {r[0] for r in conn.execute("SELECT DISTINCT collection FROM documents")}
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert names == {c.collection for c in edited} and chunks == sum(len(c.chunks) for c in edited)
    assert check_public_outputs(cfg).ok
    assert len(list(generations.generations_dir(cfg).iterdir())) == 2


def test_the_first_build_checks_the_store_it_seeds_the_slots_from_once(site, copies, monkeypatch) -> None:
    # Each seeded slot quick_checked its source again: twice 6.2 GB read at a million chunks.
    cfg, collections = site
    checked: list[Path] = []
    real = store_slots.sqlite_problem
    monkeypatch.setattr(store_slots, "sqlite_problem", lambda path: checked.append(Path(path)) or real(path))
    publish_all(collections, cfg, utc_now_iso())
    current = cfg.public_store_path.resolve()
    assert len([p for p in copies if p.name.endswith(".partial")]) == 2  # two slots seeded
    assert [p.resolve() for p in checked if p.resolve() == current] == [current]
    assert all(store_slots.slot_path(cfg, n).is_file() for n in range(store_slots.SLOT_COUNT))


def slot_state(cfg: RagConfig) -> dict[Path, tuple[int, int, int, str]]:
    """(size, mtime, inode, digest) of every slot."""
    slots = [store_slots.slot_path(cfg, n) for n in range(store_slots.SLOT_COUNT)]
    return {p: (p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ino, digest(p)) for p in slots}


def log_tables(path: Path) -> set[str]:
    with closing(sqlite3.connect(path)) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return names & set(tier_logs.TABLES)


def test_the_logs_stay_beside_the_store_and_searches_leave_every_slot_untouched(site) -> None:
    cfg, collections = site
    params = SearchParams(mode="bm25", k=3)
    index = SearchIndex(cfg.public_store_path)
    queries = ["proxmox", "vlan", "bridge", "router"]
    for query in queries:
        publish_all(collections, cfg, utc_now_iso())
        before = slot_state(cfg)
        index.search(query, EMBEDDER, params)
        record_action(cfg.public_store_path, AdminAction("loopback", "audit", "ok", tier="public", target=query))
        assert slot_state(cfg) == before  # the logs went to their own file

    logs = tier_logs.log_path(cfg.public_store_path)
    assert logs.parent == cfg.data_dir and [q for _, q in log_queries(logs)] == queries
    assert [a.target for a in recent_actions(cfg.public_store_path)] == queries[::-1]
    assert all(not log_tables(slot) for slot in slot_state(cfg))
    index.close()


def test_an_older_stores_logs_move_to_the_log_file_at_the_next_publish(site) -> None:
    cfg, collections = site
    publish_all(collections, cfg, utc_now_iso())
    # The layout before the log file: the tables in every slot (carried forward), no log file.
    store.remove_database(tier_logs.log_path(cfg.public_store_path))
    for slot in slot_state(cfg):
        with closing(store.connect(slot)) as conn:
            conn.executescript(tier_logs.SCHEMA.replace("store_migration", "unused_table"))
            conn.execute("DROP TABLE unused_table")
            conn.execute("INSERT INTO search_log(id, at, query) VALUES (4, '2026-01-01T00:00:00Z', 'older')")
            conn.execute(
                "INSERT INTO admin_actions(at, who, action, outcome) VALUES ('2026-01-01T00:00:00Z', 'x', 'audit', 'ok')"
            )
    current = slot_of_current(cfg)
    publish_all(collections, cfg, utc_now_iso())

    logs = tier_logs.log_path(cfg.public_store_path)
    assert log_queries(logs) == [(4, "older")] and [a.action for a in recent_actions(cfg.public_store_path)] == [
        "audit"
    ]
    assert not log_tables(current) and not log_tables(slot_of_current(cfg))  # moved, and dropped from the new slot
    SearchIndex(cfg.public_store_path).search("vlan", EMBEDDER, SearchParams(mode="bm25", k=3))
    publish_all(collections, cfg, utc_now_iso())  # moved once: no second copy of the older rows
    assert [q for _, q in log_queries(logs)] == ["older", "vlan"]


def test_a_damaged_slot_is_made_whole_again(site, copies) -> None:
    cfg, collections = site
    for _ in range(3):
        publish_all(collections, cfg, utc_now_iso())
    target = store_slots.slot_path(cfg, 0)  # no generation on disk names it any more
    corrupt_pages(target)
    assert integrity.sqlite_problem(target) is not None

    copies.clear()
    publish_all(collections, cfg, utc_now_iso())
    assert slot_of_current(cfg) == target and integrity.sqlite_problem(target) is None
    assert copies == [target] and check_public_outputs(cfg).ok

    # With the current store damaged too, there is nothing sound to copy: built from the records.
    for _ in range(2):
        publish_all(collections, cfg, utc_now_iso())
    corrupt_pages(store_slots.slot_path(cfg, 0))
    corrupt_pages(slot_of_current(cfg))
    published = publish_all(collections, cfg, utc_now_iso())
    assert published.store_sync.chunks_written == sum(len(c.chunks) for c in collections)
    assert integrity.sqlite_problem(slot_of_current(cfg)) is None and check_public_outputs(cfg).ok


def test_a_missing_slot_of_the_current_generation_is_not_reused(site) -> None:
    """Slots are picked by the links of the generations on disk, not by what files exist."""
    cfg, collections = site
    publish_all(collections, cfg, utc_now_iso())
    publish_all(collections, cfg, utc_now_iso())
    store_slots.slot_path(cfg, 2).touch()  # a stray file where the free slot goes
    publish_all(collections, cfg, utc_now_iso())
    assert slot_of_current(cfg) == store_slots.slot_path(cfg, 2) and check_public_outputs(cfg).ok


# --- one collection's records at a time ---------------------------------------------------------


def test_a_publish_through_the_lazy_records_holds_one_collection_at_a_time(site, tmp_path: Path) -> None:
    cfg, collections = site
    manager = AtomicPickleIOManager(base_dir=str(tmp_path / "records"))
    paths = {}
    for col in collections:
        paths[col.collection] = UPath(tmp_path / "records" / col.collection)
        manager.dump_to_path(None, col, paths[col.collection])
    alive: list[weakref.ref] = []
    most = 0

    class Counting(AtomicPickleIOManager):
        def load_from_path(self, context, path):  # type: ignore[override]
            nonlocal most
            record = super().load_from_path(context, path)
            gc.collect()  # only references keep a record: no cycle keeps a released one
            alive.append(weakref.ref(record))
            most = max(most, sum(1 for r in alive if r() is not None))
            return record

    lazy = LazyRecords(Counting(base_dir=str(tmp_path / "records")), paths)
    records = rejoined(cfg, lazy)
    assert isinstance(records, RecordSequence) and not alive  # nothing loaded yet
    published = publish_all(records, cfg, utc_now_iso())

    assert len(alive) >= len(collections)  # every record was loaded (several passes)
    # The loop's variable may hold the last record while the next one loads; never more.
    assert most <= 2 < len(collections)
    expected = pickle.loads(pickle.dumps(collections))
    assert published.header.total_chunks == sum(len(c.chunks) for c in expected)
    assert [f.collection for f in published.collections] == [c.collection for c in expected]
    assert check_public_outputs(cfg).ok


def test_records_are_kept_between_passes_up_to_the_bound(site) -> None:
    _, collections = site
    loads: list[str] = []
    by_name = {c.collection: c for c in collections}

    def load(name: str):
        loads.append(name)
        return by_name[name]

    smallest = min(len(c.chunks) for c in collections)
    for keep, expected in ((0, 2), (smallest, 2), (sum(len(c.chunks) for c in collections), 1)):
        loads.clear()
        records = RecordSequence(by_name, load, keep_chunks=keep)
        assert [c.collection for c in records] == [c.collection for c in records] == sorted(by_name)
        kept = 1 if keep == smallest else 0  # the first that fits, and no more
        assert len(loads) == expected * len(collections) - (kept if expected == 2 else 0)
