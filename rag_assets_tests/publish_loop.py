"""A publisher for the kill tests: forks processes that publish generations in a loop until killed.

``python -m rag_assets_tests.publish_loop OUTPUT_DIR RECORDS.pkl`` imports the pipeline and loads
the pickled embedded collections once. For every line ``START`` on its stdin it forks a
publisher, which prints ``PUBLISHER <pid>`` and then publishes a different subset of the
collections at every turn, printing ``PUBLISH <n>`` (flushed) just before each publish and
``DONE <n> <seconds>`` after it, so that the test can aim its kill at a publish step by the
publisher's own timing. The test kills the publisher by its pid; this process reaps it and
prints ``ENDED <pid> <signal>`` (-1 when it was not killed by a signal).

Forking from a process that has already imported everything spares each kill a Python start-up
and the pipeline's imports (about 2 s each on a loaded machine, 60 times per test); the
publisher is still a process of its own, killed with SIGKILL in the middle of its writes.
"""

from __future__ import annotations

import itertools
import os
import pickle
import sys
import time
from pathlib import Path

from rag_assets.config import RagConfig
from rag_assets.pipeline import utc_now_iso
from rag_assets.publishing import publish_all


def variants(collections: list) -> list[list]:
    """Subsets that differ in chunk IDs and counts, so a mix of two would show."""
    return [collections, collections[1:], collections[:-1]]


def publish_forever(cfg: RagConfig, subsets: list[list]) -> None:
    """The publisher's loop (in the forked process): runs until it is killed."""
    print(f"PUBLISHER {os.getpid()}", flush=True)
    for turn in itertools.count():
        print(f"PUBLISH {turn}", flush=True)
        started = time.perf_counter()
        publish_all(subsets[turn % len(subsets)], cfg, utc_now_iso(), full_build=True)
        print(f"DONE {turn} {time.perf_counter() - started:.4f}", flush=True)


def start_publisher(cfg: RagConfig, subsets: list[list]) -> None:
    """Fork one publisher and wait until it ends (the test kills it), then say how it ended."""
    sys.stdout.flush()  # the child must not inherit and repeat buffered lines
    pid = os.fork()
    if pid == 0:
        try:
            publish_forever(cfg, subsets)
        finally:
            os._exit(1)  # never return into the parent's command loop
    _, status = os.waitpid(pid, 0)
    killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1
    print(f"ENDED {pid} {killed_by}", flush=True)


def main(output_dir: str, records: str) -> None:
    collections = pickle.loads(Path(records).read_bytes())
    cfg = RagConfig(content_dir=Path(output_dir) / "content", output_dir=Path(output_dir))
    subsets = variants(collections)
    for line in sys.stdin:
        if line.strip() == "START":
            start_publisher(cfg, subsets)


if __name__ == "__main__":
    main(*sys.argv[1:3])
