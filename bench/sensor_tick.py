#!/usr/bin/env python3
"""One tick of the collection change sensor at 10,000 generated files, timed.

    PYTHONPATH=<checkout> .venv/bin/python bench/sensor_tick.py [--files N] [--collections K] [--keep DIR]

The code measured is the ``rag_assets`` on PYTHONPATH (printed), so the same script times
another checkout (e.g. main's before a change: ``PYTHONPATH=../main``). It generates N
small Markdown files in K collections, builds them once with the hashing embedder (timed,
for scale), then times the sensor's evaluation as the daemon runs it
(``build_sensor_context`` + the sensor) three ways: the first tick without a cursor, a tick
with nothing changed (the steady state, every 30 s by default), and a tick after one file
was edited. The load average is printed beside, as the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Keep bench/ off the path (no bench module may shadow a library's: bench/secrets.py once
# shadowed `secrets`); the code measured comes from PYTHONPATH, so nothing is put in its place.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import dagster as dg

import rag_assets
from rag_assets.config import load_config
from rag_assets.definitions import build_definitions
from rag_assets.defs.runner import run_build
from rag_assets.defs.sensors import build_change_sensor

WORDS = [
    "proxmox",
    "zfs",
    "vlan",
    "bridge",
    "backup",
    "snapshot",
    "pool",
    "dataset",
    "ceph",
    "monitor",
    "kernel",
    "network",
    "storage",
]


def generate(root: Path, files: int, collections: int) -> None:
    """``files`` notes of about 120 words, spread over ``collections`` folders, each unique."""
    for i in range(files):
        folder = root / f"c{i % collections:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        body = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(120))
        (folder / f"note-{i:05d}.md").write_text(f"# Note {i}\n\nmarker {i}. {body}\n")


def tick(sensor, instance, cursor, defs) -> tuple[float, dg.SensorResult]:
    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
    started = time.perf_counter()
    result = sensor(context)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--collections", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="sensor-tick-"))
    print(f"code: {Path(rag_assets.__file__).parent}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    try:
        content = work / "content"
        generate(content, args.files, args.collections)
        cfg = load_config(None, content_dir=content, output_dir=work / "out", embedder="hashing")
        with dg.instance_for_test() as instance:
            started = time.perf_counter()
            outcome = run_build(cfg, instance)
            if not outcome.success:
                raise SystemExit(f"build failed: {outcome.error} {outcome.failed_checks}")
            print(
                f"build of {args.files} files in {args.collections} collections: {time.perf_counter() - started:.1f}s"
            )
            defs = build_definitions(cfg)
            sensor = build_change_sensor(cfg)
            first, result = tick(sensor, instance, None, defs)
            print(f"first tick (no cursor): {first * 1000:.0f} ms, {len(result.run_requests or [])} run request(s)")
            steady, again = tick(sensor, instance, result.cursor, defs)
            print(f"tick, nothing changed: {steady * 1000:.0f} ms, {len(again.run_requests or [])} run request(s)")
            edited = content / f"c{3 % args.collections:02d}" / "note-00003.md"  # note i is in c{i % collections}
            edited.write_text(edited.read_text() + "\none more line\n")
            stamp = time.time() + 2
            os.utime(edited, (stamp, stamp))
            after, changed = tick(sensor, instance, again.cursor, defs)
            print(f"tick after one edit: {after * 1000:.0f} ms, {len(changed.run_requests or [])} run request(s)")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
