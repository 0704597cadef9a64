"""The link report of a vault as its tier store holds it (for `rag check`): read, never rebuilt.

Each note's ``documents.links`` (see :mod:`rag_assets.index.store`) records how every distinct
link resolved, so the report needs no parse of the vault: counts by status, and the links
that did not resolve cleanly (unresolved, ambiguous, outside the vault, a missing heading or
block), in note order.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from rag_assets.index import store
from rag_assets.ingest.link_resolution import strongly_connected

MAX_LISTED = 50


@dataclass
class StoredLinkReport:
    """Distinct links per status (``note``, ``file``, ``unresolved``, ``ambiguous``, ``outside``),
    problems (a missing heading or block), and the first issues as lines."""

    vault: str
    statuses: Counter = field(default_factory=Counter)
    problems: int = 0
    embed_loops: int = 0  # groups of notes that embed each other, or a note embedding itself
    issues: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Distinct links per note, every status."""
        return sum(self.statuses.values())

    def summary(self) -> str:
        """One line for `rag check`."""
        resolved = self.statuses["note"] + self.statuses["file"]
        bad = ", ".join(f"{self.statuses[s]} {s}" for s in ("unresolved", "ambiguous", "outside") if self.statuses[s])
        missing = f", {self.problems} to a missing heading or block" if self.problems else ""
        loops = f"; {self.embed_loops} embed loop(s)" if self.embed_loops else ""
        return (
            f"{self.total} distinct links per note: {resolved} resolved{missing}" + (f"; {bad}" if bad else "") + loops
        )


def stored_link_report(path: Path, vault: str) -> StoredLinkReport | None:
    """The report of ``vault`` from the store at ``path``; None when the store does not hold it
    (or predates stored links)."""
    if not path.is_file():
        return None
    report = StoredLinkReport(vault)
    try:
        with closing(store.connect(path, readonly=True)) as conn:
            rows = conn.execute("SELECT id, links FROM documents WHERE collection = ? ORDER BY id", (vault,)).fetchall()
    except sqlite3.OperationalError:
        return None
    if not rows:
        return None
    embeds: dict[str, list[str]] = {}
    for doc_id, links in rows:
        parsed = json.loads(links or "[]")
        embeds[doc_id] = sorted(
            {link["to"] for link in parsed if link.get("kind") == "embed" and link.get("status") == "note"}
        )
        for link in parsed:
            status = link.get("status", "unresolved")
            report.statuses[status] += 1
            report.problems += bool(link.get("problem"))
            if (status not in ("note", "file") or link.get("problem")) and len(report.issues) < MAX_LISTED:
                report.issues.append(f"{doc_id}: {_written(link)}: {_why(link)}")
    for group in strongly_connected(embeds):
        if len(group) > 1 or group[0] in embeds.get(group[0], ()):
            report.embed_loops += 1
            what = "embeds itself" if len(group) == 1 else "embed loop: " + " -> ".join(sorted(group)[:10])
            report.issues.append(f"{sorted(group)[0]}: {what} (bounded: a note's text is never repeated)")
    return report


def _written(link: dict) -> str:
    """The link as written: target, ``#heading``, ``#^block``."""
    heading = f"#{link['heading']}" if link.get("heading") else ""
    block = f"#^{link['block']}" if link.get("block") else ""
    return (link.get("target") or "(this note)") + heading + block


def _why(link: dict) -> str:
    """Why the link is listed: its problem, or its status in words."""
    if link.get("problem"):
        return link["problem"]
    return {
        "ambiguous": "several notes match: " + ", ".join(link.get("candidates", [])[:10]),
        "outside": "points outside the vault; never followed",
    }.get(link.get("status", ""), "no note or file of that name in the vault")
