#!/usr/bin/env python3
"""Incremental builds of a 10,000-file corpus with the hashing embedder; prints PASS/FAIL per goal.

    .venv/bin/python bench/incremental.py [--corpus DIR] [--files N] [--collections K]
                                          [--repeat N] [--full-repeat N] [--no-profile] [--keep DIR]

Generates a corpus in a temporary folder from copies of the Hugo docs (each copy made
unique by marker lines, so that nearly no two chunks share a text; the output counts
the duplicates), then measures:

- the full build (``run_build`` on an ephemeral instance, as ``bench/build.py`` does);
- the no-op check: ``rag check`` as a subprocess (interpreter start-up included), the
  in-process ``detect_changes(cfg, save_stat_cache=False)``, and a no-op ``rag build``
  subprocess;
- the one-file update: one paragraph of one document edited, then ``rag build``
  (incremental, the default) in-process through ``rag_assets.serve.cli.main``; the chunks
  embedded (run metadata and a counting wrapper around the embedder), the chunks of the
  edited document and those holding the changed words; the same update as a fresh
  ``rag build`` process; and where the time goes, per Dagster run and step (from the
  run's event log) and, once, per function (cProfile).

Medians over ``--repeat`` repetitions for the cheap measurements; the full build runs
``--full-repeat`` times, each into a fresh output folder. Goals: no-op check < 1 s; a
one-file update < 2% of the full build; a one-paragraph edit embeds at most the chunks
holding the changed words plus their neighbours.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Before any library import: a bench module must never shadow a library's module (bench/secrets.py
# once shadowed the standard library's `secrets` for Dagster), so bench/ leaves the path first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from rag_assets.config import RagConfig, load_config  # noqa: E402
from rag_assets.defs import runner  # noqa: E402
from rag_assets.embed import EmbedderSettings, select_embedder  # noqa: E402
from rag_assets.index import manifest as manifest_io  # noqa: E402
from rag_assets.index.freshness import detect_changes  # noqa: E402
from rag_assets.index.integrity import output_damage, verification_record  # noqa: E402
from rag_assets.ingest.chunking import chunk_document  # noqa: E402
from rag_assets.ingest.parsing import parse_markdown_file  # noqa: E402
from rag_assets.ingest.sources import iter_collection_files  # noqa: E402
from rag_assets.ingest.stat_cache import part_files  # noqa: E402
from rag_assets.records import Chunk  # noqa: E402
from rag_assets.serve import cli  # noqa: E402
from rag_assets.serve import cli_build as build_command  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"
PYTHON = sys.executable

NOOP_CHECK_GOAL_S = 1.0
UPDATE_SHARE_GOAL = 0.02
MARK_EVERY_WORDS = 100  # a marker line at the first paragraph break after this many words
_FRONTMATTER = re.compile(r"\A---\n.*?\n---[ \t]*\n", re.DOTALL)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_NOT_PROSE = re.compile(r"^(#|\||[-*+>] |\d+[.)] |\s|\{\{|<|`{3}|~{3}|!\[|\[\^)")


# --- corpus -------------------------------------------------------------------------------------


def unique_copy(text: str, tag: str) -> str:
    """``text`` with a line naming ``tag`` after the frontmatter and at a paragraph break
    every ~100 words (inside code fences too), so that nearly every chunk of every copy differs
    (a long stretch without a blank line, such as a big table, can still repeat)."""
    match = _FRONTMATTER.match(text)
    head, body = (text[: match.end()], text[match.end() :]) if match else ("", text)
    out = [f"Copy note: {tag}.", ""]
    words, part = 0, 1
    for line in body.split("\n"):
        out.append(line)
        words += len(line.split())
        if not line.strip() and words >= MARK_EVERY_WORDS:
            out += [f"({tag}, part {part})", ""]
            words, part = 0, part + 1
    return head + "\n".join(out)


def generate_corpus(source: Path, content: Path, n_files: int, n_collections: int) -> dict[str, int]:
    """``n_files`` unique copies of the source files, ``n_files / n_collections`` per collection.

    File ``g`` is source file ``g % len(sources)``, copy number ``g // len(sources)``, written
    as ``colKK/<source path>-copyN.md`` (the source tree is kept under each collection)."""
    sources = list(iter_collection_files(source))
    if not sources:
        raise SystemExit(f"no files in {source}")
    per_collection = -(-n_files // n_collections)
    sizes: dict[str, int] = defaultdict(int)
    made_dirs: set[Path] = set()
    for g in range(n_files):
        src = sources[g % len(sources)]
        copy = g // len(sources)
        collection = f"col{g // per_collection:02d}"
        rel = src.relative_to(source)
        dest = content / collection / rel.parent / f"{rel.stem}-copy{copy}{rel.suffix}"
        if dest.parent not in made_dirs:
            dest.parent.mkdir(parents=True, exist_ok=True)
            made_dirs.add(dest.parent)
        tag = f"copy {copy} of {rel.as_posix()}, variant v{g:05d}"
        dest.write_text(unique_copy(src.read_text(encoding="utf-8"), tag), encoding="utf-8")
        sizes[collection] += 1
    return dict(sizes)


# --- Dagster run breakdown ----------------------------------------------------------------------


@dataclass
class StepTiming:
    step: str
    total: float
    load: float  # STEP_START -> last STEP_INPUT: the IO manager loading the inputs
    compute: float  # -> first STEP_OUTPUT: the asset or check function
    finish: float  # -> STEP_SUCCESS: storing the output (pickle), metadata, checks


@dataclass
class RunTiming:
    job: str
    partition: str | None
    start: float
    end: float
    steps: list[StepTiming] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return self.end - self.start

    @property
    def overhead(self) -> float:
        return self.wall - sum(s.total for s in self.steps)


def run_timings(instance: dg.DagsterInstance) -> list[RunTiming]:
    """Every run of the instance, oldest first, with per-step phases from its event log."""
    timings = []
    for run in reversed(instance.get_runs()):
        stats = instance.get_run_stats(run.run_id)
        per_step: dict[str, list[tuple[float, str]]] = defaultdict(list)
        for entry in instance.all_logs(run.run_id):
            if entry.dagster_event is not None and entry.step_key:
                per_step[entry.step_key].append((entry.timestamp, entry.dagster_event.event_type_value))
        steps = []
        for key, events in per_step.items():
            times = {kind: [t for t, k in events if k == kind] for kind in {k for _, k in events}}
            if "STEP_START" not in times or "STEP_SUCCESS" not in times:
                continue
            start, end = times["STEP_START"][0], times["STEP_SUCCESS"][-1]
            inputs_done = max(times.get("STEP_INPUT", [start]))
            output = min(times.get("STEP_OUTPUT", [end]))
            steps.append(StepTiming(key, end - start, inputs_done - start, output - inputs_done, end - output))
        steps.sort(key=lambda s: min(t for t, k in per_step[s.step] if k == "STEP_START"))
        timings.append(
            RunTiming(run.job_name, run.tags.get("dagster/partition"), stats.start_time, stats.end_time, steps)
        )
    return timings


# --- running the CLI in-process with an instance we can inspect ---------------------------------


@dataclass
class CliBuild:
    wall: float
    exit_code: int
    stdout: str
    started: float  # time.time() at the call
    detect_seconds: float
    run_build_start: float
    run_build_end: float
    outcome: runner.BuildOutcome | None
    runs: list[RunTiming]
    embedded_texts: list[str]
    embed_calls: int
    bytes_written: int = 0  # by this process during the build (write calls: /proc/self/io wchar)


def bytes_written_so_far() -> int:
    """The bytes this process has passed to write calls (files, SQLite and pipes alike); 0 where
    /proc is not there."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


@contextlib.contextmanager
def instrumented_cli(embedder_class: type) -> Iterator[dict[str, Any]]:
    """Patch the runner so `rag build` uses an ephemeral instance we keep, time its pieces,
    and count the texts the hashing embedder is asked to embed."""
    probe: dict[str, Any] = {"texts": [], "calls": 0, "detect": 0.0}
    instance = dg.DagsterInstance.ephemeral()
    probe["instance"] = instance
    original_run_build = runner.run_build
    original_cli_instance = runner.cli_instance
    original_detect = build_command.detect_changes
    original_embed = embedder_class.embed_documents

    @contextlib.contextmanager
    def kept_instance() -> Iterator[dg.DagsterInstance]:
        yield instance  # disposed below, after its event log has been read

    def timed_run_build(*args: Any, **kwargs: Any) -> runner.BuildOutcome:
        probe["run_build_start"] = time.time()
        outcome = original_run_build(*args, **kwargs)
        probe["run_build_end"] = time.time()
        probe["outcome"] = outcome
        return outcome

    def timed_detect(*args: Any, **kwargs: Any):
        t0 = time.perf_counter()
        try:
            return original_detect(*args, **kwargs)
        finally:
            probe["detect"] += time.perf_counter() - t0

    def counting_embed(self: Any, texts, *args: Any, **kwargs: Any):
        probe["calls"] += 1
        probe["texts"].extend(texts)
        return original_embed(self, texts, *args, **kwargs)

    runner.run_build, runner.cli_instance, build_command.detect_changes = timed_run_build, kept_instance, timed_detect
    embedder_class.embed_documents = counting_embed
    try:
        yield probe
    finally:
        runner.run_build, runner.cli_instance, build_command.detect_changes = (
            original_run_build,
            original_cli_instance,
            original_detect,
        )
        embedder_class.embed_documents = original_embed
        instance.dispose()


def cli_build(config_path: Path, profiler: cProfile.Profile | None = None) -> CliBuild:
    """`rag build --config FILE` in-process (incremental, the default), instrumented."""
    with instrumented_cli(type(select_embedder(EmbedderSettings(name=EMBEDDER_NAME[0])).embedder)) as probe:
        buffer = io.StringIO()
        started = time.time()
        written = bytes_written_so_far()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(buffer):
            if profiler:
                profiler.enable()
            code = cli.main(["build", "--config", str(config_path)])
            if profiler:
                profiler.disable()
        wall = time.perf_counter() - t0
        written = bytes_written_so_far() - written
        runs = run_timings(probe["instance"])
    return CliBuild(
        wall=wall,
        exit_code=code,
        stdout=buffer.getvalue(),
        started=started,
        detect_seconds=probe["detect"],
        run_build_start=probe.get("run_build_start", started),
        run_build_end=probe.get("run_build_end", started),
        outcome=probe.get("outcome"),
        runs=runs,
        embedded_texts=list(probe["texts"]),
        embed_calls=probe["calls"],
        bytes_written=written,
    )


# --- the one-paragraph edit ---------------------------------------------------------------------


def pick_document(cfg: RagConfig, collection: str) -> str:
    """A document of ``collection`` with several chunks (5 to 10; the most, then by path)."""
    documents = (manifest_io.read_manifest(cfg.manifest_path) or {}).get("documents", {})
    candidates = [
        (d["chunkCount"], d["path"])
        for d in documents.values()
        if d["path"].startswith(f"{collection}/") and 5 <= d["chunkCount"] <= 10
    ]
    if not candidates:
        raise SystemExit(f"no document with 5 to 10 chunks in {collection}")
    return sorted(candidates, key=lambda c: (-c[0], c[1]))[0][1]


def prose_paragraphs(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of plain prose paragraphs of the body, outside code fences."""
    match = _FRONTMATTER.match(text)
    offset = match.end() if match else 0
    spans = []
    fence: str | None = None
    para_start: int | None = None
    pos = offset
    for line in text[offset:].split("\n"):
        end = pos + len(line)
        opener = _FENCE.match(line)
        if fence is not None:
            if opener and opener.group(1)[0] == fence[0] and len(opener.group(1)) >= len(fence):
                fence = None
        elif opener:
            fence = opener.group(1)
            para_start = None
        elif not line.strip():
            para_start = None
        elif para_start is None and not _NOT_PROSE.match(line) and not line.startswith(("Copy note:", "(copy ")):
            para_start = pos
            spans.append([pos, end])
        elif para_start is not None:
            spans[-1][1] = end
        pos = end + 1
    return [(a, b) for a, b in spans if len(text[a:b].split()) >= 25]


def edit_paragraph(original: str, paragraph: tuple[int, int], rep: int) -> str:
    """``original`` with one paragraph edited: its middle word replaced and a sentence added."""
    start, end = paragraph
    para = original[start:end]
    words = list(re.finditer(r"\S+", para))
    mid = words[len(words) // 2]
    edited = para[: mid.start()] + f"zqx{rep}swap" + para[mid.end() :]
    edited += f" This sentence was added by edit zqx{rep}edit of the incremental benchmark."
    return original[:start] + edited + original[end:]


def document_chunks(cfg: RagConfig, rel: str) -> list[Chunk]:
    """The chunks the pipeline makes of one file now (same parser, chunker and settings)."""
    collection = rel.split("/", 1)[0]
    doc = parse_markdown_file(cfg.content_dir / rel, root=cfg.content_dir / collection, collection=collection)
    return chunk_document(doc, cfg.chunking)


@dataclass
class UpdateResult:
    build: CliBuild
    chunks: int
    with_changed_words: int
    allowed: int  # chunks with the changed words plus their neighbours
    texts_changed: int  # new chunk texts not among the previous version's
    embedded_indices: list[int]
    cache_misses: int
    batches: int


def one_file_update(
    cfg: RagConfig, config_path: Path, rel: str, original: str, rep: int, profiler: cProfile.Profile | None = None
) -> UpdateResult:
    path = cfg.content_dir / rel
    before = [c.text for c in document_chunks(cfg, rel)]
    paragraphs = prose_paragraphs(original)
    if not paragraphs:
        raise SystemExit(f"no prose paragraph of 25+ words in {rel}")
    path.write_text(edit_paragraph(original, paragraphs[len(paragraphs) // 2], rep), encoding="utf-8")
    build = cli_build(config_path, profiler)
    if build.exit_code != 0 or build.outcome is None or not build.outcome.success:
        raise SystemExit(f"incremental build failed (exit {build.exit_code}):\n{build.stdout}")
    after = document_chunks(cfg, rel)
    marker = f"zqx{rep}"
    hit = {c.chunk_index for c in after if marker in c.text}
    allowed = {j for i in hit for j in (i - 1, i, i + 1) if 0 <= j < len(after)}
    old_texts = set(before)
    by_text = {c.text: c.chunk_index for c in after}
    meta = [c.metadata["embeddings"] for c in build.outcome.collections]
    return UpdateResult(
        build=build,
        chunks=len(after),
        with_changed_words=len(hit),
        allowed=len(allowed),
        texts_changed=sum(1 for c in after if c.text not in old_texts),
        embedded_indices=sorted(by_text.get(t, -1) for t in build.embedded_texts),
        cache_misses=sum(m["cache_misses"] for m in meta),
        batches=sum(m["batches"] for m in meta),
    )


# --- subprocess timings -------------------------------------------------------------------------


# The embedder under test, set once from --embedder (the subprocess and config helpers read it).
EMBEDDER_NAME = ["hashing"]


def clean_env(checkout: Path = ROOT) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAG_") and k != "DAGSTER_HOME"}
    env["RAG_EMBEDDER"] = EMBEDDER_NAME[0]
    env["PYTHONPATH"] = str(checkout)
    return env


def timed_subprocess(args: list[str], cwd: Path, expect: int = 0, checkout: Path = ROOT) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=clean_env(checkout), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != expect:
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return wall, done.stdout.strip()


# --- reporting ----------------------------------------------------------------------------------


def fmt_runs(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def step_label(step: str) -> str:
    return step.replace("public_index_", "check ").replace("rag_manifest_", "check ").replace("embeddings_", "check ")


def print_update_breakdown(builds: list[CliBuild]) -> None:
    """Medians over the repetitions: CLI pieces, each Dagster run, each step and its phases."""
    med = statistics.median
    print("\nWhere the one-file update's time goes (medians over the repetitions, seconds)")
    rows: list[tuple[str, float, str]] = []
    rows.append(("rag build, in-process total", med(b.wall for b in builds), ""))
    rows.append(("  detect_changes (which collections changed)", med(b.detect_seconds for b in builds), ""))
    rows.append(
        (
            "  before run_build (config, embedder selection, ...)",
            med(b.run_build_start - b.started - b.detect_seconds for b in builds),
            "",
        )
    )
    rows.append(
        (
            "  run_build: partitions sync, build_definitions",
            med(b.runs[0].start - b.run_build_start for b in builds),
            "",
        )
    )
    n_runs = len(builds[0].runs)
    for i in range(n_runs):
        run = builds[0].runs[i]
        name = f"{run.job}[{run.partition}]" if run.partition else run.job
        rows.append((f"  run {name}", med(b.runs[i].wall for b in builds), ""))
        for j, step in enumerate(run.steps):
            steps = [b.runs[i].steps[j] for b in builds]
            detail = (
                f"load {med(s.load for s in steps):.3f} + compute {med(s.compute for s in steps):.3f}"
                f" + store/finish {med(s.finish for s in steps):.3f}"
            )
            rows.append((f"    step {step_label(step.step)}", med(s.total for s in steps), detail))
        rows.append(("    Dagster run overhead (outside steps)", med(b.runs[i].overhead for b in builds), ""))
        if i + 1 < n_runs:
            rows.append(("  between runs", med(b.runs[i + 1].start - b.runs[i].end for b in builds), ""))
    rows.append(("  after the last run, in run_build", med(b.run_build_end - b.runs[-1].end for b in builds), ""))
    rows.append(
        (
            "  after run_build (summary, rag status)",
            med(b.started + b.wall - b.run_build_end for b in builds),
            "",
        )
    )
    total = rows[0][1]
    for label, value, detail in rows:
        print(f"  {label:<56} {value:7.3f}  {value / total:5.1%}  {detail}")


def print_profile(profiler: cProfile.Profile, limit: int = 14) -> None:
    """The product functions (and the heaviest library calls) by cumulative time."""
    stats = pstats.Stats(profiler)
    entries = []
    for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        entries.append((cumtime, tottime, ncalls, filename, line, name))
    total = max(e[0] for e in entries)

    def show(title: str, chosen: list[tuple]) -> None:
        print(f"  {title}")
        for cumtime, tottime, ncalls, filename, line, name in chosen:
            where = filename.split("/rag_assets/", 1)[-1] if "/rag_assets/" in filename else Path(filename).name
            print(f"    {cumtime:6.3f} s cum {tottime:6.3f} s own {ncalls:>8} calls  {where}:{line} {name}")

    print(f"\nProfile of one more one-file update (cProfile, {total:.2f} s with profiling overhead)")
    # The CLI entry points (main, cmd_build, run_build) cover everything; leave them out.
    product = sorted((e for e in entries if "/rag_assets/" in e[3] and e[0] < 0.9 * total), reverse=True)
    show("product functions by cumulative time:", product[:limit])
    own = sorted(entries, key=lambda e: e[1], reverse=True)
    show("all functions by own time:", own[:10])


# --- main ---------------------------------------------------------------------------------------


def full_build(cfg: RagConfig) -> tuple[float, runner.BuildOutcome, list[RunTiming]]:
    instance = dg.DagsterInstance.ephemeral()
    t0 = time.perf_counter()
    outcome = runner.run_build(cfg, instance)
    wall = time.perf_counter() - t0
    runs = run_timings(instance)
    instance.dispose()
    if not outcome.success:
        raise SystemExit(f"full build failed: {outcome.error or outcome.failed_checks}")
    return wall, outcome, runs


def child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_checks(
    config_path: Path, work: Path, repeat: int, baseline: Path | None
) -> dict[tuple[str, str], list[float]]:
    """`rag check` and `rag status` as processes on the built output, nothing changed, with this
    checkout's rag_assets and (when given) a baseline checkout's, interleaved so load hits all
    alike: the CPU seconds (user + system) of each process, which the machine's load barely moves."""
    checkouts = {"this checkout": ROOT} | ({f"baseline {baseline}": baseline} if baseline else {})
    commands = {
        name: [PYTHON, "-m", "rag_assets.serve.cli", *name.split(), "--config", str(config_path)]
        for name in ("check", "status")
    }
    # --deep verifies every file again, as every check did before the verification record.
    commands["check --deep"] = [*commands["check"], "--deep"]
    walls: dict[tuple[str, str], list[float]] = defaultdict(list)
    for _ in range(repeat):
        for label, checkout in checkouts.items():
            for name, command in commands.items():
                if name == "check --deep" and checkout != ROOT:
                    continue  # an option of this checkout's
                before = child_cpu_seconds()
                timed_subprocess(command, work, checkout=checkout)
                walls[label, name].append(child_cpu_seconds() - before)
    return walls


def time_verification(cfg: RagConfig, repeat: int) -> dict[str, list[float]]:
    """The damage checks alone, in-process: every file verified (as before the record) against
    a check that finds every file in the record, unchanged (what `rag check` and `rag status` pay now)."""
    walls: dict[str, list[float]] = defaultdict(list)
    record = verification_record(cfg)
    output_damage(cfg, record)  # the record holds every file once
    record.save()
    for _ in range(repeat):
        for label, make in (("every file", lambda: None), ("with the record", lambda: verification_record(cfg))):
            t0 = time.perf_counter()
            output_damage(cfg, make())
            walls[label].append(time.perf_counter() - t0)
    return walls


def print_checks(walls: dict[tuple[str, str], list[float]]) -> None:
    print("no-op rag check / rag status: process CPU time (user + system), after the runs above, by checkout")
    for (label, name), values in walls.items():
        print(f"  {label:<40} rag {name:<12} {statistics.median(values):.2f} s CPU   (runs: {fmt_runs(values)})")


def write_config(path: Path, content: Path, output: Path) -> None:
    path.write_text(f"content_dir: {content}\noutput_dir: {output}\nembedder: {EMBEDDER_NAME[0]}\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="source Markdown folder (read only)")
    parser.add_argument("--files", type=int, default=10_000, help="files to generate")
    parser.add_argument("--collections", type=int, default=10, help="collections to spread them over")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of the cheap measurements")
    parser.add_argument("--full-repeat", type=int, default=2, help="cold full builds (each in a fresh output folder)")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile'd extra update")
    parser.add_argument("--keep", type=Path, help="work in this folder (created, kept) instead of a temporary one")
    parser.add_argument(
        "--embedder", default="hashing", help="hashing (default), or local to time a realistic full build (slow)"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (e.g. main before a change) whose no-op rag check and rag status are timed too",
    )
    args = parser.parse_args()
    EMBEDDER_NAME[0] = args.embedder

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        work_ctx: Any = contextlib.nullcontext(str(args.keep.resolve()))
    else:
        work_ctx = tempfile.TemporaryDirectory(prefix="rag-incremental-")
    with work_ctx as work_name:
        work = Path(work_name)
        content, output = work / "content", work / "out"
        shutil.rmtree(content, ignore_errors=True)
        shutil.rmtree(output, ignore_errors=True)
        config_path = work / "rag.yaml"
        write_config(config_path, content, output)

        t0 = time.perf_counter()
        sizes = generate_corpus(args.corpus, content, args.files, args.collections)
        gen_s = time.perf_counter() - t0
        cfg = load_config(config_path, embedder=args.embedder, environ={})

        # Full builds: the first into the output folder the rest of the benchmark uses, the
        # others into throwaway folders so that every one is cold (no caches).
        full_walls = []
        full_wall, full_outcome, full_runs = full_build(cfg)
        full_walls.append(full_wall)
        for i in range(1, args.full_repeat):
            extra_out = work / f"out-full-{i}"
            extra_cfg_path = work / f"rag-full-{i}.yaml"
            write_config(extra_cfg_path, content, extra_out)
            full_walls.append(full_build(load_config(extra_cfg_path, embedder=args.embedder, environ={}))[0])
            shutil.rmtree(extra_out, ignore_errors=True)
        full_s = statistics.median(full_walls)
        docs = sum(c.metadata["parsed_documents"]["documents"] for c in full_outcome.collections)
        total_chunks = sum(c.metadata["chunks"]["chunks"] for c in full_outcome.collections)
        full_hits = sum(c.metadata["embeddings"]["cache_hits"] for c in full_outcome.collections)
        full_misses = sum(c.metadata["embeddings"]["cache_misses"] for c in full_outcome.collections)
        skipped = sum(len(c.skipped) for c in full_outcome.collections)
        collection_s = sum(c.seconds for c in full_outcome.collections)
        # A build is one run now: publishing is a step of it (none: the step was renamed, say so).
        publish_steps = [s for r in full_runs for s in r.steps if "publish" in s.step]
        if not publish_steps:
            raise SystemExit(
                f"no publish step in the full build's runs: {[s.step for r in full_runs for s in r.steps]}"
            )
        publish_s = sum(s.total for s in publish_steps)

        # No-op: nothing changed since the full build.
        check_cmd = [PYTHON, "-m", "rag_assets.serve.cli", "check", "--config", str(config_path)]
        build_cmd = [PYTHON, "-m", "rag_assets.serve.cli", "build", "--config", str(config_path)]
        # Interleaved, so that load from other processes on the machine hits all four alike.
        startup, startup_dagster, checks, noop_builds, inproc = [], [], [], [], []
        check_out = noop_out = ""
        for _ in range(args.repeat):
            startup.append(timed_subprocess([PYTHON, "-c", "import rag_assets.serve.cli"], work)[0])
            # `rag build` imports the Dagster layer (rag_assets.defs.runner) before it looks for changes.
            startup_dagster.append(
                timed_subprocess([PYTHON, "-c", "import rag_assets.serve.cli, rag_assets.defs.runner"], work)[0]
            )
            wall, check_out = timed_subprocess(check_cmd, work)
            checks.append(wall)
            wall, noop_out = timed_subprocess(build_cmd, work)
            noop_builds.append(wall)
            t0 = time.perf_counter()
            report = detect_changes(cfg, save_stat_cache=False)
            inproc.append(time.perf_counter() - t0)
            if not report.up_to_date:
                raise SystemExit(f"content reported changed right after the full build: {report.changed}")

        check_walls = time_checks(config_path, work, args.repeat, args.baseline)
        verify_walls = time_verification(cfg, args.repeat)

        # One-file updates: the same paragraph of one document, edited differently each time.
        target_collection = f"col{(args.collections // 2):02d}"
        rel = pick_document(cfg, target_collection)
        original = (cfg.content_dir / rel).read_text(encoding="utf-8")
        updates = [one_file_update(cfg, config_path, rel, original, rep) for rep in range(1, args.repeat + 1)]
        # The same update as a user runs it: a fresh `rag build` process (imports included).
        paragraph = prose_paragraphs(original)[len(prose_paragraphs(original)) // 2]
        sub_updates = []
        for rep in range(args.repeat):
            (cfg.content_dir / rel).write_text(edit_paragraph(original, paragraph, 100 + rep), encoding="utf-8")
            wall, out = timed_subprocess(build_cmd, work)
            if f"[{target_collection}] 1 changed" not in out:
                raise SystemExit(f"unexpected rag build output:\n{out}")
            sub_updates.append(wall)
        profiler = None
        if not args.no_profile:
            profiler = cProfile.Profile()
            one_file_update(cfg, config_path, rel, original, args.repeat + 1, profiler)
        io_sizes = {
            "index": cfg.index_path.stat().st_size,
            "manifest": cfg.manifest_path.stat().st_size,
            "stat_cache": sum(p.stat().st_size for p in part_files(cfg.stat_cache_path)),
            "pickles": sum(p.stat().st_size for p in (cfg.intermediate_dir / "embeddings").iterdir()),
            "store": cfg.public_store_path.stat().st_size,
        }

    med = statistics.median
    update_s = med(u.build.wall for u in updates)
    check_s = med(checks)
    share = update_s / full_s
    worst_embedded = max(u.cache_misses for u in updates)
    embed_ok = all(u.cache_misses <= u.allowed for u in updates)
    first = updates[0]

    print(f"corpus            {args.files} files from {args.corpus}")
    print(
        f"                  {len(sizes)} collections ({min(sizes.values())}-{max(sizes.values())} files each),"
        f" generated in {gen_s:.1f} s"
    )
    print(f"documents         {docs} ({skipped} files skipped)")
    print(
        f"chunks            {total_chunks}; {full_misses} embedded in the cold build,"
        f" {full_hits} duplicate texts served by the cache"
    )
    print(f"embedder          {args.embedder} ({select_embedder(EmbedderSettings(name=args.embedder)).embedder.model})")
    print()
    print(f"full build        {full_s:.2f} s   (cold, run_build; runs: {fmt_runs(full_walls)})")
    print(
        f"                  {len(full_outcome.collections)} index_collection runs {collection_s:.2f} s,"
        f" publish step {publish_s:.2f} s, {docs / full_s:.0f} documents/s"
    )
    print()
    print(
        f"no-op check       rag check (subprocess)    {check_s:.2f} s   (runs: {fmt_runs(checks)};"
        " the first verifies the new build, the next only what changed since)"
    )
    print(f"                  python + import only      {med(startup):.2f} s   (runs: {fmt_runs(startup)})")
    print(
        f"                  detect_changes in-process {med(inproc):.3f} s  (runs: {', '.join(f'{v:.3f}' for v in inproc)})"
    )
    print(f"                  output: {' / '.join(check_out.splitlines()[:2]) if check_out else '(none)'}")
    print(f"no-op rag build   subprocess                {med(noop_builds):.2f} s   (runs: {fmt_runs(noop_builds)})")
    print(
        f"                  python + import runner    {med(startup_dagster):.2f} s   (runs: {fmt_runs(startup_dagster)})"
    )
    print(f"                  output: {noop_out.splitlines()[-1] if noop_out else '(none)'}")
    print_checks(check_walls)
    for label, values in verify_walls.items():
        print(
            f"  damage checks in-process, {label:<16} {statistics.median(values):.3f} s   (runs: {', '.join(f'{v:.3f}' for v in values)})"
        )
    print()
    print(
        f"one-file update   {update_s:.2f} s   (rag build in-process, incremental; runs: {fmt_runs([u.build.wall for u in updates])})"
    )
    print(f"                  rag build subprocess      {med(sub_updates):.2f} s   (runs: {fmt_runs(sub_updates)})")
    written = [u.build.bytes_written / 1e6 for u in updates]
    print(f"                  bytes written (in-process) {med(written):.1f} MB   (runs: {fmt_runs(written)})")
    print(f"                  edited {rel}: one paragraph, middle word replaced and a 12-word sentence added")
    changed_line = next((line for line in first.build.stdout.splitlines() if line.startswith("[")), "")
    print(f"                  rag build said: {changed_line}")
    print(f"                  {share:.1%} of the full build")
    print()
    print(
        f"edited document   {first.chunks} chunks; {first.with_changed_words} hold the changed words;"
        f" {first.allowed} with their neighbours (the allowance)"
    )
    for i, u in enumerate(updates, start=1):
        print(
            f"  edit {i}: {u.cache_misses} chunks embedded (cache misses) in {u.batches} batch(es),"
            f" {u.build.embed_calls} embed_documents call(s) for {len(u.build.embedded_texts)} texts;"
            f" {u.texts_changed} chunk texts changed; embedded chunk indices {u.embedded_indices}"
        )

    print_update_breakdown([u.build for u in updates])
    mb = {k: v / 1e6 for k, v in io_sizes.items()}
    print("\nData a one-file update reads and rewrites whole, whatever the size of the edit")
    print(
        f"  public/embeddings-index.json  {mb['index']:6.1f} MB  the commit file naming the segments (data/segments: only the changed ones are written)"
    )
    print(f"  embeddings pickles (all)      {mb['pickles']:6.1f} MB  unpickled once by the publish step")
    print(
        f"  data/rag-store-public.db      {mb['store']:6.1f} MB  every chunk row's text read and compared by the publish step (vectors not read)"
    )
    print(
        f"  data/rag-manifest.json        {mb['manifest']:6.1f} MB  read by detect_changes (CLI and check), the publish step and outputs_consistent; rewritten"
    )
    print(
        f"  data/stat-cache/*.json        {mb['stat_cache']:6.1f} MB  read by detect_changes (CLI and check) and content_hash; the edited part rewritten"
    )
    if profiler is not None:
        print_profile(profiler)

    print("\nGoals")
    print(
        f"  no-op check < {NOOP_CHECK_GOAL_S:.0f} s (rag check, subprocess)        {check_s:.2f} s  {verdict(check_s < NOOP_CHECK_GOAL_S)}"
    )
    print(
        f"  one-file update < {UPDATE_SHARE_GOAL:.0%} of the full build         {share:.1%}"
        f" ({update_s:.2f} s of {full_s:.2f} s)  {verdict(share < UPDATE_SHARE_GOAL)}"
    )
    print(
        f"  one-paragraph edit embeds <= affected chunks + neighbours  worst {worst_embedded}"
        f" embedded, allowance {first.allowed}  {verdict(embed_ok)}"
    )


if __name__ == "__main__":
    main()
