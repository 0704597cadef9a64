"""Cutting a timed call short: the linear-time tests (test_sanitizer_linear.py,
test_chunking_linear.py) stop a run that has already taken twice its budget, since a quadratic
one would go on for minutes."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class TooSlow(Exception):
    """The block ran past its deadline."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise TooSlow after ``seconds`` (where SIGALRM exists; None: no deadline)."""
    with _timer("ITIMER_REAL", "SIGALRM", seconds):
        yield


@contextlib.contextmanager
def cpu_deadline(seconds: float | None) -> Iterator[None]:
    """Raise TooSlow after ``seconds`` of this process's CPU time (where SIGPROF exists; None: no
    deadline): on a loaded machine a run's wall time can be several times its CPU time."""
    with _timer("ITIMER_PROF", "SIGPROF", seconds):
        yield


@contextlib.contextmanager
def _timer(which: str, signal_name: str, seconds: float | None) -> Iterator[None]:
    if not seconds or not hasattr(signal, "setitimer") or not hasattr(signal, signal_name):
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise TooSlow

    timer, signum = getattr(signal, which), getattr(signal, signal_name)
    previous = signal.signal(signum, expire)
    signal.setitimer(timer, seconds)
    try:
        yield
    finally:
        signal.setitimer(timer, 0)
        signal.signal(signum, previous)
