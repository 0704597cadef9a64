"""The secret detector: run the rule table over a text, merge the findings, redact them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rag_assets.privacy.secrets.engine import Raw, RuleTable, load_table


@dataclass(frozen=True)
class SecretFinding:
    """One secret: ``text[start:end]`` is the value to redact."""

    kind: str
    start: int
    end: int
    rule: str


@dataclass(frozen=True)
class Redaction:
    """The redacted text and how many findings of each kind were replaced."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)


class SecretDetector:
    """Finds secrets in text; build once, call :meth:`find`/:meth:`redact` many times.

    ``table`` is the compiled rule table; the default is the one shipped in the package
    (rules.toml), compiled once per process.
    """

    def __init__(self, table: RuleTable | None = None) -> None:
        self.table = table if table is not None else load_table()

    def find(self, text: str) -> list[SecretFinding]:
        """Sorted, non-overlapping findings; overlapping ones merge and keep the more specific kind."""
        if not text:
            return []
        return merge(self.table.candidates(text))

    def redact(self, text: str) -> Redaction:
        """``text`` with every finding replaced by ``[REDACTED:<kind>]``."""
        findings = self.find(text)
        if not findings:
            return Redaction(text, {})
        out: list[str] = []
        pos = 0
        for f in findings:
            out.append(text[pos : f.start])
            out.append(f"[REDACTED:{f.kind}]")
            pos = f.end
        out.append(text[pos:])
        return Redaction("".join(out), dict(Counter(f.kind for f in findings)))


def merge(raw: list[Raw]) -> list[SecretFinding]:
    """Union of overlapping spans; the kind and rule of the highest-priority (then longest) member."""
    if not raw:
        return []
    raw.sort(key=lambda r: (r[0], -r[1]))
    merged: list[SecretFinding] = []
    cur_start, cur_end, best = raw[0][0], raw[0][1], raw[0]
    for item in raw[1:]:
        start, end = item[0], item[1]
        if start < cur_end:  # overlap: grow the span, keep the more specific kind
            cur_end = max(cur_end, end)
            if (item[4], item[1] - item[0]) > (best[4], best[1] - best[0]):
                best = item
            continue
        merged.append(SecretFinding(best[2], cur_start, cur_end, best[3]))
        cur_start, cur_end, best = start, end, item
    merged.append(SecretFinding(best[2], cur_start, cur_end, best[3]))
    return merged
