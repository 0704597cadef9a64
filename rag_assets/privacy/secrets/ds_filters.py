"""detect-secrets' default heuristic filters, ported for the two plugins ported into rules.toml.

The Artifactory and Discord rules come from detect-secrets 1.5.0 (Yelp, Apache-2.0), and so
do the filters its scanner applies to what a regex-based plugin finds.  They are ported
rather than imported: ``detect_secrets.filters.heuristic`` is the library's internal module,
reached through its process-wide settings, and its indirect-reference regex is quadratic in
the line (see ``is_indirect_reference``).  ``is_likely_id_string`` is left out: the library
never applies it to regex-based plugins.
"""

from __future__ import annotations

import re
import string

from rag_assets.privacy.secrets.context import SHORT_LINE_MAX, short_line_at

# Strings a person types by running along the keyboard or the alphabet ("ABCDEF", "123456").
_SEQUENCES = (
    string.ascii_uppercase + string.ascii_uppercase + string.digits + "+/",
    string.digits + string.ascii_uppercase + string.ascii_uppercase + "+/",
    (string.digits + string.ascii_uppercase) * 2,
    string.digits * 2,
    string.hexdigits.upper() + string.hexdigits.upper(),
    string.ascii_uppercase + "=/",
)
_UUID_RE = re.compile(r"[a-f0-9]{8}\-[a-f0-9]{4}\-[a-f0-9]{4}\-[a-f0-9]{4}\-[a-f0-9]{12}", re.IGNORECASE)


def is_filtered(value: str, text: str, start: int) -> bool:
    """True when one of detect-secrets' default filters drops ``value`` (found at ``start``)."""
    return (
        _is_sequential_string(value)
        or _UUID_RE.search(value) is not None
        or _is_templated(value)
        or value[:1] == "$"
        or is_indirect_reference(short_line_at(text, start))
        or not set(string.ascii_letters) & set(value)  # no letter at all ("*****")
    )


def _is_sequential_string(value: str) -> bool:
    upper = value.upper()
    return any(upper in sequence for sequence in _SEQUENCES)


def _is_templated(value: str) -> bool:
    """{secret}, <secret>, ${secret}; a one-character value counts as one too (as in the library)."""
    if len(value) < 2:
        return True
    return (
        (value[0] == "{" and value[-1] == "}")
        or (value[0] == "<" and value[-1] == ">")
        or (value[0] == "$" and value[1] == "{" and value[-1] == "}")
    )


# detect-secrets' is_indirect_reference ("secret = get_secret_key()", "x = headers['apikey']")
# skips lines longer than SHORT_LINE_MAX; so does is_indirect_reference.  Its regex,
# ([^\v=!:]*)\s*(:=?|[!=]{1,3})\s*([\w.-]+[\[\(][^\v]*[\]\)]), is tried from every position of
# the line and costs up to the square of the line for each finding.  Its first group may be
# empty, so it matches exactly when an operator, optional spaces and a name are followed by an
# opening bracket and, later on the line with no vertical tab in between, by a closing one:
# the two regexes below find that in one pass.
_INDIRECT_HEAD_RE = re.compile(r"(?::=?|[!=]{1,3})\s*[\w.-]+[\[\(]")
_INDIRECT_CLOSER_RE = re.compile(r"[\]\)]")


def is_indirect_reference(line: str | None) -> bool:
    """detect-secrets' ``is_indirect_reference(line)``, in time linear in the line."""
    if line is None or len(line) > SHORT_LINE_MAX:
        return False
    heads = _INDIRECT_HEAD_RE.finditer(line)
    if "\v" not in line:  # the usual case: any closing bracket after the first head will do
        first = next(heads, None)
        return first is not None and _INDIRECT_CLOSER_RE.search(line, first.end()) is not None
    for head in heads:
        closer = _INDIRECT_CLOSER_RE.search(line, head.end())
        if closer is None:
            return False  # none after this head, so none after any later one either
        if "\v" not in line[head.end() : closer.start()]:
            return True
    return False
