"""The ``update`` part of bench/scale.py (not a bench of its own): issue 27's goals, measured at
each corpus size in one run, through public entry points only (`rag build`, `rag search`,
`rag status`, `rag check`), so that it measures any publish layout alike.

For each size in --sizes (chunks), a Markdown corpus of about that many chunks over
--collections collections (bench/incremental.py's generator: unique copies of the Hugo docs),
generated once and cached under --cache-dir, then, each step in a child process of its own
(peak RSS = its VmHWM and its children's ``ru_maxrss``), with the hashing embedder and no
DAGSTER_HOME (an ephemeral instance, as a plain `rag build`):

- ``update-build``: a full `rag build` in-process (``rag_assets.serve.cli.main``, the runner
  `rag build` uses) into an empty output folder: wall, the build's CPU seconds, chunks/s
  (chunks from ``rag status --json``), peak RSS.
- ``update-edit``: --edits times, one paragraph of one document of the middle collection edited
  (bench/incremental.py's ``edit_paragraph``: a word replaced, a sentence with a unique token
  added), then `rag build` and `rag search <the new token> --json` in-process until the edited
  document is a hit: the wall time from the write to the hit ("edit -> searchable"), of the
  build and of the search; the bytes the process wrote while it rebuilt (``write_bytes`` and
  ``wchar`` of /proc/self/io, which the search's own writes are kept out of) and the size of
  the files under the output folder that the rebuild created or changed (size, mtime or inode
  differ); the ``PRAGMA quick_check``s the rebuild ran (a spy on the verification record: the
  checks it did not skip, by file); peak RSS after the first rebuild (before any search) and of the whole process.
- `rag status` and a no-op `rag check` as processes, --status-runs times each, alternating: wall
  and CPU (the first run verifies what the edits wrote; the later ones what changed since).

Then a table of every size, with the load average before and after each, and the ratio of
the edit time of the largest size to the smallest (the issue's 1M/10k). ``--update-keep-build``
skips the full build where the output folder holds one made by this bench (its figures, kept
beside the corpus, are reported with "(kept)"): the edits of another version measured on the
same built corpus, without the half hour of a million-chunk build.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"
GENERATOR_VERSION = 1  # bump when the generated corpus or the choice of the edited document changes
SEARCHABLE_WITHIN_S = 120.0  # after the rebuild returns: past this, the edit is not searchable (a failure)


def bench_module(name: str) -> ModuleType:
    """bench/<name>.py, imported by path as ``bench_<name>`` once: bench/ is not a package and
    never on sys.path (a bench module must not shadow a library's)."""
    key = f"bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def incremental() -> ModuleType:
    """bench/incremental.py: its corpus generator, paragraph edit and environment for `rag`."""
    return bench_module("incremental")


# ------------------------------------------------------------------------------ the corpus


def chunks_per_file() -> float:
    """Chunks a generated file makes, on average: one unique copy of every source file chunked
    as the build chunks it (same parser, chunker and default settings)."""
    from rag_assets.config import RagConfig

    inc = incremental()
    with tempfile.TemporaryDirectory(prefix="rag-scale-calibrate-") as tmp:
        content = Path(tmp) / "content"
        n_sources = len(list(inc.iter_collection_files(CORPUS)))
        inc.generate_corpus(CORPUS, content, n_sources, 1)
        cfg = RagConfig(content_dir=content, output_dir=Path(tmp) / "out")
        total = sum(len(inc.document_chunks(cfg, p.relative_to(content).as_posix())) for p in content.rglob("*.md"))
    return total / n_sources


def pick_target(content: Path, collection: str) -> str:
    """The edited document: the first file of ``collection`` (by path) with a prose paragraph
    and 5 to 10 chunks (as bench/incremental.py picks), else the one with most chunks."""
    from rag_assets.config import RagConfig

    inc = incremental()
    cfg = RagConfig(content_dir=content, output_dir=content.parent / "out")
    best: tuple[int, str] | None = None
    for path in sorted((content / collection).rglob("*.md")):
        rel = path.relative_to(content).as_posix()
        if not inc.prose_paragraphs(path.read_text(encoding="utf-8")):
            continue
        n = len(inc.document_chunks(cfg, rel))
        if 5 <= n <= 10:
            return rel
        if best is None or n > best[0]:
            best = (n, rel)
    if best is None:
        raise SystemExit(f"no document with a prose paragraph in {content / collection}")
    return best[1]


def corpus(cache_dir: Path, chunks: int, collections: int, shards: int = 1) -> dict[str, Any]:
    """The cached corpus of about ``chunks`` chunks (generated on first use): its folders, rag.yaml,
    file count and edited document, whose original text is put back first (an edit of an
    interrupted run must not change what the next run measures). ``shards`` > 1 splits every
    collection into that many shards (rag.yaml's ``shards:``), built into an output folder of its own."""
    folder = cache_dir / f"update-{chunks}-c{collections}-v{GENERATOR_VERSION}"
    meta_path = folder / "corpus.json"
    if not meta_path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        files = max(collections, round(chunks / chunks_per_file()))
        partial = folder / "content.partial"
        shutil.rmtree(partial, ignore_errors=True)
        t0 = time.perf_counter()
        incremental().generate_corpus(CORPUS, partial, files, collections)
        content = folder / "content"
        shutil.rmtree(content, ignore_errors=True)
        partial.rename(content)
        target = pick_target(content, f"col{collections // 2:02d}")
        (folder / "target.orig").write_bytes((content / target).read_bytes())
        print(f"  generated {files:,} files in {time.perf_counter() - t0:.0f} s; edited document {target}", flush=True)
        meta_path.write_text(json.dumps({"files": files, "target": target}))
    meta = json.loads(meta_path.read_text())
    # Each shard count builds into its own output folder, with its own rag.yaml.
    output, config = (
        (folder / "out", folder / "rag.yaml")
        if shards == 1
        else (
            folder / f"out-s{shards}",
            folder / f"rag-s{shards}.yaml",
        )
    )
    split = "".join(f"  col{n:02d}: {shards}\n" for n in range(collections)) if shards > 1 else ""
    config.write_text(
        f"content_dir: {folder / 'content'}\noutput_dir: {output}\nembedder: hashing\n"
        + (f"shards:\n{split}" if split else ""),
        encoding="utf-8",
    )
    out = {**meta, "folder": folder, "content": folder / "content", "output": output, "config": config}
    shutil.copyfile(folder / "target.orig", out["content"] / meta["target"])
    return out


# ------------------------------------------------------------------------------ children


def rag_in_process(argv: list[str]) -> tuple[int, str]:
    """``rag ARGV`` in this process (``rag_assets.serve.cli.main``), its stdout captured."""
    from rag_assets.serve import cli

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = cli.main(argv)
    return code, buffer.getvalue()


def part_update_build(args) -> dict:
    """A full `rag build` in-process into an empty output folder."""
    c = corpus(args.cache_dir, args.update_size, args.collections, args.update_shards)
    shutil.rmtree(c["output"], ignore_errors=True)
    cpu0, t0 = own_cpu_s(), time.perf_counter()  # the worker processes' CPU too
    with DescendantsPeak() as workers:
        code, out = rag_in_process(["build", "--config", str(c["config"])])
    wall, build_cpu = time.perf_counter() - t0, own_cpu_s() - cpu0
    (c["folder"] / "build.log").write_text(out)
    if code != 0:
        raise SystemExit(f"rag build exited {code}:\n{out[-3000:]}")
    # What `rag build` said it chunked ("[name] D documents, C chunks, ..." per collection).
    said = sum(int(m.group(1)) for m in re.finditer(r"^\[[^\]]+\] \d+ documents, (\d+) chunks", out, re.M))
    return {"wall_s": wall, "cpu_s": build_cpu, "chunks_said": said, "workers_peak_rss_mb": workers.peak_mb}


class DescendantsPeak:
    """The largest sum of the RSS of this process's descendants (the build's forkserver and
    worker processes) seen while the block runs, sampled every 0.2 s by a thread."""

    def __init__(self) -> None:
        import threading

        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> DescendantsPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak_mb = max(self.peak_mb, descendants_rss_mb())


def process_stats() -> dict[int, list[str]]:
    """Every process's /proc/PID/stat fields after its command name (so field 0 is its state,
    1 its parent's pid, 11-14 utime, stime, cutime, cstime, 21 its RSS in pages)."""
    stats: dict[int, list[str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            stats[int(stat.parent.name)] = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
    return stats


def descendants_rss_mb() -> float:
    """RSS of every descendant of this process, summed, in MB (from /proc)."""
    stats = process_stats()
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, fields in stats.items() if int(fields[1]) in frontier} - mine
        mine |= frontier
    return sum(int(stats[pid][21]) for pid in mine) * os.sysconf("SC_PAGE_SIZE") / 2**20


def own_cpu_s() -> float:
    """This process's CPU seconds (user + system) and its children's: on a shared machine, what
    a step cost whatever the load did to its wall time. The children are the build's worker
    processes (rag_assets/base/work_pool.py), counted through their forkserver, a child of this
    process that lives as long as it does: its own time and that of the workers it reaped."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime + live_children_cpu_s()


def live_children_cpu_s() -> float:
    """CPU seconds of this process's live children and of the children they reaped (from
    /proc: utime, stime, cutime, cstime)."""
    me = os.getpid()
    ticks = sum(sum(int(f) for f in fields[11:15]) for fields in process_stats().values() if int(fields[1]) == me)
    return ticks / os.sysconf("SC_CLK_TCK")


def own_peak_rss_mb() -> float:
    """This process's peak RSS since its exec, in MB: VmHWM of /proc/self/status. Not ru_maxrss,
    which Linux carries across exec: a child started by a big parent would report the parent's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # kB
    raise RuntimeError("no VmHWM in /proc/self/status")


def proc_io() -> dict[str, int]:
    """This process's I/O counters (Linux): write_bytes is what reached the block layer's
    accounting (page cache pages dirtied), wchar what went through write() calls."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return {k: int(v) for k, v in fields.items()}


def files_state(folder: Path) -> dict[str, tuple[int, int, int]]:
    """(size, mtime_ns, inode) of every file under ``folder``, by relative path."""
    out = {}
    for path in folder.rglob("*"):
        with contextlib.suppress(FileNotFoundError):
            st = path.lstat()
            if not path.is_dir():
                out[path.relative_to(folder).as_posix()] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def changed_files(before: dict, after: dict) -> dict[str, int]:
    """Files new or changed (size, mtime or inode) between two ``files_state``s, with their sizes."""
    return {path: state[0] for path, state in after.items() if before.get(path) != state}


def rewritten_files(before: dict, after: dict) -> dict[str, int]:
    """Of ``changed_files``, those written anew (a new path, or a new inode: replaced by a
    rename), with their sizes; the others were changed in place (SQLite pages), where the size
    of the file overstates what was written."""
    return {path: state[0] for path, state in after.items() if path not in before or before[path][2] != state[2]}


def found(search_json: str, target: str, token: str) -> bool:
    """Whether a `rag search --json` result has a hit in the edited document (``collection/slug``:
    the slug is the document's path in its collection, without the extension) whose text holds
    the token of the new sentence (the page's own text or one of its sections')."""
    collection, rest = target.split("/", 1)
    slug = re.sub(r"\.md$", "", rest)
    for hit in json.loads(search_json).get("hits", []):
        texts = [hit.get("text", ""), *(s.get("text", "") for s in hit.get("sections", []))]
        if hit.get("collection") == collection and hit.get("slug") == slug and any(token in t for t in texts):
            return True
    return False


class QuickCheckSpy:
    """Counts the ``PRAGMA quick_check``s a build runs through the verification record
    (``rag_assets.base.verified``), by file name: a check the record skipped is not counted.
    A spy on the public class, installed in this child process only."""

    def __init__(self) -> None:
        from rag_assets.base import verified

        self.by_file: dict[str, int] = {}
        original = verified.VerificationRecord.run
        spy = self

        def run(record, file, check, verify):
            performed = verified.counts.performed
            problem = original(record, file, check, verify)
            if check == "quick_check" and verified.counts.performed > performed:
                spy.by_file[Path(file).name] = spy.by_file.get(Path(file).name, 0) + 1
            return problem

        verified.VerificationRecord.run = run  # type: ignore[method-assign]

    def take(self) -> dict[str, int]:
        """The counts since the last take."""
        taken, self.by_file = self.by_file, {}
        return taken


def one_edit(c: dict, rep: int, spy: QuickCheckSpy | None = None) -> dict:
    """One paragraph of the target edited, `rag build`, then `rag search` for the new sentence's
    token until the document is a hit: wall times, bytes written by the rebuild, changed files."""
    inc = incremental()
    path = c["content"] / c["target"]
    original = (c["folder"] / "target.orig").read_text(encoding="utf-8")
    paragraphs = inc.prose_paragraphs(original)
    token = f"zqx{rep}edit"  # in the sentence edit_paragraph adds
    before, io0 = files_state(c["output"]), proc_io()
    if spy is not None:
        spy.take()  # the searches' checks before this build are not its own
    t0, cpu0 = time.perf_counter(), own_cpu_s()
    path.write_text(inc.edit_paragraph(original, paragraphs[len(paragraphs) // 2], rep), encoding="utf-8")
    code, out = rag_in_process(["build", "--config", str(c["config"])])
    built, build_cpu = time.perf_counter(), own_cpu_s() - cpu0
    quick_checks = spy.take() if spy is not None else {}
    if code != 0:
        raise SystemExit(f"rag build after the edit exited {code}:\n{out[-3000:]}")
    io1, after = proc_io(), files_state(c["output"])
    peak_build = own_peak_rss_mb()
    searches = 0
    while True:  # today the build publishes before it returns; a layout that publishes later is waited for
        searches += 1
        # --min-score 0: whether the index holds the edit, not where relevance calibration puts a
        # one-token query (zqx21edit scored 0.50 against the 0.5 threshold on the 100k corpus).
        code, result = rag_in_process(["search", token, "--json", "--min-score", "0", "--config", str(c["config"])])
        if code == 0 and found(result, c["target"], token):
            break
        if time.perf_counter() - built > SEARCHABLE_WITHIN_S:
            raise SystemExit(f"rag search {token} did not find {c['target']} after the build:\n{result[-2000:]}")
        time.sleep(0.1)
    searchable = time.perf_counter()
    changed, rewritten = changed_files(before, after), rewritten_files(before, after)
    return {
        "searchable_s": searchable - t0,
        "build_s": built - t0,
        "build_cpu_s": build_cpu,
        "quick_checks": quick_checks,
        "search_s": searchable - built,
        "searches": searches,
        "write_bytes": io1["write_bytes"] - io0["write_bytes"],
        "wchar": io1["wchar"] - io0["wchar"],
        "search_write_bytes": proc_io()["write_bytes"] - io1["write_bytes"],
        "changed_files": len(changed),
        "changed_bytes": sum(changed.values()),
        "rewritten_files": len(rewritten),
        "rewritten_bytes": sum(rewritten.values()),
        "largest_changed": sorted(changed.items(), key=lambda kv: -kv[1])[:8],
        "removed_files": len(set(before) - set(after)),
        "peak_rss_mb_after_build": peak_build,
        "build_said": next((line for line in out.splitlines() if line.startswith("[")), ""),
    }


def part_update_edit(args) -> dict:
    """--edits one-paragraph edits of the same document, each made searchable."""
    c = corpus(args.cache_dir, args.update_size, args.collections, args.update_shards)
    if args.update_keep_build:
        # A kept build may hold an earlier run's last edit, which edit 1 would repeat (a no-op
        # build): built back to the corpus as generated first, untimed.
        code, out = rag_in_process(["build", "--config", str(c["config"])])
        if code != 0:
            raise SystemExit(f"rag build of the kept output exited {code}:\n{out[-3000:]}")
    edits, spy = [], QuickCheckSpy()
    for rep in range(1, args.edits + 1):
        edits.append(one_edit(c, rep, spy))
        print(f"  edit {rep}: {json.dumps(edits[-1])}", flush=True)
    return {"edits": edits, "target": c["target"]}


CHILDREN = {"update-build": part_update_build, "update-edit": part_update_edit}


# ------------------------------------------------------------------------------ the driver


def timed_process(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int, str, str]:
    """(wall, CPU seconds, exit code, stdout, stderr) of a process: CPU and exit from ``os.wait4``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        return wall, usage.ru_utime + usage.ru_stime, proc.returncode, *text


def status_and_check(c: dict, runs: int, env: dict[str, str]) -> dict:
    """`rag status` and a no-op `rag check` as processes, ``runs`` times each, alternating; and
    the chunk count from `rag status --json`."""
    rag = [sys.executable, "-m", "rag_assets.serve.cli"]
    out: dict[str, Any] = {"status": [], "check": []}
    for _ in range(runs):
        for name in ("status", "check"):
            wall, cpu, code, text, err = timed_process([*rag, name, "--config", str(c["config"])], env, c["folder"])
            if code != 0:
                raise SystemExit(
                    f"rag {name} exited {code} on the edited, rebuilt corpus:\n{text[-3000:]}{err[-2000:]}"
                )
            out[name].append({"wall_s": wall, "cpu_s": cpu})
    _, _, code, text, _ = timed_process([*rag, "status", "--json", "--config", str(c["config"])], env, c["folder"])
    report = json.loads(text) if code == 0 else {}
    out["chunks"] = report.get("totalChunks") or (report.get("store") or {}).get("chunks")
    return out


def measure_size(args, size: int, run_child) -> dict:
    """Every measure at one corpus size; ``run_child(part, args, extra, env)`` runs a child part."""
    load_before = os.getloadavg()
    print(f"size {size:,} chunks (load average {load_before[0]:.1f})", flush=True)
    c = corpus(args.cache_dir, size, args.collections, args.update_shards)
    env = incremental().clean_env()
    extra = ["--update-size", str(size)]
    built = c["folder"] / f"build-s{args.update_shards}.json"  # the last full build's figures
    if args.update_keep_build and (c["output"] / "data" / "current").exists() and built.is_file():
        # The edits measured on the build already there (another version's edits, the same corpus).
        build = {**json.loads(built.read_text()), "kept": True}
    else:
        build = run_child("update-build", args, extra, env)
        built.write_text(json.dumps(build))
    print(f"  full build: {json.dumps(build)}", flush=True)
    with rag_watch(c, env, args.update_watch) as banner:
        if banner:
            print(f"  {banner}", flush=True)
        edit = run_child("update-edit", args, extra, env)
        checks = status_and_check(c, args.status_runs, env)
    shutil.copyfile(c["folder"] / "target.orig", c["content"] / c["target"])  # the corpus as generated
    chunks = checks.pop("chunks") or build.get("chunks_said")  # `rag status --json`, else the build's own lines
    return {
        "size": size,
        "shards": args.update_shards,
        "files": c["files"],
        "chunks": chunks,
        "target": c["target"],
        "build": {**build, "chunks_per_s": (chunks or 0) / build["wall_s"]},
        "edits": edit["edits"],
        "edit_peak_rss_mb": edit["peak_rss_mb"],
        **checks,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "watch": bool(args.update_watch),
    }


@contextlib.contextmanager
def rag_watch(c: dict, env: dict[str, str], wanted: bool):
    """With ``wanted``: `rag watch` on the corpus while the block runs (its banner, once every
    folder is watched); else nothing (None)."""
    if not wanted:
        yield None
        return
    argv = [sys.executable, "-m", "rag_assets.serve.cli", "watch", "--config", str(c["config"])]
    proc = subprocess.Popen(argv, env=env, cwd=c["folder"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        banner = proc.stdout.readline().strip() if proc.stdout else ""
        if not banner.startswith("Watching"):
            raise SystemExit(f"rag watch did not start: {banner}")
        yield banner
    finally:
        os.killpg(proc.pid, 15)
        proc.communicate(timeout=60)


def column(r: dict) -> dict[str, str]:
    """One size's cells of the table, by row label."""
    edits, mb = r["edits"], 1e6

    def med(key: str) -> float:
        return statistics.median(e[key] for e in edits)

    def runs(checks: list[dict]) -> str:  # the first run verifies what the edits wrote
        rest = [c["wall_s"] for c in checks[1:]] or [checks[0]["wall_s"]]
        return f"{checks[0]['wall_s']:.2f}; {statistics.median(rest):.2f} s"

    build = r["build"]
    return {
        "chunks (files)": f"{r['chunks'] or 0:,} ({r['files']:,})",
        "shards per collection": str(r.get("shards", 1)),
        "full build wall / CPU": ("(kept) " if build.get("kept") else "")
        + f"{build['wall_s']:.1f} s / {build['cpu_s']:.1f} s",
        "full build chunks/s (wall; per CPU s)": f"{build['chunks_per_s']:,.0f}; "
        + (f"{(r['chunks'] or 0) / build['cpu_s']:,.0f}" if build["cpu_s"] else "-"),  # a kept build's may be unknown
        "full build peak RSS (+ workers)": f"{build['peak_rss_mb']:,.0f} MB"
        + (f" (+ {build['workers_peak_rss_mb']:,.0f} MB)" if build.get("workers_peak_rss_mb") else ""),
        "edit -> searchable (median)": f"{med('searchable_s'):.2f} s" + (" (rag watch)" if r.get("watch") else ""),
        "  runs": ", ".join(f"{e['searchable_s']:.2f}" for e in edits),
        "  of which rag build / search": f"{med('build_s'):.2f} / {med('search_s'):.2f} s",
        "  rag build CPU (median; runs)": f"{med('build_cpu_s'):.2f} s; "
        + ", ".join(f"{e['build_cpu_s']:.2f}" for e in edits),
        "  quick_checks per rag build (runs)": "; ".join(str(sum(e.get("quick_checks", {}).values())) for e in edits),
        "edit write_bytes / wchar": f"{med('write_bytes') / mb:,.1f} / {med('wchar') / mb:,.1f} MB",
        "edit new/changed files": f"{med('changed_bytes') / mb:,.1f} MB in {med('changed_files'):.0f}",
        "  of which written anew": f"{med('rewritten_bytes') / mb:,.1f} MB in {med('rewritten_files'):.0f}",
        "edit peak RSS build / +search": f"{edits[0]['peak_rss_mb_after_build']:,.0f} / {r['edit_peak_rss_mb']:,.0f} MB",
        "rag status wall (first; median)": runs(r["status"]),
        "rag check wall (first; median)": runs(r["check"]),
        "load average before / after": f"{r['load_before'][0]:.1f} / {r['load_after'][0]:.1f}",
    }


def print_table(results: list[dict]) -> None:
    """The update-time curve and the goals' figures, one column per size; the ratio of the
    edit time of the largest size to the smallest."""
    columns = [column(r) for r in results]
    width = max(len(label) for label in columns[0]) + 2
    print("\n" + "".ljust(width) + "".join(f"{r['size']:>28,}" for r in results))
    for label in columns[0]:
        print(label.ljust(width) + "".join(f"{c[label]:>28}" for c in columns))
    if len(results) > 1:
        small, large = (statistics.median(e["searchable_s"] for e in r["edits"]) for r in (results[0], results[-1]))
        print(f"\nedit -> searchable, {results[-1]['size']:,} / {results[0]['size']:,} chunks: {large / small:.2f}x")
    for r in results:
        print(f"largest files the last edit wrote at {r['size']:,}: {r['edits'][-1]['largest_changed']}")


def run_update(args, run_child) -> list[dict]:
    """The update part over every --sizes, smallest first; results also saved as JSON in --cache-dir."""
    results = []
    for size in sorted(args.sizes):
        results.append(measure_size(args, size, run_child))
        (args.cache_dir / "update-results.json").write_text(json.dumps(results, indent=1))
    print_table(results)
    return results
