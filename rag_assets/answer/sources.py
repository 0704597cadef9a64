"""The numbered sources of an answer: the passages of the packed context (or, when nothing is
relevant enough, the nearest pages), with what a reader needs to open each one."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rag_assets.index import store
from rag_assets.index.params import Hit
from rag_assets.search.context import TAG_SEPARATOR, PackedContext
from rag_assets.search.passages import PASSAGE_SEPARATOR, heading_anchor, note_citation, obsidian_uri

# Frontmatter keys a page may give its public address in (Hugo: url, permalink).
URL_KEYS = ("url", "permalink")


@dataclass(frozen=True)
class Source:
    """One numbered source: ``[n]`` in the prompt and in the answer."""

    n: int
    id: str  # the first chunk of the passage
    collection: str
    slug: str
    title: str
    heading_path: list[str]
    text: str  # exactly what the model was given
    relevance: float
    url: str | None = None
    ids: list[str] = field(default_factory=list)
    document_id: str = ""
    cite: str = ""  # a vault note's Obsidian link, ``[[Note#Heading]]`` (:func:`as_notes`)

    @property
    def anchor(self) -> str:
        return heading_anchor(self.heading_path[-1]) if self.heading_path else ""

    def citation_json(self) -> dict[str, Any]:
        """The shape of ``citations`` in answers (``rag ask --json``, POST /ask); a vault note's
        carries ``cite``, its Obsidian link."""
        out = {
            "n": self.n,
            "id": self.id,
            "collection": self.collection,
            "slug": self.slug,
            "title": self.title,
            "headingPath": list(self.heading_path),
        }
        if self.cite:
            out["cite"] = self.cite
        return out

    def to_json(self) -> dict[str, Any]:
        """The shape of ``sources`` (the SSE ``sources`` event, ``retrieval.sources``)."""
        return {
            **self.citation_json(),
            "anchor": self.anchor,
            "url": self.url,
            "relevance": round(self.relevance, 4),
            "text": self.text,
        }


def passage_texts(packed: PackedContext) -> list[str]:
    """Each cited passage's text, cut out of the packed context by its citation tag."""
    tags = [c["tag"] for c in packed.citations]
    texts: list[str] = []
    position = 0
    for i, tag in enumerate(tags):
        start = packed.text.index(tag, position) + len(tag)
        if i + 1 < len(tags):
            end = packed.text.index(PASSAGE_SEPARATOR + tags[i + 1], start)
        else:
            end = len(packed.text)
        body = packed.text[start:end]
        texts.append(body[len(TAG_SEPARATOR) :] if body.startswith(TAG_SEPARATOR) else body)
        position = end
    return texts


def sources_from_context(
    packed: PackedContext, hits: Sequence[Hit], urls: Mapping[str, str] | None = None
) -> list[Source]:
    """The packed passages as numbered sources, in the order the model sees them."""
    relevance = {h.id: h.relevance for h in hits}
    documents = {h.id: h.document_id for h in hits}
    urls = urls or {}
    sources = []
    for n, (citation, text) in enumerate(zip(packed.citations, passage_texts(packed)), start=1):
        ids = list(citation["ids"])
        document_id = documents.get(ids[0], "")
        sources.append(
            Source(
                n=n,
                id=citation["id"],
                collection=citation["collection"],
                slug=citation["slug"],
                title=citation["title"],
                heading_path=list(citation["headingPath"]),
                text=text,
                relevance=max(relevance.get(i, 0.0) for i in ids),
                url=urls.get(document_id),
                ids=ids,
                document_id=document_id,
            )
        )
    return sources


def sources_from_hits(hits: Sequence[Hit], urls: Mapping[str, str] | None = None) -> list[Source]:
    """Pages as numbered sources (the nearest pages shown when the answer abstains)."""
    urls = urls or {}
    return [
        Source(
            n=n,
            id=h.id,
            collection=h.collection,
            slug=h.slug,
            title=h.title,
            heading_path=list(h.heading_path),
            text=h.text,
            relevance=h.relevance,
            url=urls.get(h.document_id),
            ids=[h.id],
            document_id=h.document_id,
        )
        for n, h in enumerate(hits, start=1)
    ]


def as_notes(sources: Sequence[Source]) -> list[Source]:
    """Vault notes' sources (the Safe and Private tiers): each cited as Obsidian links it,
    ``[[Note#Heading]]``, and addressed by the ``obsidian://open`` URI of its note (the vault is
    the collection; in the Safe tier both names are the sanitised ones the store holds)."""
    return [
        replace(s, cite=note_citation(s.slug, s.heading_path), url=obsidian_uri(s.collection, s.slug)) for s in sources
    ]


def page_urls(store_path: Path, document_ids: Iterable[str]) -> dict[str, str]:
    """The public address each page's frontmatter gives (``url`` or ``permalink``), by document id;
    pages without one are left out. Only ``http(s)://`` addresses and site paths (``/...``) count."""
    wanted = sorted(set(d for d in document_ids if d))
    if not wanted or not store_path.is_file():
        return {}
    marks = ",".join("?" * len(wanted))
    try:
        with closing(store.connect(store_path, readonly=True)) as conn:
            rows = conn.execute(f"SELECT id, frontmatter FROM documents WHERE id IN ({marks})", wanted).fetchall()
    except sqlite3.Error:
        return {}
    found = {}
    for document_id, frontmatter in rows:
        try:
            fields = json.loads(frontmatter or "{}")
        except ValueError:
            continue
        for key in URL_KEYS:
            value = fields.get(key) if isinstance(fields, dict) else None
            if isinstance(value, str) and value.startswith(("http://", "https://", "/")):
                found[document_id] = value
                break
    return found
