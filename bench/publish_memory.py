#!/usr/bin/env python3
"""Peak memory of a full build and of a one-paragraph edit, each in a child process, for one
or more checkouts on the same generated corpus (bench/incremental.py's, hashing embedder).

    .venv/bin/python bench/publish_memory.py [--files 10000] [--collections 10] [--work DIR]
                                             [--checkout PATH ...] [--keep-chunks N ...]

For each checkout (default: this one): a copy of the corpus, a full ``rag build`` in-process in
a child (``bench/build_memory.py``, run from that checkout), one paragraph of one file edited,
then an incremental ``rag build`` in another child (``--edits`` times, each a new edit). Prints
each child's wall and CPU time, peak RSS (``ru_maxrss`` from ``os.wait4``) and bytes written
(``/proc/self/io``), and ``uptime`` before and after. ``--keep-chunks``: also
measure each checkout with ``RAG_PUBLISH_KEEP_CHUNKS`` set to these values (0: the publish holds
one collection's records at a time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.incremental import DEFAULT_CORPUS, edit_paragraph, generate_corpus, prose_paragraphs  # noqa: E402

# Runs bench/build_memory.py, then prints the process's I/O counters (/proc/self/io, Linux).
WRAPPER = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
print("IO", open("/proc/self/io").read().replace("\\n", " "), flush=True)
"""


def child(checkout: Path, args: list[str], keep: str | None) -> tuple[float, float, int, dict[str, int]]:
    """Run ``bench/build_memory.py`` of ``checkout`` with ``args``; (wall s, peak RSS MB, exit
    code, I/O counters: ``wchar`` bytes passed to write(), ``write_bytes`` sent to storage)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    if keep is not None:
        env["RAG_PUBLISH_KEEP_CHUNKS"] = keep
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", WRAPPER, str(checkout / "bench" / "build_memory.py"), *args],
        env=env,
        cwd=checkout,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    io = {}
    for line in proc.stdout:
        if line.startswith("IO "):
            io = {k.rstrip(":"): int(v) for k, v in zip(line.split()[1::2], line.split()[2::2], strict=False)}
    _, status, usage = os.wait4(proc.pid, 0)
    io["cpu_ms"] = round((usage.ru_utime + usage.ru_stime) * 1000)  # steadier than wall on a loaded machine
    return time.perf_counter() - started, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), io


def mb(io: dict[str, int]) -> str:
    return (
        f"CPU {io.get('cpu_ms', 0) / 1000:.1f} s, "
        f"wrote {io.get('wchar', 0) / 1e6:.0f} MB ({io.get('write_bytes', 0) / 1e6:.0f} MB to storage)"
    )


def edit_one_file(content: Path, number: int) -> Path:
    """Edit one paragraph of the first file (by path) of the first collection with one."""
    for path in sorted((content / sorted(p.name for p in content.iterdir())[0]).rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        spans = prose_paragraphs(text)
        if spans:
            path.write_text(edit_paragraph(text, spans[len(spans) // 2], number), encoding="utf-8")
            return path
    raise SystemExit("no file with a prose paragraph")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--collections", type=int, default=10)
    parser.add_argument("--work", type=Path, help="work in this folder (kept) instead of a temporary one")
    parser.add_argument("--checkout", type=Path, action="append", help="a checkout to measure (repeatable)")
    parser.add_argument(
        "--edits", type=int, default=1, help="successive one-paragraph edits (the 3rd on: slots synced by diff)"
    )
    parser.add_argument("--keep-chunks", action="append", default=[], help="RAG_PUBLISH_KEEP_CHUNKS values to add")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="publish-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus"
    if not corpus.is_dir():
        generate_corpus(DEFAULT_CORPUS, corpus, args.files, args.collections)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    for checkout in args.checkout or [ROOT]:
        for keep in [None, *args.keep_chunks]:
            label = f"{checkout}" + (f" (RAG_PUBLISH_KEEP_CHUNKS={keep})" if keep is not None else "")
            place = work / (checkout.resolve().name + (f"-keep{keep}" if keep is not None else ""))
            shutil.rmtree(place, ignore_errors=True)
            shutil.copytree(corpus, place / "content")
            config = place / "rag.yaml"
            config.write_text(f"content_dir: {place / 'content'}\noutput_dir: {place / 'out'}\nembedder: hashing\n")
            common = ["build", "--config", str(config), "--embedder", "hashing", "--private-embedder", "hashing"]
            wall, peak, code, io = child(checkout, [*common, "--force"], keep)
            print(f"{label}: full build {wall:.1f} s, peak RSS {peak:.0f} MB, {mb(io)} (exit {code})", flush=True)
            for number in range(1, args.edits + 1):
                edited = edit_one_file(place / "content", number)
                wall, peak, code, io = child(checkout, common, keep)
                print(
                    f"{label}: one-paragraph edit {number} ({edited.relative_to(place / 'content')}) {wall:.1f} s, "
                    f"peak RSS {peak:.0f} MB, {mb(io)} (exit {code})",
                    flush=True,
                )
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
