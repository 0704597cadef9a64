"""Argument types for the ``rag`` command's numeric flags: a number out of range, NaN, an
infinity or a word is an argparse usage error (exit 2, with the flag and what it accepts),
never a traceback from deep inside a search."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def finite_float(low: float | None = None, high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a finite number, within [low, high] where given."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text[:40]!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text[:40]!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {_bounds(low, high)}, got {text[:40]!r}")
        return value

    return parse


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also a number of over 4,300 digits (Python's conversion limit)
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {_bounds(low, high)}, got {text[:40]!r}")
        return value

    return parse


def _bounds(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f"between {low:g} and {high:g}"
    return f"at least {low:g}" if low is not None else f"at most {high:g}"
