"""The leak audit: rescan every text field a tier's store holds with the full detector.

Independent of the build: it reads the store as written, so a bug anywhere upstream
(a field the sanitiser missed, a rule added after the build, a store copied from
elsewhere) shows up here. Every ordinary table is read, every text column of every row:
chunks (text, heading path, IDs), documents (title, slug, tags, frontmatter), any table added
later, and every table of the tier's log file beside the store (:mod:`rag_assets.index.tier_logs`):
the ``search_log`` and ``answer_log`` (questions, queries, answers, sources; the session history
is the ``answer_log``). Only the full-text indexes are left out:
they are derived from the chunks, which are read. JSON values are read by structure, each
value with its key path (``frontmatter.db.password``), as the sanitiser reads them.

A finding names the row, the field and the kind, with a masked preview; the secret itself is
never printed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_assets.index import store, tier_logs
from rag_assets.privacy.identity import IdentityMap
from rag_assets.privacy.secrets import SecretDetector, SecretFinding, item_path, masked_preview

# Domains reserved for documentation and testing (RFC 2606, RFC 6761): an address there reaches no
# one, so "admin@example.com" in a published config sample is not personal data. The detector
# still redacts it in notes (the Safe tier's sanitiser is kept strict); the audit does not flag it.
_DOCUMENTATION_DOMAINS = ("example.com", "example.net", "example.org")
_DOCUMENTATION_TLDS = ("example", "test", "invalid", "localhost")


def is_documentation_address(address: str) -> bool:
    """True for an e-mail address at a domain reserved for examples (``me@example.com``, ``a@b.test``)."""
    domain = address.rpartition("@")[2].lower().rstrip(".")
    if domain.rpartition(".")[2] in _DOCUMENTATION_TLDS:
        return True
    return any(domain == d or domain.endswith("." + d) for d in _DOCUMENTATION_DOMAINS)


# Tables whose rows are named by their own column names (the store's two main tables);
# the fields of any other table are named "<table>.<column>".
_MAIN_TABLES = ("chunks", "documents")


@dataclass(frozen=True)
class AuditFinding:
    item_id: str  # a chunk ID, a document ID, or <table>#<id> for a row of another table
    field: str  # text, heading_path, title, slug, tags, frontmatter.<keys>, search_log.query, ...
    kind: str  # a secret kind, or identity:<kind> for a value the identity map should have replaced
    preview: str


@dataclass
class AuditReport:
    tier: str
    store_path: str
    exists: bool
    chunks_scanned: int = 0
    documents_scanned: int = 0
    rows_scanned: dict[str, int] = field(default_factory=dict)  # every table read, with its rows
    findings: list[AuditFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exists and not self.findings

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        return dict(sorted(counts.items()))


@dataclass(frozen=True)
class StoredText:
    """One text a reader of the store can see, and the key path it sits under (JSON values)."""

    item_id: str
    field: str
    text: str
    path: tuple[str, ...] = ()


def audit_store(
    path: Path, tier: str, detector: SecretDetector, identity_map: IdentityMap | None = None
) -> AuditReport:
    report = AuditReport(tier=tier, store_path=str(path), exists=path.is_file())
    if not report.exists:
        return report
    logs = tier_logs.log_path(path)
    for file in (path, logs) if logs.is_file() else (path,):
        with closing(store.connect(file, readonly=True)) as conn:
            for table in audited_tables(conn):
                for stored in _table_texts(conn, table, report):
                    report.findings.extend(_findings(stored, detector, identity_map))
    report.chunks_scanned = report.rows_scanned.get("chunks", 0)
    report.documents_scanned = report.rows_scanned.get("documents", 0)
    return report


def _findings(stored: StoredText, detector: SecretDetector, identity_map: IdentityMap | None) -> Iterator[AuditFinding]:
    text = stored.text
    secrets = detector.find_in_field(stored.path, text) if stored.path else detector.find(text)
    identities = list(identity_map.find(text)) if identity_map else []
    # Every finding is masked in every other's preview: two secrets a line apart are each other's context.
    spans = [(f.start, f.end) for f in secrets] + [(start, end) for _, start, end in identities]
    for finding in secrets:
        if finding.kind == "email" and is_documentation_address(text[finding.start : finding.end]):
            continue
        yield AuditFinding(stored.item_id, stored.field, finding.kind, masked_preview(text, finding, others=spans))
    for kind, start, end in identities:
        masked = masked_preview(text, SecretFinding(f"identity:{kind}", start, end, "identity-map"), others=spans)
        yield AuditFinding(stored.item_id, stored.field, f"identity:{kind}", masked)


def audited_tables(conn: sqlite3.Connection) -> list[str]:
    """Every ordinary table of the store; full-text tables and their shadow tables are derived."""
    tables = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall()
    virtual = [name for name, sql in tables if (sql or "").upper().startswith("CREATE VIRTUAL TABLE")]
    return [
        name
        for name, _ in tables
        if not name.startswith("sqlite_") and name not in virtual and not any(name.startswith(v + "_") for v in virtual)
    ]


def _table_texts(conn: sqlite3.Connection, table: str, report: AuditReport) -> Iterator[StoredText]:
    cursor = conn.execute(f'SELECT * FROM "{table}"')  # noqa: S608 (a name read from sqlite_master)
    columns = [d[0] for d in cursor.description]
    report.rows_scanned.setdefault(table, 0)  # a table an older store still holds is also in its log file
    for row in cursor:
        report.rows_scanned[table] += 1
        values = dict(zip(columns, row, strict=True))
        row_id = values.get("id")
        item_id = (
            str(row_id)
            if table in _MAIN_TABLES and row_id is not None
            else f"{table}#{row_id or report.rows_scanned[table]}"
        )
        for column, value in values.items():
            if isinstance(value, str) and value:
                name = column if table in _MAIN_TABLES else f"{table}.{column}"
                yield from column_texts(item_id, name, value)


def column_texts(item_id: str, name: str, value: str) -> Iterator[StoredText]:
    """A column's text; a JSON object or array is read by structure (keys, and each value
    with its key path), like the sanitiser reads frontmatter."""
    if value[:1] in "[{":
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, (dict, list)):
            yield from _json_texts(item_id, name, parsed, ())
            return
    yield StoredText(item_id, name, value)


def _json_texts(item_id: str, name: str, value: Any, path: tuple[str, ...]) -> Iterator[StoredText]:
    if isinstance(value, dict):
        for key, inner in value.items():
            key_path = (*path, str(key))
            yield StoredText(item_id, ".".join((name, *path)), str(key))
            yield from _json_texts(item_id, name, inner, key_path)
    elif isinstance(value, list):
        for inner in value:
            yield from _json_texts(item_id, name, inner, item_path(path))
    elif isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        text = str(value)
        if text:
            yield StoredText(item_id, ".".join((name, *path)), text, path)
