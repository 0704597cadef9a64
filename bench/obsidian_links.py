"""Benchmark link resolution on a vault: the share of links resolved, and the cost of bad input.

For ``--vault`` (default ``../shared/corpora/obsidian-vault`` next to the repository) it parses
the notes as a vault build does (Obsidian syntax, the layout's skips) and resolves their links
(:mod:`rag_assets.ingest.link_resolution`), then prints

* links, and how many resolved: to a note, to a file (an attachment), in total and for each
  kind (wikilinks in note bodies, in properties, embeds, Markdown links), with the issues by kind;
* of the unresolved ones, how many name a file that exists in the vault's folder but is not
  indexed (the templates folder, which holds the ``.base`` views, is skipped unread): Obsidian
  would resolve those; the rest name notes nobody wrote yet (Obsidian shows them unresolved too);
* the time and peak memory (tracemalloc) to resolve the vault, and one note of ``--many``
  distinct links plus a loop of ``--loop`` notes embedding each other: median of ``--repeat``
  runs, with the load average before each.

Usage: ``python bench/obsidian_links.py [--vault DIR] [--many N] [--loop N] [--repeat N]``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

from rag_assets.config import VaultConfig, load_config  # noqa: E402
from rag_assets.ingest.link_resolution import note_key, resolve_vault  # noqa: E402
from rag_assets.ingest.parsing import parse_markdown_file  # noqa: E402
from rag_assets.privacy.vaults import parse_vault, snapshot_vault  # noqa: E402
from rag_assets.records import Document  # noqa: E402

DEFAULT_VAULT = REPO_ROOT.parent / "shared" / "corpora" / "obsidian-vault"


def load_vault(path: Path) -> tuple[list[Document], list[str]]:
    """The vault's parsed notes and its files (paths inside the vault), as a build reads them."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(None, content_dir=Path(tmp), output_dir=Path(tmp) / "out", environ={})
        vault = VaultConfig("vault", path.resolve(), "private")
        cfg = dataclasses.replace(cfg, vaults=(vault,))
        snapshot = snapshot_vault(cfg, vault)
        parsed = parse_vault(cfg, vault, snapshot)
    return parsed.documents, [p.removeprefix("vault/") for p in snapshot.files]


def on_disk_names(root: Path) -> set[str]:
    """Every file name of the vault folder (hidden folders aside), keyed as links look them up."""
    names = set()
    for _folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        names.update(note_key(f) for f in files)
    return names


def report_shares(vault: Path) -> None:
    """Print the vault's links resolved, by kind, and what Obsidian would resolve besides."""
    documents, files = load_vault(vault)
    resolved = resolve_vault("vault", documents, files)
    report = resolved.report
    print(f"{vault}: {report.summary()}")
    print(f"  share resolved: {report.share_resolved():.3f} ({report.resolved}/{report.links})")
    kinds: Counter = Counter()
    done: Counter = Counter()
    unresolved_names = Counter()
    for doc in resolved.documents:
        for r in doc.resolved_links:
            kind = (
                r.link.kind
                if r.link.kind != "wikilink"
                else ("property" if r.link.source != "body" else "body wikilink")
            )
            times = doc.links.count(r.link)
            kinds[kind] += times
            done[kind] += times if r.status in ("note", "file") else 0
            if r.status == "unresolved":
                unresolved_names[note_key(r.link.target)] += times
    for kind in sorted(kinds):
        print(f"  {kind}: {done[kind]}/{kinds[kind]} resolved ({done[kind] / kinds[kind]:.3f})")
    present = on_disk_names(vault)
    in_folder = sum(n for name, n in unresolved_names.items() if name.rsplit("/", 1)[-1] in present)
    print(f"  unresolved that name a file in the vault folder left unindexed (Obsidian resolves them): {in_folder}")
    print(
        f"  unresolved that name no file at all (notes not written yet): {sum(unresolved_names.values()) - in_folder}"
    )
    if in_folder + report.resolved:
        print(f"  share as Obsidian would resolve them: {(report.resolved + in_folder) / report.links:.3f}")


def timed(work, repeat: int) -> tuple[float, float, list[float]]:
    """(median seconds, peak MB of the last run, load averages before each run)."""
    seconds, loads, peak = [], [], 0
    for _ in range(repeat):
        loads.append(os.getloadavg()[0])
        tracemalloc.start()
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return statistics.median(seconds), peak / 2**20, loads


def bad_input(many: int, loop: int, repeat: int, vault: Path) -> None:
    """Time one note of ``many`` links, a loop of ``loop`` embeds and a self-embed; then the vault itself."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "v"
        root.mkdir()
        texts = {"Big.md": "![[Big]] " + " ".join(f"[[Note {i}]]" for i in range(many)) + "\n"}
        texts.update({f"Loop {i}.md": f"# Loop {i}\n\n![[Loop {(i + 1) % loop}]]\n" for i in range(loop)})
        docs = []
        for name, text in texts.items():
            (root / name).write_text(text, encoding="utf-8")
            docs.append(parse_markdown_file(root / name, root=root, collection="v", obsidian=True))
    result: dict = {}
    median, peak, loads = timed(lambda: result.update(r=resolve_vault("v", docs, [])), repeat)
    report = result["r"].report
    print(
        f"bad input ({many} links in one note, a loop of {loop} embeds, a self-embed): {median * 1000:.1f} ms median, "
        f"peak {peak:.1f} MB; {dict(report.counts)}; load average {', '.join(f'{x:.2f}' for x in loads)}"
    )
    documents, files = load_vault(vault)
    median, peak, loads = timed(lambda: resolve_vault("vault", documents, files), repeat)
    print(
        f"resolving {vault.name} ({len(documents)} notes): {median * 1000:.2f} ms median, peak {peak:.2f} MB; "
        f"load average {', '.join(f'{x:.2f}' for x in loads)}"
    )


def main() -> None:
    """Parse the arguments and print both reports."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=DEFAULT_VAULT, help="an Obsidian vault folder")
    parser.add_argument("--many", type=int, default=10_000, help="distinct links in the one large note")
    parser.add_argument("--loop", type=int, default=1_000, help="notes in the loop of embeds")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (the median is printed)")
    args = parser.parse_args()
    if not args.vault.is_dir():
        sys.exit(f"no vault at {args.vault}")
    report_shares(args.vault)
    bad_input(args.many, args.loop, args.repeat, args.vault)


if __name__ == "__main__":
    main()
