#!/usr/bin/env python3
"""How long `rag` takes to start, against `python -c "import httpx"` in the same run.

    PYTHONPATH=<checkout> .venv/bin/python bench/startup.py [--runs N] [--keep DIR]

The code measured is the ``rag_assets`` on PYTHONPATH (printed). The script builds the sample
content (``content/``, hashing embedder, an ephemeral Dagster instance) into a temporary
output folder, then runs each command N times as a fresh process, round-robin so that a
change of load hits every command alike, and prints each command's median wall time and its
ratio to the baseline's median. The goal (issue 26): `rag --help`, `rag search` and
`rag status` within 3x the baseline. A no-op `rag build` (nothing changed) is timed too, for
the README's figure. The load average is printed before and after: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# This folder holds secrets.py (the detector bench), which would shadow the standard library
# module; the code measured comes from PYTHONPATH, so nothing is put in its place.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import rag_assets

REPO = Path(__file__).resolve().parent.parent
GOAL = 3.0


def commands(out: Path) -> dict[str, list[str]]:
    """Name -> argv. Every `rag` command reads the repository's rag.yaml and the built sample."""
    rag = [sys.executable, "-m", "rag_assets.serve.cli"]
    where = ["--config", str(REPO / "rag.yaml"), "--output-dir", str(out)]
    return {
        'python -c "import httpx"': [sys.executable, "-c", "import httpx"],
        "rag --help": [*rag, "--help"],
        "rag search wireguard": [*rag, "search", "wireguard", *where],
        "rag status": [*rag, "status", *where],
        "rag build (no-op)": [*rag, "build", *where, "--embedder", "hashing"],
    }


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "RAG_CONFIG", "RAG_EMBEDDER")}
    env["RAG_EMBEDDER"] = "hashing"  # no network probe for a key or an Ollama in the figures
    return env


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):  # status may exit 1 on an old index; anything else is broken
        sys.exit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed


def measure(out: Path, runs: int) -> dict[str, list[float]]:
    env = environment()
    cmds = commands(out)
    for argv in cmds.values():  # warm the file cache and the bytecode once, untimed
        timed(argv, env)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            times[name].append(timed(argv, env))
    return times


def report(times: dict[str, list[float]]) -> None:
    names = list(times)
    base = statistics.median(times[names[0]])
    print(f"{'command':<28} {'median':>9} {'min':>9} {'ratio':>7}")
    for name in names:
        med = statistics.median(times[name])
        ratio = med / base
        goal = "" if name == names[0] or "build" in name else ("  ok" if ratio <= GOAL else f"  over {GOAL:.0f}x")
        print(f"{name:<28} {med * 1000:7.0f} ms {min(times[name]) * 1000:6.0f} ms {ratio:6.2f}x{goal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", type=Path, help="build into this folder and keep it")
    args = parser.parse_args()
    print(f"rag_assets from {Path(rag_assets.__file__).parent}; {args.runs} runs each; Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        build = [sys.executable, "-m", "rag_assets.serve.cli", "build", "--config", str(REPO / "rag.yaml"),
                 "--output-dir", str(out), "--embedder", "hashing"]
        subprocess.run(build, env=environment(), cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        times = measure(out, args.runs)
        print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(times)


if __name__ == "__main__":
    main()
