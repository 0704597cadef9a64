"""Replacing output files so that a reader never sees a half-written one."""

from __future__ import annotations

import glob
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def stage_bytes(path: Path, data: bytes) -> Path:
    """Write ``data`` to a synced temporary file beside ``path``; :func:`commit_staged` renames it.

    Staging several outputs first and renaming them together keeps the moment in which
    a kill could leave them from different builds down to a few renames.
    """
    with staged_open(path) as (handle, tmp):
        handle.write(data)
    return tmp


@contextmanager
def staged_open(path: Path, staging: Path | None = None) -> Iterator[tuple[BinaryIO, Path]]:
    """A temporary file for ``path`` (in ``staging``, else beside it), open for writing and
    synced when the block ends, removed when it raises; (its handle, its path). The caller
    renames it over ``path`` with :func:`commit_staged`, or drops it with :func:`discard_staged`;
    one a kill leaves behind goes with a later write of ``path`` (:func:`remove_abandoned_temp_files`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_temp_files(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=staging or path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, 0o666 & ~_current_umask())
        with os.fdopen(fd, "wb") as handle:
            yield handle, tmp
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        discard_staged(tmp)
        raise


def commit_staged(tmp: Path, path: Path) -> None:
    os.replace(tmp, path)


def discard_staged(tmp: Path) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over ``path``.

    A crash at any point leaves either the old file or the new one, never a mix;
    the temporary file is removed when the write fails (or, after a kill, by a later write).
    """
    commit_staged(stage_bytes(path, data), path)


@contextmanager
def atomic_open(path: Path, staging: Path | None = None) -> Iterator[BinaryIO]:
    """:func:`atomic_write_bytes` for a file written piece by piece: the handle writes a
    temporary file beside ``path``, synced and renamed over it when the block ends, removed
    when it raises (so a large file never has to be held whole in memory).

    ``staging``: a folder on the same file system to hold the temporary file instead, for a
    write that lasts long: one a kill leaves there is removed with that folder (the
    generation being written, see rag_assets.index.generations) rather than an hour later."""
    with staged_open(path, staging) as (handle, tmp):
        yield handle
    commit_staged(tmp, path)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


ABANDONED_AFTER_SECONDS = 3600


def remove_abandoned_temp_files(path: Path) -> None:
    """Temporary files of this path left by a killed writer (no exception ran to delete them).

    Only files older than an hour go, so a concurrent writer's fresh file is never touched.
    """
    cutoff = time.time() - ABANDONED_AFTER_SECONDS
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        try:
            if leftover.stat().st_mtime < cutoff:
                leftover.unlink()
        except FileNotFoundError:
            pass
