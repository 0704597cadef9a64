"""A publisher for the kill tests: publishes generations in a loop until it is killed.

``python -m rag_assets_tests.publish_loop OUTPUT_DIR RECORDS.pkl`` loads pickled embedded
collections and publishes a different subset of them at every turn, printing
``PUBLISH <n>`` (flushed) just before each publish and ``DONE <n> <seconds>`` after it, so
that the test can aim its kill at a publish step by this process's own timing.
"""

from __future__ import annotations

import itertools
import pickle
import sys
import time
from pathlib import Path

from rag_assets.config import RagConfig
from rag_assets.pipeline import publish_all, utc_now_iso


def variants(collections: list) -> list[list]:
    """Subsets that differ in chunk IDs and counts, so a mix of two would show."""
    return [collections, collections[1:], collections[:-1]]


def main(output_dir: str, records: str) -> None:
    collections = pickle.loads(Path(records).read_bytes())
    cfg = RagConfig(content_dir=Path(output_dir) / "content", output_dir=Path(output_dir))
    subsets = variants(collections)
    for turn in itertools.count():
        print(f"PUBLISH {turn}", flush=True)
        started = time.perf_counter()
        publish_all(subsets[turn % len(subsets)], cfg, utc_now_iso(), full_build=True)
        print(f"DONE {turn} {time.perf_counter() - started:.4f}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
