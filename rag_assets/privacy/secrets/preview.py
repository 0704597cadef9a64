"""Masked previews of findings, for the leak audit and the benchmark: never the secret itself."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag_assets.privacy.secrets.detector import SecretFinding

_LONG_TOKEN_RE = re.compile(r"[A-Za-z0-9+/=_\-.~]{16,}")
# How far past the preview's window a token is read, so one cut by the window's edge is judged
# by its whole length (a 40-character key cut to 15 would otherwise pass for a short word).
_TOKEN_REACH = 64


def _mask(value: str) -> str:
    return f"{value[:2]}\u2026[{len(value)} chars]"


def masked_preview(text: str, finding: SecretFinding, context: int = 24, others: Iterable[tuple[int, int]] = ()) -> str:
    """A one-line preview around the finding that never contains the secret: the secret part
    is shown as e.g. 'AK…[20 chars]' (at most the first 2 characters).

    The context is masked the same way where it holds what could be a secret too: the other
    findings of the same text (``others``, their (start, end): two passwords on adjacent lines
    are each other's context), other occurrences of the same value, and long tokens, whole
    or cut by the window's edge (the key id next to its secret key).
    """
    lo, hi = max(0, finding.start - context), min(len(text), finding.end + context)
    hidden = _hidden(text, finding, lo, hi, others)
    secret = text[finding.start : finding.end]
    return f"{_render(text, lo, finding.start, hidden)}{_mask(secret)}{_render(text, finding.end, hi, hidden)}"


def _hidden(text: str, finding: SecretFinding, lo: int, hi: int, others: Iterable[tuple[int, int]]) -> set[int]:
    """The positions in [lo, hi) that the preview must not show."""
    spans = [(m.start(), m.end()) for m in _LONG_TOKEN_RE.finditer(text, max(0, lo - _TOKEN_REACH), hi + _TOKEN_REACH)]
    spans += list(others)
    secret = text[finding.start : finding.end]
    if len(secret) >= 3:  # the same secret again in the context ("postgres:postgres@")
        at = text.find(secret, max(0, lo - len(secret)), hi + len(secret))
        while at >= 0:
            spans.append((at, at + len(secret)))
            at = text.find(secret, at + 1, hi + len(secret))
    return {i for start, end in spans for i in range(max(start, lo), min(end, hi))}


def _render(text: str, start: int, end: int, hidden: set[int]) -> str:
    """``text[start:end]`` on one line, each run of hidden positions shown as its mask."""
    out: list[str] = []
    i = start
    while i < end:
        j = i
        if i in hidden:
            while j < end and j in hidden:
                j += 1
            out.append(_mask(text[i:j]))
        else:
            while j < end and j not in hidden:
                j += 1
            out.append(text[i:j].replace("\r", " ").replace("\n", "\u23ce").replace("\t", " "))
        i = j
    return "".join(out)
