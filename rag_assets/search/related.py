"""A note's neighbours in its tier's store: the notes it links to, those that link to it, and
the nearest notes by vector, each with the reason it is listed.

Links and backlinks are read from the store's ``documents.links`` and ``documents.backlinks``
(resolved at build time within the note's own vault: :mod:`rag_assets.ingest.link_resolution`),
so they never name a note of another vault or tier. The nearest notes are found in the tier's
loaded matrix (the same on the SQLite and PostgreSQL backends: the latter's local mirror holds
the vectors): the note's chunk vectors averaged, every other note scored by its best chunk.
Reads only; nothing here knows about the CLI, HTTP or MCP.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rag_assets.index import store
from rag_assets.index.params import SearchError
from rag_assets.search.documents import DocumentNotFound
from rag_assets.search.retrieval import LoadedIndex, SearchIndex

DEFAULT_SIMILAR = 5
MAX_SIMILAR = 50
MAX_LISTED = 500  # links or backlinks listed per note (a note may hold thousands): the count is complete


@dataclass(frozen=True)
class RelatedNote:
    """One neighbour: which note, how it relates (``links_to``, ``linked_from``, ``similar``) and why."""

    collection: str
    slug: str
    title: str
    relation: str
    reason: str
    score: float | None = None  # cosine, for ``similar``

    def to_json(self) -> dict[str, Any]:
        """The JSON of the CLI, ``/related`` and the MCP tool."""
        out: dict[str, Any] = {
            "collection": self.collection,
            "slug": self.slug,
            "title": self.title,
            "relation": self.relation,
            "reason": self.reason,
        }
        if self.score is not None:
            out["score"] = round(self.score, 4)
        return out


@dataclass
class Related:
    """A note and its neighbours; ``unresolved``: its links that name no note (with why)."""

    collection: str
    slug: str
    title: str
    links: list[RelatedNote] = field(default_factory=list)
    backlinks: list[RelatedNote] = field(default_factory=list)
    similar: list[RelatedNote] = field(default_factory=list)
    unresolved: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # links, backlinks before MAX_LISTED

    def to_json(self) -> dict[str, Any]:
        """The JSON of the CLI, ``/related`` and the MCP tool."""
        return {
            "collection": self.collection,
            "slug": self.slug,
            "title": self.title,
            "links": [r.to_json() for r in self.links],
            "backlinks": [r.to_json() for r in self.backlinks],
            "similar": [r.to_json() for r in self.similar],
            "unresolved": self.unresolved,
            "counts": self.counts,
        }


def find_note(data: LoadedIndex, note: str, collection: str | None = None) -> str:
    """The document id ``note`` names: ``collection/slug``, a slug, or a title or file name
    (case-insensitive); DocumentNotFound naming the candidates when none or several match."""
    wanted = note.strip().strip("/")
    if not wanted:
        raise SearchError("name a note: collection/slug, a slug, or its title")
    docs = {i: d for i, d in data.documents.items() if collection is None or d["collection"] == collection}
    if wanted in docs:
        return wanted
    low = wanted.lower().removesuffix(".md")
    for match in (
        lambda d: d["slug"].lower() == low,
        lambda d: d["slug"].lower().rsplit("/", 1)[-1] == low or d["title"].lower() == low,
    ):
        found = sorted(i for i, d in docs.items() if match(d))
        if len(found) == 1:
            return found[0]
        if found:
            raise DocumentNotFound(f"{note!r} names several notes: {', '.join(found[:10])}; give collection/slug")
    where = f" in collection {collection!r}" if collection else ""
    raise DocumentNotFound(f"no note {note!r}{where}; give collection/slug as search hits show it")


def related_notes(index: SearchIndex, note: str, *, collection: str | None = None, k: int = DEFAULT_SIMILAR) -> Related:
    """The note ``note`` names in ``index``'s tier, with its links, backlinks and ``k`` nearest notes."""
    if not 0 <= k <= MAX_SIMILAR:
        raise SearchError(f"k must be between 0 and {MAX_SIMILAR}")
    data = index.loaded()
    doc_id = find_note(data, note, collection)
    doc = data.documents[doc_id]
    links, backlinks = _stored_links(index, doc_id)
    related = Related(doc["collection"], doc["slug"], doc["title"])
    related.counts = {"links": len(links), "backlinks": len(backlinks)}
    related.links = _linked(data, links[:MAX_LISTED], outgoing=True)
    related.backlinks = _linked(data, backlinks[:MAX_LISTED], outgoing=False)
    related.unresolved = [
        {
            k: v
            for k, v in link.items()
            if k in ("target", "heading", "block", "kind", "status", "candidates", "problem")
        }
        for link in links[:MAX_LISTED]
        if link.get("status") not in ("note", "file") or link.get("problem")
    ]
    related.similar = _similar(data, doc_id, k)
    return related


def _stored_links(index: SearchIndex, doc_id: str) -> tuple[list[dict], list[dict]]:
    """The note's stored links and backlinks (none from a store that predates them)."""
    with closing(store.connect(index.path, readonly=True)) as conn:
        try:
            row = conn.execute("SELECT links, backlinks FROM documents WHERE id = ?", (doc_id,)).fetchone()
        except sqlite3.OperationalError:  # a store from before links were stored: rebuilt on the next build
            return [], []
    if row is None:
        return [], []
    return json.loads(row[0] or "[]"), json.loads(row[1] or "[]")


def _linked(data: LoadedIndex, entries: list[dict], *, outgoing: bool) -> list[RelatedNote]:
    """The linked notes, each once, with how the link is written (first occurrence's form)."""
    out: dict[str, RelatedNote] = {}
    for entry in entries:
        other = entry.get("to") if outgoing else entry.get("from")
        if not other or other in out or (outgoing and entry.get("status") != "note"):
            continue
        doc = data.documents.get(other)
        if doc is None:
            continue
        out[other] = RelatedNote(
            doc["collection"],
            doc["slug"],
            doc["title"],
            "links_to" if outgoing else "linked_from",
            _reason(entry, outgoing),
        )
    return list(out.values())


def _reason(entry: dict, outgoing: bool) -> str:
    """ "this note links to it (heading Setup)", "it embeds this note, in its property cover"."""
    verb = {"embed": "embeds", "markdown": "has a Markdown link to"}.get(entry.get("kind", ""), "links to")
    part = (
        f" (heading {entry['heading']})"
        if entry.get("heading")
        else f" (block ^{entry['block']})"
        if entry.get("block")
        else ""
    )
    source = entry.get("source", "")
    where = f", in its property {source.removeprefix('property:')}" if source.startswith("property:") else ""
    text = f"this note {verb} it{part}{where}" if outgoing else f"it {verb} this note{part}{where}"
    return text + (f"; {entry['problem']}" if entry.get("problem") else "")


def _similar(data: LoadedIndex, doc_id: str, k: int) -> list[RelatedNote]:
    """The ``k`` notes nearest the note's mean chunk vector, each scored by its best chunk."""
    if k == 0 or not len(data.matrix):
        return []
    ids = np.array(data.document_ids, dtype=object)
    own = ids == doc_id
    if not own.any():
        return []
    centre = data.matrix[own].mean(axis=0)
    norm = float(np.linalg.norm(centre))
    if norm == 0.0:
        return []
    scores = data.matrix @ (centre / norm)
    best: dict[str, float] = {}
    for row in np.argsort(-scores, kind="stable"):
        other = ids[row]
        if other != doc_id and other not in best:
            best[other] = float(scores[row])
            if len(best) == k:
                break
    out = []
    for other, score in best.items():
        doc = data.documents.get(other, {"collection": "", "slug": other, "title": ""})
        out.append(
            RelatedNote(
                doc["collection"],
                doc["slug"],
                doc["title"],
                "similar",
                f"nearest by vector (cosine {score:.2f} to this note's average)",
                score,
            )
        )
    return out
