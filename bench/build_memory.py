"""Where a `rag build` holds its memory: the build in this process, its RSS sampled every 50 ms
with the innermost rag_assets functions running at that moment.

    PYTHONPATH=$PWD python bench/build_memory.py build --force --content-dir DIR --output-dir OUT \
        --embedder hashing --private-embedder hashing [--config rag.yaml]

Prints the peak RSS, where it was reached, and the highest RSS seen in each function pair
(innermost < its caller), highest first. ``--fixed-clock`` (first argument) pins the build time
and generation name as the tests' ``fixed_clock`` does, so two builds' output folders can be
compared byte for byte. With ``BUILD_MEMORY_SAMPLES=path`` the samples are saved as JSON
([seconds, MB, where], ...). The sampler reads /proc/self/status (Linux).
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import sys
import threading
import time

INTERVAL = 0.05
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def where(frame) -> str:
    """The two innermost rag_assets frames of a stack, as file:function."""
    names = []
    while frame is not None and len(names) < 2:
        path = frame.f_code.co_filename
        if f"{os.sep}rag_assets{os.sep}" in path:
            names.append(f"{os.path.basename(path)}:{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(names) or "-"


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--fixed-clock"]:
        args = args[1:]
        import rag_assets.defs.publish
        import rag_assets.index.generations

        rag_assets.defs.publish.utc_now_iso = lambda: "2026-12-01T12:00:00Z"
        rag_assets.index.generations.new_generation_id = lambda built_at: "20261201T120000Z-fixed"
    samples: list[tuple[float, float, str]] = []
    main_thread = threading.get_ident()
    done = threading.Event()

    def sample() -> None:
        t0 = time.perf_counter()
        while not done.is_set():
            frame = sys._current_frames().get(main_thread)
            at = where(frame)
            del frame  # holding it would keep the build's locals (an open cursor, say) alive
            samples.append((time.perf_counter() - t0, rss_mb(), at))
            time.sleep(INTERVAL)

    threading.Thread(target=sample, daemon=True).start()
    sys.argv = ["rag", *args]
    code = 0
    try:
        runpy.run_module("rag_assets.serve.cli", run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        done.set()
    if not samples:
        return code
    peak = max(samples, key=lambda s: s[1])
    print(
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; "
        f"sampled {peak[1]:.0f} MB at {peak[0]:.1f} s in {peak[2]}",
        file=sys.stderr,
    )
    highest: dict[str, tuple[float, float]] = {}
    for seconds, mb, at in samples:
        if mb > highest.get(at, (0.0, 0.0))[0]:
            highest[at] = (mb, seconds)
    for at, (mb, seconds) in sorted(highest.items(), key=lambda item: -item[1][0])[:20]:
        print(f"{mb:8.0f} MB {seconds:8.1f} s  {at}", file=sys.stderr)
    if os.environ.get("BUILD_MEMORY_SAMPLES"):
        with open(os.environ["BUILD_MEMORY_SAMPLES"], "w") as out:
            json.dump(samples, out)
    return code


if __name__ == "__main__":
    sys.exit(main())
