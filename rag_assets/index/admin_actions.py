"""The ``admin_actions`` table of the public tier's log file: who did what in the admin console, and when.

One row per action of ``/admin`` (add or remove a vault, launch an ingest, run a leak
audit), refused ones too: when (UTC), who (the requester's name: a token's, or
``loopback``), the action, its tier, its target (a vault name), the outcome and a detail
(the run id, the refusal's reason, the number of findings). It lives in the log file of the
public store (:mod:`rag_assets.index.tier_logs`) because every tier's admin reads it; it holds
names of vaults and tiers, never note text. The functions take the public store's path.
"""

from __future__ import annotations

import time
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rag_assets.index import tier_logs

COLUMNS = "at, who, action, tier, target, outcome, detail"


@dataclass(frozen=True)
class AdminAction:
    """One row of ``admin_actions``."""

    who: str
    action: str  # add_vault | remove_vault | ingest | audit
    outcome: str  # ok | started | refused | failed
    tier: str | None = None
    target: str | None = None
    detail: str | None = None
    at: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def record_action(path: Path, action: AdminAction) -> AdminAction:
    """Append ``action`` (stamped now unless it has a time) and return it as written."""
    at = action.at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tier_logs.append(
        path,
        f"INSERT INTO admin_actions({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (at, action.who, action.action, action.tier, action.target, action.outcome, action.detail),
    )
    return AdminAction(action.who, action.action, action.outcome, action.tier, action.target, action.detail, at)


def recent_actions(path: Path, limit: int = 20) -> list[AdminAction]:
    """The latest ``limit`` actions, newest first ([] before anything was logged)."""
    if not tier_logs.exists(path):
        return []
    with closing(tier_logs.connect(path)) as conn:
        rows = conn.execute(f"SELECT {COLUMNS} FROM admin_actions ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
    return [AdminAction(who=w, action=a, outcome=o, tier=t, target=g, detail=d, at=at) for at, w, a, t, g, o, d in rows]
