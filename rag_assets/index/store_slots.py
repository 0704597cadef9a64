"""Rotating store slots: the public SQLite store of each generation without a whole copy.

Three store files live under ``data/stores/``::

    data/stores/rag-store-public.0.db
    data/stores/rag-store-public.1.db
    data/stores/rag-store-public.2.db
    data/generations/<id>/rag-store-public.db -> ../../stores/rag-store-public.<k>.db

A generation's folder links the slot it was published with. Readers may still be reading
the slots of the current and the previous generation; a new generation takes the third
one, the slot of the generation two back, which no generation on disk names any more, and
brings it to the new contents by diff (:func:`rag_assets.index.store.sync_contents`): the
write is the changes of the last two builds, never a copy of the whole store. The first
build, whose slot is built whole, then makes the two others copies of it (:func:`seed_slots`),
so the edits after it sync by diff too. A slot that is missing or damaged (after a disk fault,
or a kill before the copies were made) starts as a whole copy of the current store, or is
built whole when there is no sound one.

What the store is asked while it is current (the search and answer logs, the admin console's
actions) is not in a slot: it is kept in the public tier's log file beside the store's link
(:mod:`rag_assets.index.tier_logs`), which no publish copies. A slot still holding the log
tables of an older version has them dropped when it is next synced (:func:`drop_legacy_logs`).

The swap of ``data/current`` stays the commit point: a kill during a slot's sync leaves a
slot that no published generation names (synced again by the next publish).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path

from rag_assets.base.sqlite_cache import sqlite_problem
from rag_assets.base.verified import VerificationRecord
from rag_assets.config import RagConfig
from rag_assets.index import store, tier_logs
from rag_assets.records import under_collection

SLOTS_FOLDER = "stores"
SLOT_COUNT = 3  # the current generation's, the previous one's, and the one being written


def slots_dir(cfg: RagConfig) -> Path:
    return cfg.data_dir / SLOTS_FOLDER


def slot_path(cfg: RagConfig, number: int) -> Path:
    return slots_dir(cfg) / f"rag-store-public.{number}.db"


def slot_named(store_path: Path) -> Path | None:
    """The slot a generation's store link names (None for a store file of the older layout,
    copied whole into its generation, or a missing one)."""
    if not store_path.is_symlink():
        return None
    return Path(os.path.normpath(store_path.parent / os.readlink(store_path)))


def free_slot(cfg: RagConfig, store_paths: Iterable[Path]) -> Path:
    """The first slot that none of ``store_paths`` (the stores of the generations on disk:
    the current and the previous one) names."""
    named = {slot_named(p) for p in store_paths}
    for number in range(SLOT_COUNT):
        path = slot_path(cfg, number)
        if path not in named:
            return path
    raise RuntimeError(f"every store slot under {slots_dir(cfg)} is named by a generation on disk")


def link_slot(slot: Path, store_link: Path) -> None:
    """Name ``slot`` from a generation's folder by a relative link (its readers open the slot
    through it, so SQLite keeps the slot's WAL beside the slot)."""
    os.symlink(os.path.relpath(slot, store_link.parent), store_link)


def prepare_slot(slot: Path, current: Path | None, record: VerificationRecord | None = None) -> str:
    """Make the slot ready to be synced: ``kept`` (a sound slot: the sync writes the diff),
    ``copied`` (a missing or damaged slot, started as a copy of the sound ``current`` store,
    as the first builds do: the sync then writes only this build's change), or ``empty``
    (nothing sound to copy: the sync builds it whole). ``record``: a slot that passed its
    ``quick_check`` when it was current and is unchanged since is not read again (the check
    reads the whole store: seconds at 100,000 chunks)."""
    if slot.is_file() and not _slot_problem(slot, record):
        return "kept"
    store.remove_database(slot)  # damaged, or a WAL left without its database: not to be replayed
    return "copied" if copy_store(current, slot) else "empty"


def _slot_problem(slot: Path, record: VerificationRecord | None) -> str | None:
    if record is None:
        return sqlite_problem(slot)
    return record.run(slot, "quick_check", lambda: sqlite_problem(slot))


def copy_store(source: Path | None, target: Path, *, checked: bool = False) -> bool:
    """``source`` copied whole into ``target`` with SQLite's backup API (consistent while
    readers and the search log use it); False when there is nothing sound to copy.
    ``checked``: the caller has just run ``source``'s quick_check (it is not read whole again)."""
    if source is None or not source.is_file() or (not checked and sqlite_problem(source)):
        return False
    try:
        with closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src:
            with closing(sqlite3.connect(target)) as dst:
                src.backup(dst)
    except sqlite3.DatabaseError:
        store.remove_database(target)
        return False
    return True


def seed_slots(cfg: RagConfig, source: Path) -> list[Path]:
    """Every slot missing on disk made a copy of ``source`` (the store just made current); the
    slots made. Done after the publish that built its slot whole (the first build): without it,
    the next two publishes, each after a one-file edit, started their slots as whole copies of
    the store while the edit waited. Copied under a temporary name and renamed into place, so a
    kill leaves no slot half copied (and the next publish copies what is still missing). The
    source's quick_check runs once for all the copies (it was once per slot: twice 6.2 GB read
    by a first build at a million chunks)."""
    made: list[Path] = []
    missing = [slot_path(cfg, number) for number in range(SLOT_COUNT)]
    missing = [slot for slot in missing if not os.path.lexists(slot)]
    if not missing or not source.is_file() or sqlite_problem(source):
        return made  # nothing sound to copy: the publishes make their slots as before
    for slot in missing:
        partial = slot.with_name(slot.name + ".partial")
        store.remove_database(partial)  # one a kill left
        if not copy_store(source, partial, checked=True):
            break
        os.replace(partial, slot)
        made.append(slot)
    return made


def drop_legacy_logs(slot: Path) -> bool:
    """Drop the log tables an older version kept in the slot (their rows were moved to the log
    file from the current store, :func:`rag_assets.index.tier_logs.migrate`); True when it had any."""
    return tier_logs.drop_legacy(slot)


def settle(slot: Path) -> None:
    """Fold the slot's WAL into its file (no reader holds this slot), so that the file the
    swap publishes is whole on its own."""
    with closing(store.connect(slot)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def keep_collection(
    slot: Path, collection: str, content_hash: str, model: tuple[str, int], built_at: str, generation: str | None
) -> list[tuple[str, int]] | None:
    """Keep the slot's rows of ``collection`` as they are, when the slot holds them for this
    content hash and model (a collection unchanged since the slot's build): the rows a sync of
    its record would leave untouched, with the sync's stamps (build time, generation). Returns
    the collection's (chunk ID, rowid) pairs in ID order, or None when the slot holds another
    state (then sync its record)."""
    with closing(store.connect(slot)) as conn:
        store.ensure_schema(conn)  # an empty slot (built whole by this publish) holds no collection
        with store.transaction(conn):
            meta = conn.execute("SELECT model, dimension FROM embeddings_meta LIMIT 1").fetchone()
            source = conn.execute("SELECT content_hash FROM sources WHERE collection = ?", (collection,)).fetchone()
            if meta is None or tuple(meta) != model or source is None or source[0] != content_hash:
                return None
            conn.execute("UPDATE sources SET indexed_at = ? WHERE collection = ?", (built_at, collection))
            conn.execute("UPDATE embeddings_meta SET built_at = ?", (built_at,))
            store.record_generation(conn, generation)
            # By a range of the primary key, 6x faster than a join of the documents (1.1 s of a
            # one-file edit at 100,000 chunks). The caller compares the count with the facts.
            query = "SELECT id, rowid FROM chunks WHERE id >= ? AND id < ? ORDER BY id"
            return [(row[0], row[1]) for row in conn.execute(query, under_collection(collection))]
