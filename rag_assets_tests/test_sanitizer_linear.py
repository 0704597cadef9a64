"""The Safe-tier sanitiser takes time linear in its input, whatever the input looks like.

Every note of the Safe tier goes through ``Sanitizer.text`` (secret rules and scanners,
identity map), so one crafted or unlucky note must not stall a build: 200 KB of
``;Password=x`` once took 77 s, because every match re-read its whole line.

Each test sanitises one pathological pattern (with the repository's identity map) at two
sizes, ``SMALL`` = 16 KB and ``LARGE`` = 8 x 16 KB = 128 KB, in CPU time with the garbage
collector paused (a collection of the test process's heap is not the sanitiser's cost; a
measurement repeats a call for at least ``MIN_BATCH`` of CPU, whose clock can step), and
checks two things against ordinary Markdown prose sanitised in the same run, not against a
wall-clock constant, so that the machine's speed and load cancel out:

* growth: 8x the input takes 8x the time if linear, 64x if quadratic.  The pattern's
  ``t(LARGE) / t(SMALL)`` must stay under ``MAX_GROWTH = 2`` times 8 (or times the
  prose's own growth, if caches make that more): a budget of 16.  Measured after the fix:
  6-10 for every pattern, up to 12.6 (even as the best of three) on a machine loaded
  3-5x over its cores, which is why the budget is not tighter.
* cost: ``t(LARGE)`` must stay under ``MAX_RATIO = 20`` times 128 KB of prose.  After the
  fix the slowest patterns take about 4-10x the prose (``a:&pwd=x...``, ``password= ...``,
  ``key=key=...``, ``Server=a;Password=...``: a keyword every few characters, each with a
  value to check, where prose wakes almost no rule), the same as at 1 MB.

Sensitivity, against the test this replaces (1 MB of each pattern, at most 20x 1 MB of prose;
154 s of CPU, this one about 25 s).  Write a pattern's time as ``a*n + b*n*n`` and the
prose's as ``p*n``, and size a quadratic term by what it would cost at 1 MB, ``b*(1 MB)**2``,
in units of 1 MB of prose.  The old test failed it above ``20 - a/p`` units.  The growth
check fails it above ``10.7 * a/p`` units (its part at 128 KB is over 4/3 of the pattern's
linear time there), the cost check above ``8 * (20 - a/p)`` units.  So for the patterns that
cost about as much as prose (``a/p`` = 0.5-2, most of them) this test is as sensitive as the
old one or more (5-21 units against 18-19); for the dense ones it is less so, 2.7x at
``a/p`` = 4 (43 units against 16) to 8x at ``a/p`` = 10 (80 against 10).  The regressions it guards are
far above that: the per-match line re-read took 77 s for 200 KB, about 2,000 units, and every
pattern found quadratic before the fix went over 30x the prose at 1 MB.  Checked by a
mutation: ``context.line_bounds`` reading the whole line again (no window) fails
``jdbc_password`` (cut short at 40x the prose); it also makes ``server_password`` grow
14-15x, which the old test failed at 1 MB and this one lets pass (its ``a/p`` is 6).

A pattern over a budget is measured twice more before failing, since another process can
take the CPU for a moment; a run far over budget is cut short (at twice the cost budget, in CPU time; rag_assets_tests/linear_time.py)
so a regression fails in seconds rather than in minutes.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from pathlib import Path

import pytest

from rag_assets.privacy.identity import IdentityMap
from rag_assets.privacy.sanitize import Sanitizer

from .linear_time import GROWTH, assert_grows_like_prose, best_seconds

REPO_ROOT = Path(__file__).resolve().parents[1]
SMALL = 16_000
LARGE = GROWTH * SMALL
MAX_RATIO = 20.0  # times the prose at LARGE (cut short at twice that)

_RNG = random.Random(20260802)
_B64 = string.ascii_letters + string.digits + "+/"


def repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def random_chars(alphabet: str, size: int) -> str:
    return "".join(_RNG.choices(alphabet, k=size))


_WORDS = (
    "the backup job copies photo library to offsite box every night and keeps thirty daily snapshots "
    "mount share run sync check logs restart service when fails network bridge vlan guests tagged "
    "install package update config file reboot host container volume disk pool scrub weekly report"
).split()


def markdown_prose(size: int) -> str:
    """Ordinary notes: headings, paragraphs, lists, a code fence, links; no secrets."""
    parts: list[str] = []
    total = 0
    while total < size:
        sentence = lambda: " ".join(_RNG.choices(_WORDS, k=_RNG.randint(8, 20))).capitalize() + "."  # noqa: E731
        block = (
            f"## {sentence()[:40]}\n\n{sentence()} {sentence()} {sentence()}\n\n"
            f"- {sentence()}\n- see [the docs](https://example.org/docs/{_RNG.randint(1, 999)})\n\n"
            f"```bash\nrsync -a /srv/data/ backup:/srv/data/ --delete\n```\n\n"
        )
        parts.append(block)
        total += len(block)
    return "".join(parts)[:size]


def begins_then_end(size: int) -> str:
    # 4,000 characters a block, so both sizes are whole blocks: a block cut short has no END
    # and costs less, which would make the small size's share of it skew the growth.
    block = "-----BEGIN PRIVATE KEY-----\n" * 141 + "-----END PRIVATE KEY-----\n" + "\n" * 26
    assert len(block) == 4000 and size % len(block) == 0
    return repeat(block, size)


def artifactory_tokens_on_short_lines(size: int) -> str:
    line = repeat("AKCp8abcdefghij ", 990) + "\n"  # lines under the ported indirect-reference filter's 1000-char limit
    return repeat(line, size)


# name -> n characters of text.  The first ones are the two reported; the rest were found by timing
# 100 KB and 200 KB of each candidate (quadratic ones took 4x, not 2x, for twice the input)
# or are the shapes a per-match look-up of the line, an unbounded gap or a backtracking
# regex would be slow on.
PATTERNS: dict[str, Callable[[int], str]] = {
    "semicolon_password": lambda n: repeat(";Password=x", n),
    "server_password": lambda n: repeat("Server=a;Password=", n),
    "one_line_prose": lambda n: markdown_prose(n).replace("\n", " "),
    "newlines": lambda n: repeat("\n", n),
    "password_near_miss": lambda n: repeat("password= ", n),
    "password_colon_newline": lambda n: repeat("password:\n", n),
    "token_near_miss": lambda n: repeat("token: ", n),
    "key_near_miss": lambda n: repeat("key=", n),
    "keywords_glued": lambda n: repeat("passwordtokenkeysecretpin", n),
    "base64_run": lambda n: random_chars(_B64, n),
    "base64_lines": lambda n: repeat(random_chars(_B64, 76) + "\n", n),
    "hex_run": lambda n: random_chars("0123456789abcdef", n),
    "begin_no_end": lambda n: repeat("-----BEGIN RSA PRIVATE KEY-----\n", n),
    "begin_no_end_one_line": lambda n: repeat("-----BEGIN PRIVATE KEY-----", n),
    "many_begins_per_end": begins_then_end,
    "uri_user_prefix": lambda n: repeat("://user:", n),
    "uri_credentials": lambda n: repeat("://u:p@", n),
    "double_quotes": lambda n: repeat('"', n),
    "single_quotes": lambda n: repeat("'", n),
    "backticks": lambda n: repeat("`", n),
    "quoted_words": lambda n: repeat('"a" ', n),
    "unclosed_quoted_password": lambda n: repeat("Password='x ", n),
    "url_query_password": lambda n: repeat("a:&pwd=x", n),
    "jdbc_password": lambda n: repeat("jdbc:x;password=abc;", n),
    "hostnames": lambda n: repeat("pve01.home.arpa k3s-w01.home.arpa nas01 ", n),
    "dotted_chain": lambda n: repeat("a.", n),
    "ipv4": lambda n: repeat("10.0.0.1 192.168.10.1 ", n),
    "ipv4_prefix_chain": lambda n: repeat("192.168.", n),
    "ipv6_prefix_chain": lambda n: repeat("fd00:", n),
    "emails": lambda n: repeat("jo@ex.com ", n),
    "at_signs": lambda n: repeat("a@", n),
    "home_paths": lambda n: repeat("/home/", n),
    "curl": lambda n: repeat("curl ", n),
    "mysql": lambda n: repeat("mysql ", n),
    "sas_signature": lambda n: "sig= " + repeat("-SharedAccessSignature=x", n - 5),
    "npmrc_registry": lambda n: "_auth " + repeat("'//", n - 6),
    "putty_headers": lambda n: repeat("PuTTY-User-Key-File-2: ", n),
    "closing_brackets": lambda n: repeat("password=)))))))", n),
    "artifactory_tokens": lambda n: repeat("AKCp8abcdefghij ", n),
    "artifactory_short_lines": artifactory_tokens_on_short_lines,
    "aws_key_ids": lambda n: repeat("AKIAIOSFODNN7ABCDEFG ", n),
    # The structured scanner (tables, definition lists, labels; issue 23): a delimiter row per
    # line, a table whose every row has secrets, one endless row, a definition or a label per line.
    "table_delimiter_rows": lambda n: repeat("|-|\n", n),
    "table_secret_columns": lambda n: (
        "| password | token | API key |\n|---|---|---|\n" + repeat("| Xy7pQ2wZ | Tk4Bn8Qm2Wx6 | a |\n", n - 45)
    ),
    "table_one_wide_row": lambda n: "| password |\n|---|\n" + repeat("| Xy7pQ2wZ ", n - 19),
    "table_row_labels": lambda n: "| a | b |\n|---|---|\n" + repeat("| Password | Rl9Kd3Mx7Vq2 |\n", n - 20),
    "definitions": lambda n: repeat("Password\n: Gw5Lp8Qz2Rk7\n", n),
    "definition_markers": lambda n: repeat(": x\n", n),
    "label_lines": lambda n: repeat("- Password \u2014 Pr7Dash9Wq2Lx\n", n),
    "labels_on_one_line": lambda n: repeat("Root password (nas) - ", n),
    # HTML tables and Dataview fields (attack23): a cell per tag, cells never closed, a value
    # wrapped in many inline tags, a whitespace run in one cell, a field per line.
    "html_secret_cells": lambda n: "<table><tr><th>password</th></tr>" + repeat("<tr><td>Xy7pQ2wZ</td></tr>", n - 33),
    "html_unclosed_cells": lambda n: repeat("<td>password<td>Xy7pQ2wZ ", n),
    "html_inline_tags": lambda n: "<table><tr><td>password</td><td>" + repeat("<b>", n - 32),
    "html_cell_spaces": lambda n: "<table><tr><td>password</td><td>x" + repeat(" ", n - 33),
    "html_tag_names": lambda n: repeat("<t", n),
    "dataview_fields": lambda n: repeat("password:: Dv1Field7Qk3Wz\n", n),
}


@pytest.fixture(scope="module")
def sanitizer() -> Sanitizer:
    return Sanitizer(IdentityMap.load(REPO_ROOT / "identity_map.json"))


@pytest.fixture(scope="module")
def prose(sanitizer: Sanitizer) -> tuple[float, float]:
    """Seconds for SMALL and LARGE characters of ordinary Markdown: the best of three each."""
    small, large = markdown_prose(SMALL), markdown_prose(LARGE)
    return best_seconds(lambda: sanitizer.text(small), 3), best_seconds(lambda: sanitizer.text(large), 3)


@pytest.mark.parametrize("name", list(PATTERNS))
def test_a_pathological_pattern_grows_like_prose_and_costs_at_most_k_times_it(
    name: str, sanitizer: Sanitizer, prose: tuple[float, float]
) -> None:
    small_text, large_text = PATTERNS[name](SMALL), PATTERNS[name](LARGE)
    assert (len(small_text), len(large_text)) == (SMALL, LARGE)
    assert_grows_like_prose(
        name, lambda: sanitizer.text(small_text), lambda: sanitizer.text(large_text), prose, MAX_RATIO, LARGE
    )
