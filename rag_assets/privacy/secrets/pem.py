"""The private-key scanner: PEM and PuTTY key blocks, redacted whole.

A block is more than one regex match: it runs from its ``-----BEGIN ... PRIVATE KEY-----``
line to its END line, or, when a chunk boundary or a truncated paste cut it, to the end of
the base64 lines after the header (also inside code: ``"...\\n" +`` concatenations and JSON
strings).  A block counts only when its body is real-looking base64, not ``xxxx`` or ``...``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rag_assets.privacy.secrets.values import longest_run

_PEM_BEGIN_RE = re.compile(r"-----BEGIN[ A-Z0-9_\-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END_RE = re.compile(r"-----END[ A-Z0-9_\-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
# Lines after a BEGIN header with no END: one base64 token (or a "Proc-Type: ..." header) per line.
# Also read as code: "-----BEGIN ...-----" +\n "MIIE..." +\n ... and "...\\n..." in one JSON string.
_PEM_BODY_RE = re.compile(
    r"(?:[ \t]*[\"']?[ \t]*[+,]?[ \t]*(?:\\n|\r?\n)[ \t]*\+?[ \t]*[\"']?"
    r"(?:[A-Za-z\-]+:[^\n\\\"']*|[A-Za-z0-9+/=]{4,})(?:\\n)?[\"']?)*"
)
_PEM_LINE_STRIP_RE = re.compile(r"^[\s\"'+,]+|[\s\"'+,;]+$")
_B64_LINE_RE = re.compile(r"^[A-Za-z0-9+/=]+$")
_PUTTY_RE = re.compile(
    # Header lines are short; unbounded "[^\n]*" re-read a long line from every header on it.
    r"PuTTY-User-Key-File-\d+:[^\n]{0,300}\n(?:[^\n]{0,300}\n){0,12}?Private-Lines:\s*\d+\s*\n(?P<body>(?:[A-Za-z0-9+/=]+\r?\n?)+)"
)


def spans(text: str, low: str) -> Iterable[tuple[int, int, str]]:
    """Private-key blocks: from the BEGIN line to the END line (or the end of the base64 lines)."""
    if "private key" not in low and "putty-user-key-file" not in low:
        return
    begins = list(_PEM_BEGIN_RE.finditer(text))
    next_begins = [b.start() for b in begins[1:]] + [len(text)]
    for m, next_begin in zip(begins, next_begins):  # noqa: B905 - one more end than begins when none
        # A block ends before the next BEGIN: searching 20000 characters past every header
        # for an END (and reading all of them as its body) was quadratic on many headers.
        end_m = _PEM_END_RE.search(text, m.end(), min(next_begin, m.end() + 20000))
        if end_m:
            body, end = text[m.end() : end_m.start()], end_m.end()
        else:  # the block was cut (chunk boundary, truncated paste): take the base64-ish lines
            tail = _PEM_BODY_RE.match(text, m.end())
            assert tail is not None  # a starred group: it matches, empty at the least
            body, end = tail.group(0), tail.end()
        if pem_body_ok(body):
            yield m.start(), end, "private_key"
    for m in _PUTTY_RE.finditer(text):
        if pem_body_ok(m.group("body")):
            yield m.start(), m.end(), "private_key"


def pem_body_ok(body: str) -> bool:
    """Real-looking base64 after the header (not "xxxx", "****", "..." or nothing at all)."""
    payload = "".join(
        line
        for line in (_PEM_LINE_STRIP_RE.sub("", raw) for raw in re.split(r"\\n|\r?\n", body))
        if _B64_LINE_RE.match(line)  # prose ("super secret key here") and "Proc-Type:" lines are not payload
    )
    # 24+ characters: a block cut by a chunk boundary may keep a single line of its key.
    # Not is_fake_token: DER encodes runs of zero bytes, so real keys hold "AAAAAAAA".
    if len(payload) < 24 or len(set(payload)) < 12 or longest_run(payload) > len(payload) // 3:
        return False
    return not any(s in body for s in ("...", "\u2026", "****"))
