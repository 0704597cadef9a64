"""Parsing and chunking a note take time linear in its size, whatever its Markdown looks like.

Every note goes through ``parse_markdown_file`` and ``chunk_document``, so one crafted or
unlucky note must not stall a build: a note of 40,000 headings (0.86 MB) once took 137 s of
CPU, because the block model copied the rest of the token list once per heading.

Each test writes one shape (headings, list items, table rows... the shapes with one block or
heading every few characters) at two sizes, ``SMALL`` = 21,875 characters and ``LARGE`` =
8 x ``SMALL`` = 175,000 (about 11,000 headings), parses and chunks each in CPU time with the
garbage collector paused, and checks two things against ordinary Markdown prose of the same
sizes parsed and chunked in the same run, not against a wall-clock constant, so that the
machine's speed and load cancel out:

* growth: 8x the note takes 8x the time if linear, 64x if quadratic.  The shape's
  ``t(LARGE) / t(SMALL)`` must stay under ``MAX_GROWTH = 2`` times 8 (or times the prose's
  own growth, if caches make that more): a budget of 16.  Measured after the fix: 5-9 for
  every shape, a first run up to 11 on a machine loaded 5x over its cores (the sanitiser's
  twin test saw 12.6 there, so the budget is not tighter).
* cost: ``t(LARGE)`` must stay under ``MAX_RATIO = 25`` times as much prose.  The parse costs
  about the same per block, and prose has a block every few hundred characters where these
  shapes have one every 5-20, so after the fix the densest shapes (nested list items, headings
  of every level, headings without blank lines) take about 7-10x the prose at this size.

Sensitivity, against the test this replaces (700,000 characters of each shape, at most 25x as
much prose; 47-51 s of CPU, this one about 15 s).  Write a shape's time as ``a*n + b*n*n`` and
the prose's as ``p*n``, and size a quadratic term by what it would cost at 700,000
characters, in units of that much prose.  The old test failed it above ``25 - a/p`` units.
The growth check fails it above ``5.3 * a/p`` units (its part at ``LARGE`` is over 4/3 of
the shape's linear time there), the cost check above ``4 * (25 - a/p)`` units.  So for the
shapes up to about 4x the prose (``a/p`` <= 4) this test is as sensitive as the old one or
more (5-21 units against 21-24); for the denser ones less so, 2.5x at ``a/p`` = 8 (43 units
against 17) to 4x for the densest (``a/p`` = 12 at 700 KB: 52 units against 13).  The regression it guards is far above that: the
per-heading copy took 137 s for 40,000 headings, about 600 units.  Checked by a mutation:
``_next_block_start`` looping over ``tokens[idx:]`` again fails the heading shapes: in one
run ``headings_without_blank_lines`` (growth 22.6x) and ``setext_headings`` (25.6x), in
another ``headings`` (18.5x) and ``headings_of_every_level`` (25x) too.  (A note of nothing but ``#`` lines, a block
every 2 characters, is linear too but about 40x the prose, so it is not among the shapes.)

A shape over a budget is measured twice more before failing, since another process can take
the CPU for a moment; a run far over budget is cut short (at twice the cost budget, in CPU time; rag_assets_tests/linear_time.py) so a
regression fails in seconds rather than in minutes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from rag_assets.ingest.chunking import chunk_document
from rag_assets.ingest.parsing import parse_markdown_file
from rag_assets.records import Document

from .linear_time import GROWTH, assert_grows_like_prose, best_seconds

SMALL = 21_875
LARGE = GROWTH * SMALL  # 175,000 characters: about 11,000 headings of "## Heading 1234"
MAX_RATIO = 25.0  # times the prose at LARGE (cut short at twice that)

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


def numbered(make: Callable[[int], str]) -> Callable[[int], str]:
    """``size`` characters of ``make(0) + make(1) + ...``: one block kind, numbered."""

    def build(size: int) -> str:
        parts: list[str] = []
        total = 0
        while total < size:
            parts.append(make(len(parts)))
            total += len(parts[-1])
        return "".join(parts)[:size]

    return build


# name -> size -> that many characters of one block kind.  The first three are the reported shape and
# the two the issue asked for; the rest are the other block kinds the block model records
# (heading zones, atomic regions, block starts) packed as densely as Markdown allows.
SHAPES: dict[str, Callable[[int], str]] = {
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


def _note(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.md"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("linear")


@pytest.fixture(scope="module")
def prose(folder: Path) -> tuple[float, float]:
    """Seconds for prose notes of SMALL and LARGE characters: the best of three each."""
    small = _note(folder, "prose-small", markdown_prose(SMALL))
    large = _note(folder, "prose-large", markdown_prose(LARGE))
    return best_seconds(lambda: _parse_and_chunk(small), 3), best_seconds(lambda: _parse_and_chunk(large), 3)


@pytest.mark.parametrize("name", list(SHAPES))
def test_a_note_of_dense_blocks_grows_like_prose_and_costs_at_most_k_times_it(
    name: str, folder: Path, prose: tuple[float, float]
) -> None:
    small_text, large_text = SHAPES[name](SMALL), SHAPES[name](LARGE)
    assert (len(small_text), len(large_text)) == (SMALL, LARGE)
    small_path, large_path = _note(folder, f"{name}-small", small_text), _note(folder, f"{name}-large", large_text)
    assert_grows_like_prose(
        name,
        lambda: _parse_and_chunk(small_path),
        lambda: _parse_and_chunk(large_path),
        prose,
        MAX_RATIO,
        LARGE,
        "note",
    )
