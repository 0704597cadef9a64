"""An exclusive lock on a file beside the outputs, held while a block runs (``fcntl.flock``).

Builds of different partitions run at the same time (concurrent shard runs, Celery workers on
one output folder), and some outputs are read, changed and written back by each of them; the
lock makes those read-modify-write steps take turns instead of losing each other's changes.
The lock is released when its holder exits, however it exits (a killed run holds nothing).
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created when missing) for the ``with`` block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
