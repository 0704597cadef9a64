"""The leak audit: rescan every stored chunk of a tier with the full detector.

Independent of the build: it reads the store as written, so a bug anywhere upstream
(a field the sanitiser missed, a rule added after the build, a store copied from
elsewhere) shows up here. A finding names the chunk, the field and the kind, with a
masked preview; the secret itself is never printed.
"""

from __future__ import annotations

import json
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from rag_assets.index import store
from rag_assets.privacy.identity import IdentityMap
from rag_assets.privacy.secrets import SecretDetector, SecretFinding, masked_preview


@dataclass(frozen=True)
class AuditFinding:
    item_id: str  # a chunk ID, or a document ID for document fields
    field: str  # text, heading_path, title, slug, tags
    kind: str  # a secret kind, or identity:<kind> for a value the identity map should have replaced
    preview: str


@dataclass
class AuditReport:
    tier: str
    store_path: str
    exists: bool
    chunks_scanned: int = 0
    documents_scanned: int = 0
    findings: list[AuditFinding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exists and not self.findings

    def kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for f in self.findings:
            counts[f.kind] = counts.get(f.kind, 0) + 1
        return dict(sorted(counts.items()))


def audit_store(
    path: Path, tier: str, detector: SecretDetector, identity_map: IdentityMap | None = None
) -> AuditReport:
    report = AuditReport(tier=tier, store_path=str(path), exists=path.is_file())
    if not report.exists:
        return report
    for item_id, field_name, text, is_chunk in _stored_texts(path):
        if is_chunk and field_name == "text":
            report.chunks_scanned += 1
        elif not is_chunk and field_name == "title":
            report.documents_scanned += 1
        for finding in detector.find(text):
            report.findings.append(AuditFinding(item_id, field_name, finding.kind, masked_preview(text, finding)))
        for kind, start, end in identity_map.find(text) if identity_map else ():
            masked = masked_preview(text, SecretFinding(f"identity:{kind}", start, end, "identity-map"))
            report.findings.append(AuditFinding(item_id, field_name, f"identity:{kind}", masked))
    return report


def _stored_texts(path: Path) -> Iterator[tuple[str, str, str, bool]]:
    """(id, field, text, is_chunk) for every text a reader of the store can see."""
    with closing(store.connect(path, readonly=True)) as conn:
        for chunk_id, text, heading_path in conn.execute("SELECT id, text, heading_path FROM chunks"):
            yield chunk_id, "text", text, True
            headings = " › ".join(json.loads(heading_path or "[]"))
            if headings:
                yield chunk_id, "heading_path", headings, True
            # The chunk ID embeds the document slug, which came from a file name.
            yield chunk_id, "id", chunk_id, True
        for doc_id, slug, title, tags in conn.execute("SELECT id, slug, title, tags FROM documents"):
            yield doc_id, "title", title or "", False
            yield doc_id, "slug", slug, False
            tag_text = ", ".join(json.loads(tags or "[]"))
            if tag_text:
                yield doc_id, "tags", tag_text, False
