"""The build's worker processes (rag_assets/base/work_pool.py): the parse and chunk steps spread
their new and changed files over the cores and make exactly what one process makes.

Real processes (a forkserver and its workers), real files, and one real `rag build` in-process
whose published segments (named by their content) are compared with a build in one process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag_assets.base import work_pool
from rag_assets.base.work_pool import WorkPool, cpu_cores, effective_workers
from rag_assets.config.settings import ChunkingParams
from rag_assets.ingest.parsing import parse_collection
from rag_assets.pipeline import chunk_collection
from rag_assets.serve.cli import main


def pid_of(_: object) -> int:
    return os.getpid()


def fails_on_seven(n: int) -> int:
    if n == 7:
        raise ValueError("seven")
    return n * 2


def test_enough_items_go_to_other_processes_in_order() -> None:
    items = list(range(work_pool.MIN_ITEMS * 2))
    with WorkPool(2) as pool:
        pids = pool.map(pid_of, items)
        assert pool.started
        doubled = pool.map(fails_on_seven, [n for n in items if n != 7])
        assert pool.parallel_items == 2 * len(items) - 1
        assert pool.processes(since=0) == 2 and pool.processes(since=pool.parallel_items) == 1
    assert os.getpid() not in pids and len(set(pids)) <= 2
    assert doubled == [n * 2 for n in items if n != 7]


def test_few_items_or_one_worker_stay_in_this_process() -> None:
    few = list(range(work_pool.MIN_ITEMS - 1))
    with WorkPool(2) as pool:
        assert set(pool.map(pid_of, few)) == {os.getpid()}
        assert pool.parallel_items == 0 and not pool.started
    with WorkPool(1) as pool:
        assert set(pool.map(pid_of, list(range(work_pool.MIN_ITEMS * 2)))) == {os.getpid()}


def test_a_workers_error_is_raised_here() -> None:
    with WorkPool(2) as pool, pytest.raises(ValueError, match="seven"):
        pool.map(fails_on_seven, list(range(work_pool.MIN_ITEMS)))


def write_program(script: Path, *lines: str) -> dict[str, str]:
    """Write a Python program of ``lines``; the environment that runs it with this checkout."""
    script.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def test_the_workers_do_not_run_the_main_program_again(tmp_path: Path) -> None:
    """A worker would run the parent's main script again under another name (the `rag` script,
    Dagster's CLI, a script with side effects), or die on a ``<stdin>`` it cannot find."""
    marker = tmp_path / "runs.txt"
    script = tmp_path / "main_script.py"
    env = write_program(
        script,
        "import os",
        f"open({str(marker)!r}, 'a').write(f'{{os.getpid()}}\\n')",
        "from rag_assets.base.work_pool import MIN_ITEMS, WorkPool",
        "if __name__ == '__main__':",
        "    with WorkPool(2) as pool:",
        "        pool.map(abs, list(range(MIN_ITEMS)))",
        "        print(pool.parallel_items)",
    )
    for source in ("file", "stdin"):
        argv = [sys.executable, str(script)] if source == "file" else [sys.executable, "-"]
        stdin = None if source == "file" else script.read_text(encoding="utf-8")
        run = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=120)
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == str(work_pool.MIN_ITEMS)
    assert len(marker.read_text().splitlines()) == 2  # once per program, never in a worker


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_the_workers_end_when_the_build_is_killed(tmp_path: Path) -> None:
    """SIGKILL (the OOM killer) gives the workers no word: each watches its parent and ends, rather
    than waiting for ever on a result pipe no one reads (which kept the build's stdout open)."""
    script = tmp_path / "killed.py"
    env = write_program(
        script,
        "from rag_assets.base.work_pool import MIN_ITEMS, WorkPool",
        "from rag_assets_tests.test_work_pool import pid_of, slow",
        "with WorkPool(2) as pool:",
        "    print(*sorted(set(pool.map(pid_of, list(range(MIN_ITEMS))))), flush=True)",
        "    pool.map(slow, list(range(MIN_ITEMS * 10)))",
    )
    build = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    assert build.stdout is not None
    workers = [int(pid) for pid in build.stdout.readline().split()]
    assert workers and all(alive(pid) for pid in workers)
    time.sleep(0.5)  # the slow map under way
    build.send_signal(signal.SIGKILL)
    build.wait()
    deadline = time.monotonic() + 30  # only against a hang: they end within a second
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers)


def slow(_: object) -> bytes:
    time.sleep(0.05)
    return b"x" * 100_000


def test_zero_workers_means_one_per_core() -> None:
    assert effective_workers(0) == cpu_cores() >= 1
    assert effective_workers(3) == 3


def write_collection(root: Path, files: int) -> None:
    """``files`` notes of several chunks each, plus what the parser must skip or refuse, spread
    over folders: an empty file, a binary one, a broken frontmatter and two files of one slug."""
    for n in range(files):
        folder = root / "docs" / f"part{n % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        words = " ".join(f"word{(n * 31 + i) % 997}" for i in range(300 + (n % 5) * 200))
        code = "```python\nprint('x')\n```\n" if n % 3 == 0 else ""
        links = f"See [[note{(n + 1) % files:04d}]] and #tag{n % 3}.\n\n> [!note] A callout\n> inside\n\n"
        (folder / f"note{n:04d}.md").write_text(
            f"---\ntitle: Note {n}\ntags: [t{n % 4}]\n---\n# Heading {n}\n\n{links}{words}\n\n{code}## More\n\n{words}\n",
            encoding="utf-8",
        )
    (root / "docs" / "empty.md").write_text("", encoding="utf-8")
    (root / "docs" / "binary.md").write_bytes(b"\0\1\2 not text")
    (root / "docs" / "broken.md").write_text("---\ntitle: [unclosed\n---\nbody\n", encoding="utf-8")
    (root / "docs" / "twin.md").write_text("# Twin\n\nfirst\n", encoding="utf-8")
    (root / "docs" / "twin.markdown").write_text("# Twin\n\nsecond\n", encoding="utf-8")


def test_parse_and_chunk_in_workers_make_what_one_process_makes(tmp_path: Path) -> None:
    write_collection(tmp_path, work_pool.MIN_ITEMS + 60)
    params = ChunkingParams()
    alone = parse_collection(tmp_path, "docs", "hash")
    with WorkPool(2) as pool:
        spread = parse_collection(tmp_path, "docs", "hash", pool=pool)
        assert pool.parallel_items == len(alone.documents) + 4  # every listed file: the documents, the four skipped
        assert spread == alone
        assert {s.path for s in spread.skipped} >= {"docs/empty.md", "docs/binary.md", "docs/broken.md"}
        chunked_there = chunk_collection(spread, params, pool=pool)
        # As vault notes (their Obsidian syntax read: wikilinks, tags, callouts), as a vault's build parses them.
        notes = parse_collection(tmp_path, "docs", "hash", obsidian=True, pool=pool)
        assert notes == parse_collection(tmp_path, "docs", "hash", obsidian=True)
    chunked_here = chunk_collection(alone, params)
    assert chunked_there == chunked_here and len(chunked_here.chunks) > len(alone.documents)


def test_a_build_with_workers_publishes_the_segments_of_a_build_without(tmp_path: Path, monkeypatch, capsys) -> None:
    content = tmp_path / "content"
    write_collection(content, 60)
    monkeypatch.setattr(work_pool, "MIN_ITEMS", 10)  # the sample is small: spread it all the same
    started: list[int] = []  # per pool closed: its workers if it started them, else 0
    real_close = WorkPool.close

    def recorded_close(self: WorkPool) -> None:
        started.append(self.workers if self.started else 0)
        real_close(self)

    monkeypatch.setattr(WorkPool, "close", recorded_close)
    segments = {}
    for workers in ("2", "1"):
        out = tmp_path / f"out{workers}"
        config = tmp_path / f"rag{workers}.yaml"
        config.write_text(f"content_dir: {content}\noutput_dir: {out}\nembedder: hashing\nworkers: {workers}\n")
        assert main(["build", "--config", str(config)]) == 0
        capsys.readouterr()
        segments[workers] = sorted(p.name for p in (out / "data" / "segments").iterdir() if "ledger" not in p.name)
    assert started == [2, 2, 0, 0]  # the parse and chunk steps of each build: workers in the first only
    assert segments["2"] == segments["1"] and segments["1"]
