"""The secret detector: run the rule table over a text, merge the findings, redact them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from rag_assets.privacy.secrets.engine import Raw, RuleTable, load_table
from rag_assets.privacy.secrets.structured import field_line


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
        return redacted(text, self.find(text))

    def find_in_field(self, path: Sequence[str], value: str) -> list[SecretFinding]:
        """Findings in one structured value (a frontmatter entry), offsets into ``value``.

        ``FmPassw0rd`` alone is a word; under ``password:`` it is a secret. So the value is read
        with its key path, as ``<keys>: <value>`` (``structured.field_line``), and the findings
        that cover it are kept, clipped to it.
        """
        line, start, end = field_line(path, value)
        found = []
        for f in self.find(line):
            lo, hi = max(f.start, start), min(f.end, end)
            if lo < hi:
                found.append(SecretFinding(f.kind, lo - start, hi - start, f.rule))
        return found

    def redact_field(self, path: Sequence[str], value: str) -> Redaction:
        """``value`` redacted by :meth:`find_in_field`."""
        return redacted(value, self.find_in_field(path, value))


def redacted(text: str, findings: list[SecretFinding]) -> Redaction:
    """``text`` with each of the sorted, non-overlapping ``findings`` replaced by its label."""
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
