"""Reading the text around a match, in a bounded window.

Some checks need more than the value: the rest of a connection string, the scheme of the URL
a ``?password=`` belongs to, the line a detect-secrets-style filter looks at.  Each look-up
reads at most a fixed window around the match, never the whole line: reading the whole line
for every match is quadratic on a long line with many matches (a minified file,
``";Password=x" * 100000``), and the Safe tier must stay linear in its input
(``rag_assets_tests/test_sanitizer_linear.py``).
"""

from __future__ import annotations

import re

# How far a check looks around a match for its context.
CONTEXT = 300


def line_bounds(text: str, pos: int, window: int = CONTEXT) -> tuple[int, int]:
    """The line around ``pos``, clipped to ``window`` characters on each side."""
    lo = max(0, pos - window)
    start = text.rfind("\n", lo, pos) + 1 or lo
    end = text.find("\n", pos, pos + window)
    return start, (min(len(text), pos + window) if end < 0 else end)


def line_of(text: str, pos: int) -> str:
    """The line around ``pos`` (clipped to the context window, see ``line_bounds``)."""
    start, end = line_bounds(text, pos)
    return text[start:end]


# "Not preceded by anything but a separator": a lookbehind rather than "(?:^|[;\s\"'])", so it
# also holds at the start of a search window (``^`` only matches at the start of the string).
_CONN_KEY_RE = re.compile(
    r"(?i)(?<![^;\s\"'])(?:server|data\s?source|initial\s?catalog|database|user\s?id|userid|uid|driver|dsn|host|"
    r"addr(?:ess)?|network\s?address|username|trusted_connection|integrated\s?security)[ \t]*="
)


def in_connection_string(text: str, pos: int) -> bool:
    """The line around ``pos`` reads as a ``key=value;`` connection string (not a lone password= line)."""
    start, end = line_bounds(text, pos)
    return text.find(";", start, end) >= 0 and _CONN_KEY_RE.search(text, start, end) is not None


def url_scheme_before(m: re.Match[str], text: str) -> str | None:
    """The scheme of the URL a ``?password=`` belongs to, or None when it is not in a URL.

    The URL is the run of URL characters that ends at the match (at most ``CONTEXT`` of
    them); its scheme is the first ``scheme:`` inside that run.  Finding the run first keeps
    this linear: a search for "scheme:, then URL characters up to the match" tried from every
    position of the window costs the square of the window for each match.
    """
    window_start = max(0, m.start() - CONTEXT)
    through_last_stop = _THROUGH_LAST_STOP_RE.match(text, window_start, m.start())
    run_start = through_last_stop.end() if through_last_stop else window_start
    found = _SCHEME_IN_RUN_RE.search(text, run_start, m.start())
    return found.group(1).lower() if found else None


# Greedy, so one pass to the end of the window and back to its last non-URL character.
_THROUGH_LAST_STOP_RE = re.compile(r"(?s).*[\s\"'`<>]")
_SCHEME_IN_RUN_RE = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+]{1,20}):")


# detect-secrets' indirect-reference filter skips lines longer than this (see ds_filters.py).
SHORT_LINE_MAX = 1000


def short_line_at(text: str, pos: int) -> str | None:
    """The whole line around ``pos`` if it has at most ``SHORT_LINE_MAX`` characters, else None."""
    start, end = line_bounds(text, pos, SHORT_LINE_MAX + 1)
    return text[start:end] if end - start <= SHORT_LINE_MAX else None


def lower_same_length(text: str) -> str:
    """``text.lower()`` with the same offsets (a few characters, like 'İ', lower to two)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
