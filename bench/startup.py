#!/usr/bin/env python3
"""How long `rag` takes to start, against `python -c "import httpx"` in the same run.

    PYTHONPATH=<checkout> .venv/bin/python bench/startup.py [--runs N] [--keep DIR]

The code measured is the ``rag_assets`` on PYTHONPATH (printed). The script builds the sample
content (``content/``, hashing embedder, an ephemeral Dagster instance) into a temporary
output folder, then runs each command N times as a fresh process, round-robin so that a
change of load hits every command alike, and prints each command's median wall time and CPU time
(user + system), each with its ratio to the baseline's median. The goal (issue 26): `rag --help`, `rag search` and
`rag status` within 3x the baseline. A no-op `rag build` (nothing changed) is timed too, for
the README's figure. The load average is printed before and after: the machine is shared.

Bytecode: the commands may write it (``__pycache__`` beside the sources, as Python does by
default; the untimed warm-up run writes it), whatever ``PYTHONDONTWRITEBYTECODE`` says in the
calling environment, so the figures are those of an installed ``rag`` whose modules Python has
cached. With ``--no-bytecode-cache`` they run with ``PYTHONDONTWRITEBYTECODE=1``: a checkout with
no ``__pycache__`` then compiles every module of rag_assets on every start (about 80 ms of CPU
of `rag status` on the 2-core development machine).
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
    # -P: the folder the command runs in is not put first on sys.path, so the code measured is
    # the rag_assets on PYTHONPATH (else the installed one), as printed, not this checkout's.
    rag = [sys.executable, "-P", "-m", "rag_assets.serve.cli"]
    where = ["--config", str(REPO / "rag.yaml"), "--output-dir", str(out)]
    return {
        'python -c "import httpx"': [sys.executable, "-c", "import httpx"],
        "rag --help": [*rag, "--help"],
        "rag search wireguard": [*rag, "search", "wireguard", *where],
        "rag status": [*rag, "status", *where],
        "rag build (no-op)": [*rag, "build", *where, "--embedder", "hashing"],
    }


def environment(bytecode: bool = True) -> dict[str, str]:
    """The commands' environment; ``bytecode``: whether Python may write its bytecode cache."""
    dropped = ("DAGSTER_HOME", "RAG_CONFIG", "RAG_EMBEDDER", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["RAG_EMBEDDER"] = "hashing"  # no network probe for a key or an Ollama in the figures
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (user + system, from wait4) of one run of ``argv``."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):  # status may exit 1 on an old index; anything else is broken
        sys.exit(f"{' '.join(argv)} exited {code}")
    return elapsed, usage.ru_utime + usage.ru_stime


def measure(out: Path, runs: int, env: dict[str, str]) -> dict[str, list[tuple[float, float]]]:
    cmds = commands(out)
    for argv in cmds.values():  # warm the file cache and the bytecode once, untimed
        timed(argv, env)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            times[name].append(timed(argv, env))
    return times


def report(times: dict[str, list[tuple[float, float]]]) -> None:
    """Medians of wall time and of CPU time, each with its ratio to the baseline's. On a shared
    machine the wall time swings with the load; the CPU time is what the start-up costs."""
    names = list(times)
    wall = {n: statistics.median(w for w, _ in times[n]) for n in names}
    cpu = {n: statistics.median(c for _, c in times[n]) for n in names}
    print(f"{'command':<28} {'wall':>9} {'ratio':>7} {'CPU':>9} {'ratio':>7}")
    for name in names:
        ratios = wall[name] / wall[names[0]], cpu[name] / cpu[names[0]]
        goal = "" if name == names[0] or "build" in name else ("  ok" if max(ratios) <= GOAL else f"  over {GOAL:.0f}x")
        print(
            f"{name:<28} {wall[name] * 1000:6.0f} ms {ratios[0]:6.2f}x {cpu[name] * 1000:6.0f} ms {ratios[1]:6.2f}x{goal}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--keep", type=Path, help="build into this folder and keep it")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="run with PYTHONDONTWRITEBYTECODE=1: modules without bytecode on disk compile on every start",
    )
    args = parser.parse_args()
    print(f"rag_assets from {Path(rag_assets.__file__).parent}; {args.runs} runs each; Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or Path(tmp)
        env = environment(bytecode=not args.no_bytecode_cache)
        print(f"bytecode: {'none written (PYTHONDONTWRITEBYTECODE=1)' if args.no_bytecode_cache else 'cached'}")
        build = [
            sys.executable,
            "-P",
            "-m",
            "rag_assets.serve.cli",
            "build",
            "--config",
            str(REPO / "rag.yaml"),
            "--output-dir",
            str(out),
            "--embedder",
            "hashing",
        ]
        subprocess.run(build, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        times = measure(out, args.runs, env)
        print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(times)


if __name__ == "__main__":
    main()
