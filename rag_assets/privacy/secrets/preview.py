"""Masked previews of findings, for the leak audit and the benchmark: never the secret itself."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag_assets.privacy.secrets.detector import SecretFinding

_LONG_TOKEN_RE = re.compile(r"[A-Za-z0-9+/=_\-.~]{16,}")


def _mask(value: str) -> str:
    return f"{value[:2]}\u2026[{len(value)} chars]"


def masked_preview(text: str, finding: SecretFinding, context: int = 24) -> str:
    """A one-line preview around the finding that never contains the secret: the secret part
    is shown as e.g. 'AK…[20 chars]' (at most the first 2 characters).

    Long tokens in the surrounding context, and other occurrences of the same value, are
    abbreviated the same way: the context of one finding is often another secret (the
    key id next to its secret key).
    """
    before = text[max(0, finding.start - context) : finding.start]
    after = text[finding.end : finding.end + context]
    secret = text[finding.start : finding.end]

    def clean(s: str) -> str:
        if len(secret) >= 3:  # the same secret again in the context ("postgres:postgres@")
            s = s.replace(secret, _mask(secret))
        s = _LONG_TOKEN_RE.sub(lambda m: _mask(m.group(0)), s)
        return s.replace("\r", " ").replace("\n", "\u23ce").replace("\t", " ")

    return f"{clean(before)}{_mask(secret)}{clean(after)}"
