"""Pages and collections as a tier's store holds them: a page's Markdown (or one section of it,
by heading anchor) and the collections with their counts and freshness.

The store keeps chunks, not files, so a page is put back together from its chunks: chunk 0's
context prefix (title, description, tags: :func:`rag_assets.ingest.chunking.context_prefix`) is
dropped and consecutive chunks are joined without their overlap
(:func:`rag_assets.search.passages.join_consecutive_chunks`), which gives the body the chunker
cut, verbatim (unless a page repeats a long run of words across a chunk boundary: the overlap is
then found longer than it was, and the repeat is lost once). Sections are found by parsing that body again (the chunker's own
:class:`~rag_assets.ingest.blocks.Layout`, so a ``#`` line in a code fence is no heading); a
section runs from its heading to the next heading of the same or a higher level. Anchors are
the citation tags' (:func:`~rag_assets.search.passages.heading_anchor`), a repeated one
suffixed ``-1``, ``-2`` as GitHub and Hugo do.

Reads only (a read-only SQLite connection per call); nothing here knows about MCP or HTTP.
"""

from __future__ import annotations

import difflib
import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_assets.index import store
from rag_assets.index.freshness import age_label
from rag_assets.index.params import SearchError
from rag_assets.ingest.blocks import Layout
from rag_assets.ingest.chunking import context_prefix
from rag_assets.search.passages import citation_tag, heading_anchor, join_consecutive_chunks


class DocumentNotFound(SearchError):
    """No such collection, page or section in the store; the message names what exists."""


@dataclass(frozen=True)
class Section:
    """One heading of a page: its anchor, text, level and where its section lies in the body."""

    anchor: str
    heading: str
    level: int
    start: int
    end: int

    def to_json(self) -> dict[str, Any]:
        return {"anchor": self.anchor, "heading": self.heading, "level": self.level}


@dataclass
class PageDocument:
    """A page read back from a store: its metadata and Markdown body (or one section of it)."""

    collection: str
    slug: str
    title: str
    tags: list[str]
    updated_at: str | None
    frontmatter: dict[str, Any]
    chunk_count: int
    markdown: str
    sections: list[Section] = field(default_factory=list)
    section: Section | None = None  # set when one section was asked for: ``markdown`` is that section

    def to_json(self) -> dict[str, Any]:
        path = [self.section.heading] if self.section else []
        return {
            "collection": self.collection,
            "slug": self.slug,
            "title": self.title,
            "citation": citation_tag(self.collection, self.slug, path),
            "tags": list(self.tags),
            "updatedAt": self.updated_at,
            "frontmatter": dict(self.frontmatter),
            "chunks": self.chunk_count,
            "section": self.section.to_json() if self.section else None,
            "sections": [s.to_json() for s in self.sections],
            "markdown": self.markdown,
        }


@dataclass(frozen=True)
class CollectionInfo:
    """One collection (or vault) of a store: its size and when it was last indexed."""

    name: str
    documents: int
    chunks: int
    indexed_at: str | None
    freshness: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "documents": self.documents,
            "chunks": self.chunks,
            "indexedAt": self.indexed_at,
            "freshness": self.freshness,
        }


# --------------------------------------------------------------------------- collections


def list_collections(path: Path) -> list[CollectionInfo]:
    """The store's collections, by name, with document and chunk counts and index time."""
    summary = store.summarise(path)
    if summary is None:
        raise SearchError(f"no store at {path}; run `rag build` first")
    with closing(store.connect(path, readonly=True)) as conn:
        indexed = dict(conn.execute("SELECT collection, indexed_at FROM sources").fetchall())
    out = []
    for name in sorted(summary.per_collection):
        counts = summary.per_collection[name]
        when = indexed.get(name) or summary.built_at
        out.append(CollectionInfo(name, counts["documents"], counts["chunks"], when, age_label(when)[0]))
    return out


def collection_names(path: Path) -> list[str]:
    """The names of the collections (or vaults) that have pages in the store."""
    with closing(store.connect(path, readonly=True)) as conn:
        return [c for (c,) in conn.execute("SELECT DISTINCT collection FROM documents ORDER BY collection")]


# --------------------------------------------------------------------------- pages


def read_document(path: Path, collection: str, slug: str, anchor: str | None = None) -> PageDocument:
    """The page ``collection/slug`` of the store at ``path``, whole or the section ``anchor``.

    DocumentNotFound (a SearchError) when the collection, page or anchor does not exist; its
    message lists the nearest names so the caller can correct the request.
    """
    if not path.is_file():
        raise SearchError(f"no store at {path}; run `rag build` first")
    with closing(store.connect(path, readonly=True)) as conn:
        row = conn.execute(
            "SELECT id, title, tags, updated_at, chunk_count, frontmatter FROM documents WHERE collection = ? AND slug = ?",
            (collection, slug),
        ).fetchone()
        if row is None:
            raise _not_found(conn, collection, slug)
        doc_id, title, tags, updated_at, chunk_count, frontmatter = row
        texts = [
            t for (t,) in conn.execute("SELECT text FROM chunks WHERE document_id = ? ORDER BY chunk_index", (doc_id,))
        ]
    tags_list = json.loads(tags or "[]")
    front = json.loads(frontmatter or "{}")
    body = page_body(texts, context_prefix(title or "", _text(front.get("description")), tags_list))
    page = PageDocument(
        collection=collection,
        slug=slug,
        title=title or "",
        tags=tags_list,
        updated_at=updated_at,
        frontmatter=front,
        chunk_count=chunk_count or len(texts),
        markdown=body,
        sections=sections_of(body),
    )
    if anchor:
        page.section = _find_section(page, anchor)
        page.markdown = body[page.section.start : page.section.end].rstrip() + "\n"
    return page


def page_body(chunk_texts: list[str], prefix: str) -> str:
    """The body the chunks were cut from: chunk 0's context prefix dropped, overlaps removed."""
    if not chunk_texts:
        return ""
    first = chunk_texts[0]
    if prefix and first.startswith(prefix):
        first = first[len(prefix) :]
    text = first.strip("\n")
    for chunk in chunk_texts[1:]:
        text = join_consecutive_chunks(text, chunk.strip("\n"))
    return text.rstrip() + "\n"


def sections_of(body: str) -> list[Section]:
    """Every heading of the body (outside code), with its section's extent and unique anchor."""
    headings = Layout(body).headings
    seen: dict[str, int] = {}
    out = []
    for i, heading in enumerate(headings):
        end = next((h.start for h in headings[i + 1 :] if h.level <= heading.level), len(body))
        text = heading.path[-1] if heading.path else ""
        anchor = heading_anchor(text)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        out.append(Section(anchor if count == 0 else f"{anchor}-{count}", text, heading.level, heading.start, end))
    return out


def _find_section(page: PageDocument, anchor: str) -> Section:
    wanted = anchor.strip().lstrip("#").strip()
    for section in page.sections:
        if section.anchor == wanted or section.anchor == heading_anchor(wanted):
            return section
    known = [s.anchor for s in page.sections]
    hint = f"its anchors: {', '.join(known)}" if known else "the page has no headings; ask for the whole page"
    raise DocumentNotFound(f"no section #{wanted} in {page.collection}/{page.slug}; {hint}")


def _not_found(conn: sqlite3.Connection, collection: str, slug: str) -> DocumentNotFound:
    collections = [c for (c,) in conn.execute("SELECT DISTINCT collection FROM documents ORDER BY collection")]
    if collection not in collections:
        return DocumentNotFound(
            f"no collection {collection!r} in this store; its collections: {', '.join(collections) or 'none'}"
        )
    slugs = [s for (s,) in conn.execute("SELECT slug FROM documents WHERE collection = ?", (collection,))]
    near = difflib.get_close_matches(slug, slugs, n=5, cutoff=0.4)
    hint = f"; did you mean {', '.join(near)}?" if near else "; search for it to find its slug"
    return DocumentNotFound(f"no page {slug!r} in collection {collection!r}{hint}")


def _text(value: Any) -> str:
    return "" if value is None else " ".join(str(value).split())
