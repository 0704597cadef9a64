"""Safe-tier sanitisation: secrets become ``[REDACTED:<kind>]``, identities become placeholders.

Runs in memory right after a note is parsed, before it is chunked, so every later step
(the chunker, the embedding cache, the provider, the store and its FTS table, Dagster's
metadata and logs) only ever sees sanitised text. Every field that reaches the store is
sanitised, not just the body: the title, description, tags, frontmatter values, the slug
and path (file names can name hosts too), a note's links (target, heading, block id, display
text), aliases and block ids, and the reasons of skipped files (a YAML error quotes the line
it failed on).

Sanitised by structure, not string by string: a frontmatter value is read with its key path
(``password: x``, ``db: {password: x}``, a list under ``passwords:``), and in the body a
table cell with its column header, a definition with its term, a value with its label
(the detector's structured scanner, ``secrets/structured.py``).

Secrets go first, then the identity map: a hostname inside a database URI must not break
the URI pattern before its password is found.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rag_assets.privacy.identity import IdentityMap
from rag_assets.privacy.secrets import Redaction, SecretDetector, item_path, source_digest
from rag_assets.records import Document, Link, ParsedCollection, SkippedFile


@dataclass
class SanitizeTally:
    """How many values were replaced, per kind (for metadata and logs; never the values)."""

    secrets: Counter = field(default_factory=Counter)
    identities: Counter = field(default_factory=Counter)

    def add(self, other: SanitizeTally) -> None:
        self.secrets.update(other.secrets)
        self.identities.update(other.identities)

    @property
    def total(self) -> int:
        return sum(self.secrets.values()) + sum(self.identities.values())


class Sanitizer:
    """Secret detection plus the identity map, applied to text, documents and collections."""

    def __init__(self, identity_map: IdentityMap, detector: SecretDetector | None = None) -> None:
        self.identity_map = identity_map
        self.detector = detector or SecretDetector()

    @classmethod
    def from_file(cls, identity_map_path: Path | None) -> Sanitizer:
        identity = IdentityMap.load(identity_map_path) if identity_map_path else IdentityMap.empty()
        return cls(identity)

    @property
    def fingerprint(self) -> str:
        """Changes whenever the rules change, so a new map or detector re-sanitises every note."""
        return rules_fingerprint(self.identity_map)

    def text(self, text: str, tally: SanitizeTally | None = None) -> str:
        if not text:
            return text
        return self._apply(self.detector.redact(text), tally)

    def field(self, path: Sequence[str], value: str, tally: SanitizeTally | None = None) -> str:
        """One structured value, read with its key path (``db.password: value``) so that a
        secret the key names is found although the value alone looks like a word."""
        if not value:
            return value
        return self._apply(self.detector.redact_field(path, value), tally)

    def _apply(self, redaction: Redaction, tally: SanitizeTally | None) -> str:
        """Secrets first, then the identity map (a host inside a URI must not hide its password)."""
        replaced, identity_counts = self.identity_map.apply(redaction.text)
        if tally is not None:
            tally.secrets.update(redaction.counts)
            tally.identities.update(identity_counts)
        return replaced

    def value(self, value: Any, tally: SanitizeTally, path: tuple[str, ...] = ()) -> Any:
        """Frontmatter values, recursively, each with its key path (keys are sanitised too: a key
        can be a hostname). Numbers are read as text: ``pin: 48213907`` is an int to YAML."""
        if isinstance(value, str):
            return self.field(path, value, tally)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            as_text = str(value)
            sanitised = self.field(path, as_text, tally)
            return value if sanitised == as_text else sanitised
        if isinstance(value, list):
            return [self.value(v, tally, item_path(path)) for v in value]
        if isinstance(value, dict):
            return {self.text(str(k), tally): self.value(v, tally, (*path, str(k))) for k, v in value.items()}
        return value

    def document(self, doc: Document, tally: SanitizeTally) -> Document:
        body = self.text(doc.body, tally)
        return replace(
            doc,
            slug=self.text(doc.slug, tally),
            path=self.text(doc.path, tally),
            title=self.text(doc.title, tally),
            description=self.text(doc.description, tally),
            tags=[self.text(t, tally) for t in doc.tags],
            frontmatter=self.value(doc.frontmatter, tally),
            body=body,
            links=[self.link(link, tally) for link in doc.links],
            aliases=[self.text(a, tally) for a in doc.aliases],
            anchors=[self.text(a, tally) for a in doc.anchors],
            blocks={self.text(k, tally): self.text(v, tally) for k, v in doc.blocks.items()},
            # The hash of the raw file would let anyone confirm a guess of its contents.
            content_sha256=hashlib.sha256(body.encode("utf-8")).hexdigest(),
        )

    def link(self, link: Link, tally: SanitizeTally) -> Link:
        """A vault note's link: its target, heading, block id, display text and property key."""
        return Link(
            target=self.text(link.target, tally),
            heading=self.text(link.heading, tally),
            block=self.text(link.block, tally),
            display=self.text(link.display, tally),
            kind=link.kind,
            source=self.text(link.source, tally),
        )

    def collection(self, parsed: ParsedCollection) -> tuple[ParsedCollection, SanitizeTally]:
        """A parsed vault with every document and skip reason sanitised."""
        tally = SanitizeTally()
        documents = [self.document(d, tally) for d in parsed.documents]
        skipped = [SkippedFile(self.text(s.path, tally), self.text(s.reason, tally)) for s in parsed.skipped]
        # Two notes whose names differ only by a redacted value would now share a slug.
        seen: dict[str, str] = {}
        unique: list[Document] = []
        for doc in documents:
            if doc.slug in seen:
                skipped.append(
                    SkippedFile(doc.path, f"same slug as {seen[doc.slug]} once sanitised; rename one of them")
                )
                continue
            seen[doc.slug] = doc.path
            unique.append(doc)
        return replace(parsed, documents=unique, skipped=skipped, cached_chunks={}), tally


def rules_fingerprint(identity_map: IdentityMap) -> str:
    """The identity map's rules plus the detector's rule table and code."""
    digest = hashlib.sha256()
    digest.update(identity_map.fingerprint().encode())
    digest.update(source_digest().encode())
    return digest.hexdigest()


def fingerprint_for(identity_map_path: Path | None) -> str:
    """The Safe rules' fingerprint without building the detector (for sensors and `rag check`)."""
    return rules_fingerprint(IdentityMap.load(identity_map_path) if identity_map_path else IdentityMap.empty())
