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
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise TooSlow

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
