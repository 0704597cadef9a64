"""How many threads numpy's BLAS may use per call, for the code that searches many times over.

One search multiplies the query by the store's matrix (``matrix @ q``): a product too small to
gain from threads. OpenBLAS still splits it across its threads and leaves them spinning after
it, taking the cores the same search's next steps (and, on a shared machine, every other
process) need. `rag serve` runs one search per worker thread, so a multi-threaded BLAS
oversubscribes the cores: in bench/search.py on 2 cores, hybrid p50 at 100,000 chunks was
132 ms with 2 BLAS threads, 79 ms with 1. `rag eval` runs thousands of searches in a row: with
one thread the product took a tenth of the CPU time on the 2-core development machine at load
10 (0.5 ms against 5.9 ms for 8,687 x 384, float32), and an ArguAna-shaped eval half the CPU
time. The limit applies only where threadpoolctl is installed and, for :func:`blas_threads`,
``OPENBLAS_NUM_THREADS`` is not set (the user's own choice stands; `rag serve` checks it itself).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext


def limit_blas_threads(threads: int = 1) -> str:
    """Give numpy's BLAS ``threads`` threads per call from now on, for the whole process;
    says what was done (for a log line)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return "BLAS threads unchanged (threadpoolctl not installed; set OPENBLAS_NUM_THREADS=1 to limit them)"
    threadpool_limits(threads, user_api="blas")
    return f"BLAS limited to {threads} thread(s) per search"


def blas_threads(threads: int = 1) -> AbstractContextManager[object]:
    """A context in which numpy's BLAS uses at most ``threads`` threads per call, restored on
    exit; a context that changes nothing when ``OPENBLAS_NUM_THREADS`` is set or threadpoolctl
    is not installed."""
    if "OPENBLAS_NUM_THREADS" in os.environ:
        return nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(threads, user_api="blas")
