"""A step's ``{partition: record}`` written out record by record as the step makes them.

A build is one run over a range of partitions, and each asset step handles the whole range
(rag_assets.defs.ranges). Returned as a plain dict, every partition's record was in memory
at once, and ``execute_in_process`` keeps each step's output value until the run ends: at
100,000 chunks a full build peaked at 2.2 GB, most of it parsed documents, chunks and vectors
of every partition held side by side (memray), and memory grew with the corpus. A
:class:`StagedRecords` pickles each record, as soon as it is made, to a synced temporary file
in a staging folder of the asset's (``<asset folder>/.staging/<name>``, on the file system of
the records), and keeps only the file's path, the record's facts and what the step asked to
keep of it (the skipped files of a parse, say). The IO manager then renames the files into
place instead of pickling the records again (rag_assets.defs.io_managers), so the records land
only after the step succeeded, as before; a lookup unpickles a record from wherever its file
is now. The staging folder is locked while its owner lives and removed, with ``.staging`` once
empty, when the step is done; a build killed mid-step leaves it, and the next step to stage
records of the asset removes every staging folder whose lock it can take.
"""

from __future__ import annotations

import fcntl
import gc
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rag_assets.base.atomic import commit_staged, discard_staged, staged_open
from rag_assets.defs import record_handoff
from rag_assets.records import EmbeddedCollection, RecordFacts


def load_pickle(path: Path) -> Any:
    """A record from its pickle, read from the file as it unpickles (never its whole bytes
    beside the records). Unpickling tens of thousands of chunk records triggers the cyclic
    garbage collector over and over although they hold no cycles: pausing it is ~3x faster."""
    handed, record = record_handoff.take(path)
    if handed:  # the record a one-partition step just wrote (rag_assets.defs.record_handoff)
        return record
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with path.open("rb") as handle:
            return pickle.load(handle)
    finally:
        if was_enabled:
            gc.enable()


STAGING = ".staging"
_LOCK = "owner.lock"
_NEW = ".new-"  # a staging folder not yet locked by its owner: never removed by another


class StagingFolder:
    """A folder for one step's staged files under ``root``, locked (``flock``) for as long as
    this object holds it: the lock goes with its process, however that ends."""

    def __init__(self, root: Path) -> None:
        for attempt in range(3):
            root.mkdir(parents=True, exist_ok=True)
            remove_abandoned(root)
            try:
                # Locked before it gets its name, so that no other step takes it for abandoned.
                made = Path(tempfile.mkdtemp(prefix=_NEW, dir=root))
                break
            except FileNotFoundError:  # another step removed ``root`` as it emptied it
                if attempt == 2:
                    raise
        self._fd: int | None = os.open(made / _LOCK, os.O_CREAT | os.O_RDWR | getattr(os, "O_CLOEXEC", 0), 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self.path = made.with_name(made.name[len(_NEW) :])
        os.rename(made, self.path)

    def remove(self) -> None:
        """Remove the folder and what is left in it, then release it; and ``root`` once empty."""
        if self._fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._fd)
        self._fd = None
        try:
            self.path.parent.rmdir()
        except OSError:
            pass  # another step's folder is in it, or it is gone


def remove_abandoned(root: Path) -> None:
    """Remove the staging folders under ``root`` whose owner is gone (their lock is free)."""
    for entry in root.iterdir():
        if entry.name.startswith(_NEW) or not entry.is_dir():
            continue
        try:
            fd = os.open(entry / _LOCK, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue  # removed meanwhile
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its step is still running
        shutil.rmtree(entry, ignore_errors=True)
        os.close(fd)


class StagedRecords(Mapping[str, Any]):
    """``{partition: record}`` whose records are on disk: staged while the step runs, then
    renamed into place by :meth:`commit`. ``folder``: the asset's folder of the IO manager (a
    partition's record is ``folder/<partition>``), where the staged files are made, so that the
    rename stays on one file system. ``keep``: what to hold of each record in memory
    (:meth:`kept`), for whoever reads the run's output afterwards. ``hand_off`` (a step of one
    partition): each record is also held until it is committed, then offered to the next step
    (rag_assets.defs.record_handoff)."""

    def __init__(self, folder: Path, keep: Callable[[Any], Any] | None = None, hand_off: bool = False) -> None:
        self.folder = folder
        self._keep = keep
        self._hand_off = hand_off
        self._records: dict[str, Any] = {}  # with hand_off: the records until committed
        self._files: dict[str, Path] = {}  # the staged file, then the committed one
        self._staged: set[str] = set()
        self._facts: dict[str, RecordFacts] = {}
        self._kept: dict[str, Any] = {}
        self._staging: StagingFolder | None = None

    def add(self, key: str, record: Any) -> None:
        """Pickle ``record`` to a staged file for partition ``key``; hold only what is kept of it."""
        if self._staging is None:
            self._staging = StagingFolder(self.folder / STAGING)
        with staged_open(self.folder / key, self._staging.path) as (handle, tmp):
            pickle.dump(record, handle, pickle.HIGHEST_PROTOCOL)
        self._files[key] = tmp
        self._staged.add(key)
        if isinstance(record, EmbeddedCollection):
            self._facts[key] = RecordFacts.of(record)
        if self._keep is not None:
            self._kept[key] = self._keep(record)
        if self._hand_off:
            self._records[key] = record

    def facts(self, key: str) -> RecordFacts | None:
        """The facts of an embedded record (written beside it once committed), else None."""
        return self._facts.get(key)

    def kept(self, key: str) -> Any:
        """What ``keep`` took of partition ``key``'s record (None without ``keep``)."""
        return self._kept.get(key)

    def commit(self, key: str, target: Path) -> None:
        """Rename partition ``key``'s staged file over ``target`` (the IO manager's path)."""
        commit_staged(self._files[key], target)
        self._files[key] = target
        self._staged.discard(key)
        if key in self._records:
            record_handoff.offer(target, self._records.pop(key))

    def discard(self) -> None:
        """Remove the files still staged (after a failure: nothing of it is published) and the
        staging folder."""
        for key in sorted(self._staged):
            discard_staged(self._files.pop(key))
        self._staged.clear()
        self._records.clear()
        if self._staging is not None:
            self._staging.remove()
            self._staging = None

    def __getitem__(self, key: str) -> Any:
        return load_pickle(self._files[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)
