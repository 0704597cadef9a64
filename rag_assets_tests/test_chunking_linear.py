"""Parsing and chunking a note take time linear in its size, whatever its Markdown looks like.

Every note goes through ``parse_markdown_file`` and ``chunk_document``, so one crafted or
unlucky note must not stall a build: a note of 40,000 headings (0.86 MB) once took 137 s of
CPU, because the block model copied the rest of the token list once per heading.

Each test writes 700 KB of one shape (about 40,000 headings, list items, table rows... the
shapes with one block or heading every few characters) to a file, parses and chunks it,
and compares the time with 700 KB of ordinary Markdown prose parsed and chunked in the
same run, not with a wall-clock constant: the machine's speed and load then cancel out.

Why ``MAX_RATIO = 25``: the parse costs about the same per block, and prose has a block every
few hundred characters where these shapes have one every 5-20, so after the fix the densest
shapes here (list items, headings without blank lines, thematic breaks) take about 8-12x the
prose, in time that doubles with the note (measured at 350 KB, 700 KB and 1.4 MB).  Before it
40,000 headings took about 40x the prose and 100,000 short headings or a line of 175,000
``~~~`` or ``_`` words took minutes; a per-heading or per-block re-scan grows with the square
of the note, so 25x leaves room for noise on a shared machine and still fails it.  (A note of
nothing but ``#`` lines, a block every 2 characters, is linear too but about 40x the prose,
so it is not among the shapes.)  A run over budget is measured once more before failing,
since another process can take the CPU for a moment; a run far over budget is cut short
(``ABORT_RATIO``) so a regression fails in seconds rather than in minutes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rag_assets.ingest.chunking import chunk_document
from rag_assets.ingest.parsing import parse_markdown_file
from rag_assets.records import Document

from .deadline import TooSlow, deadline

SIZE = 700_000  # characters: about 40,000 headings of "## Heading 12345"
MAX_RATIO = 25.0
ABORT_RATIO = 2 * MAX_RATIO

_RNG = random.Random(20261202)
_WORDS = (
    "the backup job copies photo library to offsite box every night and keeps thirty daily snapshots "
    "mount share run sync check logs restart service when fails network bridge vlan guests tagged "
    "install package update config file reboot host container volume disk pool scrub weekly report"
).split()


def _sentence() -> str:
    return " ".join(_RNG.choices(_WORDS, k=_RNG.randint(8, 20))).capitalize() + "."


def markdown_prose(size: int) -> str:
    """Ordinary notes: a heading, paragraphs, a list, a code fence every few hundred characters."""
    parts: list[str] = []
    total = 0
    while total < size:
        block = (
            f"## {_sentence()[:40]}\n\n{_sentence()} {_sentence()} {_sentence()}\n\n"
            f"- {_sentence()}\n- see [the docs](https://example.org/docs/{_RNG.randint(1, 999)})\n\n"
            f"```bash\nrsync -a /srv/data/ backup:/srv/data/ --delete\n```\n\n"
        )
        parts.append(block)
        total += len(block)
    return "".join(parts)[:size]


def numbered(make: Callable[[int], str]) -> Callable[[], str]:
    """SIZE characters of ``make(0) + make(1) + ...``: one block kind, numbered."""

    def build() -> str:
        parts: list[str] = []
        total = 0
        while total < SIZE:
            parts.append(make(len(parts)))
            total += len(parts[-1])
        return "".join(parts)[:SIZE]

    return build


# name -> SIZE characters of one block kind.  The first three are the reported shape and
# the two the issue asked for; the rest are the other block kinds the block model records
# (heading zones, atomic regions, block starts) packed as densely as Markdown allows.
SHAPES: dict[str, Callable[[], str]] = {
    "headings": numbered(lambda i: f"## Heading {i}\n\n"),
    "list_items": numbered(lambda i: f"- item {i}\n"),
    "table_rows": numbered(lambda i: f"| x{i} | y{i} |\n" if i else "| a | b |\n|---|---|\n"),
    "headings_without_blank_lines": numbered(lambda i: f"# H{i}\n"),
    "setext_headings": numbered(lambda i: f"T{i}\n===\n"),
    "headings_of_every_level": numbered(lambda i: f"{'#' * (i % 6 + 1)} h{i}\n"),
    "nested_list_items": numbered(lambda i: f"- item {i}\n  - sub {i}\n"),
    "paragraphs": numbered(lambda i: f"para {i}.\n\n"),
    "quote_lines": numbered(lambda i: f"> line {i}\n"),
    "fences": numbered(lambda i: f"```\ncode {i}\n```\n"),
    "fences_in_quotes": numbered(lambda i: f"> ```\n> code {i}\n> ```\n>\n"),
    "fences_in_list_items": numbered(lambda i: f"- item\n  ```\n  code {i}\n  ```\n"),
    "html_blocks_with_fences": numbered(lambda i: f"<div>\n```\n{i}\n</div>\n\n"),
    "indented_code_blocks": numbered(lambda i: f"    code {i}\n\n"),
    "reference_definitions": numbered(lambda i: f"[r{i}]: http://x/{i}\n"),
    "thematic_breaks": numbered(lambda i: f"w{i}\n\n---\n\n"),
    "one_line": numbered(lambda i: f"word{i} and more. "),
    "mid_line_fence_markers": numbered(lambda i: "~~~ " if i else "x "),
    "mid_line_thematic_breaks": numbered(lambda i: "_ " if i else "x "),
}


def _parse_and_chunk(path: Path) -> int:
    doc = parse_markdown_file(path, root=path.parent, collection="notes")
    assert isinstance(doc, Document), doc
    return len(chunk_document(doc))


def _seconds(path: Path, limit: float | None = None) -> float:
    """Time to parse and chunk the note at ``path``; ``inf`` when cut short at ``limit``."""
    start = time.perf_counter()
    try:
        with deadline(limit):
            assert _parse_and_chunk(path) > 0
    except TooSlow:
        return float("inf")
    return time.perf_counter() - start


def _note(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.md"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("linear")


@pytest.fixture(scope="module")
def baseline(folder: Path) -> float:
    """Seconds for a prose note of the same size: the best of three (the least disturbed run)."""
    path = _note(folder, "prose", markdown_prose(SIZE))
    return min(_seconds(path) for _ in range(3))


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_note_of_forty_thousand_blocks_costs_at_most_k_times_prose(name: str, folder: Path, baseline: float) -> None:
    text = SHAPES[name]()
    assert len(text) == SIZE
    path = _note(folder, name, text)
    budget = MAX_RATIO * baseline
    limit = max(ABORT_RATIO * baseline, 1.0)
    took = _seconds(path, limit)
    if budget < took < float("inf"):  # maybe another process had the CPU: measure once more
        took = min(took, _seconds(path, limit))
    if took == float("inf"):
        spent = f"over {limit * 1000:.0f} ms (cut short), over {limit / baseline:.0f}x"
    else:
        spent = f"{took * 1000:.0f} ms, {took / baseline:.1f}x"
    assert took <= budget, (
        f"{name}: {SIZE:,} characters took {spent} the {baseline * 1000:.0f} ms of as much prose (budget {MAX_RATIO:.0f}x)"
    )
