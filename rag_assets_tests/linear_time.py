"""The linear-time check shared by the sanitiser's and the chunker's tests.

An input is timed at two sizes ``GROWTH`` apart, in CPU time, beside ordinary prose of the
same two sizes: its time may grow at most ``MAX_GROWTH`` times as fast as linear time (or as
the prose's own, if that grew more), and at the larger size cost at most ``max_ratio`` times
the prose. Each module's docstring says what sensitivity that keeps for its inputs.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest

from .deadline import TooSlow, cpu_deadline

GROWTH = 8  # the larger size over the smaller: linear time grows 8x, quadratic 64x
MAX_GROWTH = 2.0  # times the growth of linear time (8x, or the prose's own growth if more)
MIN_BATCH = 0.05  # seconds of CPU per measurement


def cpu_seconds(call: Callable[[], object], limit: float | None = None) -> float:
    """CPU seconds of ``call()``, the mean of as many calls as take ``MIN_BATCH`` (the CPU clock
    can advance in steps of milliseconds); ``inf`` when cut short at ``limit`` seconds."""
    calls = 0
    gc.disable()  # a collection of the whole test process's heap would be timed too
    start = time.process_time()
    try:
        with cpu_deadline(limit):
            while True:
                call()
                calls += 1
                elapsed = time.process_time() - start
                if elapsed >= MIN_BATCH:
                    return elapsed / calls
    except TooSlow:
        return float("inf")
    finally:
        gc.enable()


def best_seconds(call: Callable[[], object], runs: int, limit: float | None = None) -> float:
    """The least disturbed of ``runs`` runs; stops at the first one cut short."""
    best = float("inf")
    for _ in range(runs):
        took = cpu_seconds(call, limit)
        if took == float("inf"):
            return took
        best = min(best, took)
    return best


def assert_grows_like_prose(
    name: str,
    small: Callable[[], object],
    large: Callable[[], object],
    prose: tuple[float, float],
    max_ratio: float,
    large_size: int,
    what: str = "input",
) -> None:
    """Fail when ``large`` (``GROWTH`` times ``small``'s input) grows super-linearly over
    ``small`` or costs over ``max_ratio`` times the prose's ``prose[1]`` seconds; cut short at
    twice that, so a regression fails in seconds."""
    prose_small, prose_large = prose
    growth_budget = MAX_GROWTH * max(prose_large / prose_small, GROWTH)
    cost_budget = max_ratio * prose_large
    limit = max(2 * max_ratio * prose_large, 1.0)

    took_small = best_seconds(small, 2, limit)
    took_large = cpu_seconds(large, limit) if took_small < float("inf") else took_small
    if took_large < float("inf") and (took_large > cost_budget or took_large > growth_budget * took_small):
        # maybe another process had the CPU (or its caches): the best of three of each
        took_small = min(took_small, best_seconds(small, 2, limit))
        took_large = min(took_large, best_seconds(large, 2, limit))

    if took_large == float("inf"):
        pytest.fail(
            f"{name}: cut short after {limit:.1f} s of CPU, over {limit / prose_large:.0f}x the "
            f"{prose_large * 1000:.0f} ms of {large_size:,} characters of prose"
        )
    growth, prose_growth = took_large / took_small, prose_large / prose_small
    assert took_large <= growth_budget * took_small, (
        f"{name}: {GROWTH}x the {what} took {growth:.1f}x the time ({took_small * 1000:.0f} ms -> "
        f"{took_large * 1000:.0f} ms; prose {prose_growth:.1f}x, budget {growth_budget:.1f}x): super-linear"
    )
    assert took_large <= cost_budget, (
        f"{name}: {large_size:,} characters took {took_large * 1000:.0f} ms, {took_large / prose_large:.1f}x the "
        f"{prose_large * 1000:.0f} ms of as much prose (budget {max_ratio:.0f}x)"
    )
