"""A build's pure CPU work spread over the machine's cores: the files the parse and chunk steps
handle, in worker processes.

A build is one Python process, and the GIL keeps its parsing and chunking on one core: on the
2-core development machine they cost 4.7 of a 10,000-chunk build's 13-14.5 CPU s (chunking is
nearly all markdown-it-py's block parse, 0.25 ms a chunk). :class:`WorkPool` maps a
module-level function over a list in ordered batches, in processes forked from a
``forkserver`` that imported the work's modules once (a worker starts in milliseconds, and no
worker is forked from a process whose threads, Dagster's among them, may hold a lock). The
workers stay on this machine: the text they are sent is what the build process reads anyway,
and a Safe or Private note never leaves it.

The processes start at the first :meth:`WorkPool.map` with enough items to pay for them
(:data:`MIN_ITEMS`): a one-file edit parses and chunks in the build's own process, as before.
With one worker (``workers: 1`` in rag.yaml, or one core), nothing is forked at all.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Items below which the work stays in this process: starting the workers and sending them the
# items costs more than it saves (0.7 s for 7,111 documents with one worker against 3.9 s of
# chunking, 2026-12-04).
MIN_ITEMS = 200
BATCH = 64  # items per task: a task's pickling is paid once per batch, and the order kept


def cpu_cores() -> int:
    """The cores this process may run on (its affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def effective_workers(setting: int) -> int:
    """Worker processes for a ``workers`` setting: 0 means one per core, else the number given."""
    return cpu_cores() if setting <= 0 else setting


def can_fork_workers() -> bool:
    """Whether this process may start workers: not in a daemonic process (a pool's worker, which
    may have no children), and only where a forkserver exists (Linux, macOS)."""
    return not multiprocessing.current_process().daemon and "forkserver" in multiprocessing.get_all_start_methods()


@contextlib.contextmanager
def _main_left_out() -> Iterator[None]:
    """Start workers that do not run this program's ``__main__`` again. A new worker prepares
    itself by running the parent's main script or module under another name (so that what it
    defines can be unpickled): the `rag` script, Dagster's CLI (seconds of imports per worker),
    or, from ``python - < file``, a ``<stdin>`` it cannot find, which kills it. The work sent
    is module-level functions of rag_assets, imported by name, so the main module is replaced
    by an empty one while the workers are started."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _exit_with_parent() -> None:
    """In a new worker: end it as soon as the process that started the pool is gone. A build
    killed with SIGKILL (the OOM killer, `kill -9`) otherwise leaves its workers blocked for
    ever on a result pipe no one reads, and with them the forkserver and the build's stdout."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)  # no cleanup to run: the work of a dead build is lost anyway

    threading.Thread(target=watch, name="rag-work-pool-parent", daemon=True).start()


def _run_batch(fn: Callable[[Any], Any], batch: Sequence[Any]) -> list[Any]:
    """In a worker: ``fn`` over one batch, in order."""
    return [fn(item) for item in batch]


class WorkPool:
    """Ordered maps over worker processes, started on first need and stopped by :meth:`close`
    (or the ``with`` block). ``preload``: modules the forkserver imports once for every worker."""

    def __init__(self, workers: int, preload: Sequence[str] = ()) -> None:
        self.workers = effective_workers(workers)
        self.preload = list(preload)
        self._executor: ProcessPoolExecutor | None = None
        self.parallel_items = 0  # how many items went to the workers (for metadata and tests)

    def __enter__(self) -> WorkPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def started(self) -> bool:
        """Whether worker processes were started (a map had enough items)."""
        return self._executor is not None

    def processes(self, since: int) -> int:
        """How many processes did the work of the maps since ``parallel_items`` was ``since``."""
        return self.workers if self.parallel_items > since else 1

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[fn(item) for item in items]``, in the worker processes when there are several
        workers and at least :data:`MIN_ITEMS` items, else here. ``fn`` must be a module-level
        function (or a ``functools.partial`` of one), and items and results picklable. A
        worker's exception is raised here, as the same call in this process would raise it."""
        if self.workers <= 1 or len(items) < MIN_ITEMS or not can_fork_workers():
            return [fn(item) for item in items]
        executor = self._start()
        batches = [items[i : i + BATCH] for i in range(0, len(items), BATCH)]
        with _main_left_out():  # every worker is started by these submissions
            pending = executor.map(_run_batch, [fn] * len(batches), batches)
        results: list[R] = []
        for done in pending:
            results.extend(done)
        self.parallel_items += len(items)
        return results

    def _start(self) -> ProcessPoolExecutor:
        if self._executor is None:
            context = multiprocessing.get_context("forkserver")
            if self.preload:
                # Effective only if this process's forkserver is not running yet; the workers of
                # a later pool fork from the one already started (its imports made).
                context.set_forkserver_preload(self.preload)
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers, mp_context=context, initializer=_exit_with_parent
            )
        return self._executor

    def close(self) -> None:
        """Stop the workers (none were started unless a map needed them)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
