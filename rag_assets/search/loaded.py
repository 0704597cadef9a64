"""A tier store's rows as a search holds them (:class:`LoadedIndex`), and how they are read.

Every search needs, for every chunk with a vector, its rowid, its document and its vector (the
vector ranking is one matrix product over all of them), and, for each document, its collection
(collection filters and weights). The rest of a document (slug, title, tags, frontmatter,
aliases, links) is needed only for the few documents a search ranks or shows, or for every
document when a search filters on tags, frontmatter or a slug prefix.

:class:`StoredDocuments` holds those records: all read at load (``rag serve``, which loads once
and answers many searches), or each read from the store by id the first time a search asks for
it (a one-shot ``rag search``: at 100,000 chunks, parsing every document's JSON columns was most
of a cold search's time). Either way a record is made by :func:`document_record`, so both give
the same records, hits and scores. The vectors are read from the store's vector blocks, a blob
per 256 chunks (:mod:`rag_assets.index.vector_blocks`), not from every chunk row.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, ValuesView
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from rag_assets.index.profiles import SearchProfile, read_profile
from rag_assets.index.vector_blocks import read_vectors
from rag_assets.search.link_signal import linked_notes
from rag_assets.search.relevance import TermStatistics

# The documents columns a search's record of a document is made from, in document_record's order.
DOCUMENT_COLUMNS = "id, collection, slug, title, tags, frontmatter, aliases, links, backlinks"
DOCUMENT_LOADS = ("all", "on_demand")
_BATCH = 500  # ids per query: under SQLite's limit on bound parameters


def document_record(row: tuple) -> dict[str, Any]:
    """A search's record of one document from its row of DOCUMENT_COLUMNS (without the id)."""
    collection, slug, title, tags, frontmatter, aliases, links, backlinks = row
    return {
        "collection": collection,
        "slug": slug,
        "title": title or "",
        "tags": json.loads(tags or "[]"),
        "frontmatter": json.loads(frontmatter or "{}"),
        "aliases": json.loads(aliases or "[]"),  # a vault note's: they name it as its title does
        "linked": linked_notes(links, backlinks),  # the link-graph signal's (search/link_signal.py)
    }


class StoredDocuments(Mapping[str, dict[str, Any]]):
    """Document id -> :func:`document_record`, for the documents the store held at load, in its
    row order. Records not read yet are read from the store (``connect``: the reading thread's
    connection) when first asked for; :meth:`every` reads all that are missing in one query."""

    def __init__(self, ids: list[str], connect: Callable[[], sqlite3.Connection]) -> None:
        self._ids = ids
        self._known = set(ids)
        self._connect = connect
        self._records: dict[str, dict[str, Any]] = {}
        self._every: dict[str, dict[str, Any]] | None = None  # every record in row order, once read
        self._lock = threading.Lock()  # one reader of the missing records at a time

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._known

    def __getitem__(self, doc_id: str) -> dict[str, Any]:
        record = self._records.get(doc_id)
        if record is None:
            if doc_id not in self._known:
                raise KeyError(doc_id)
            self.fetch([doc_id])
            record = self._records.get(doc_id)
            if record is None:  # gone from the store since the load (a build replaced it)
                raise KeyError(doc_id)
        return record

    def get(self, doc_id: str, default: Any = None) -> Any:
        """The record of ``doc_id`` (read now if it is not held yet), or ``default``. A held
        record is one dict lookup: a search asks for each of its candidates' records."""
        record = self._records.get(doc_id)
        if record is not None:
            return record
        try:
            return self[doc_id]
        except KeyError:
            return default

    @property
    def held(self) -> int:
        """How many records have been read so far."""
        return len(self._records)

    def fetch(self, doc_ids: Iterable[str]) -> None:
        """Read the records of these documents that are not held yet, in batched queries."""
        if self._every is not None:  # every record read at load (rag serve): nothing to look up per search
            return
        missing = [d for d in dict.fromkeys(doc_ids) if d not in self._records and d in self._known]
        if not missing:
            return
        with self._lock:
            conn = self._connect()
            for start in range(0, len(missing), _BATCH):
                batch = missing[start : start + _BATCH]
                marks = ",".join("?" * len(batch))
                rows = conn.execute(f"SELECT {DOCUMENT_COLUMNS} FROM documents WHERE id IN ({marks})", batch)
                self._records.update((row[0], document_record(row[1:])) for row in rows)

    def every(self) -> dict[str, dict[str, Any]]:
        """Every record, in the store's row order, read in one query when some are missing;
        made once (``/related`` looks a note up among all of them at every request)."""
        if self._every is None:
            with self._lock:
                if self._every is None:
                    self._every = self._read_every()
        return self._every

    def _read_every(self) -> dict[str, dict[str, Any]]:
        """Every document's record by id, in row order: the held ones kept (the same objects)."""
        held = self._records
        if len(held) < len(self._ids):
            rows = self._connect().execute(f"SELECT {DOCUMENT_COLUMNS} FROM documents ORDER BY rowid")
            read = {row[0]: held.get(row[0]) or document_record(row[1:]) for row in rows if row[0] in self._known}
            self._records = read
        return {d: self._records[d] for d in self._ids if d in self._records}

    def items(self) -> ItemsView[str, dict[str, Any]]:
        """(id, record) of every document, the missing records read in one query (not one each)."""
        return self.every().items()

    def values(self) -> ValuesView[dict[str, Any]]:
        """Every document's record, the missing ones read in one query."""
        return self.every().values()


@dataclass
class LoadedIndex:
    """The store's vectors and per-chunk metadata, as of ``stamp``."""

    stamp: tuple
    rowids: np.ndarray  # chunk rowid per matrix row
    matrix: np.ndarray  # (n, dimension) float32, L2-normalised
    document_ids: list[str]
    collections: np.ndarray  # collection name per row (object array)
    row_of: dict[int, int]
    model: str | None
    provider: str | None
    dimension: int | None
    documents: StoredDocuments  # id -> {collection, slug, title, tags, frontmatter, aliases, linked}
    # Per row: the index of its document in ``documents``' order (len(documents): none), so a
    # filter mask is ``allowed[doc_index]``; per document, its collection. Filters seen
    # before reuse their ``allowed`` array (``allowed_cache``, keyed by the filters).
    doc_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    doc_collections: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=str))
    allowed_cache: dict = field(default_factory=dict)
    # The in-memory BM25 postings (rag_assets.search.bm25) once they are ready; None: FTS5 scores.
    bm25: Any = None
    bm25_done: threading.Event = field(default_factory=threading.Event)  # set when built, loaded or failed
    profile: SearchProfile = field(default_factory=SearchProfile)  # the fusion the store was built for
    term_statistics: TermStatistics = field(default_factory=TermStatistics)
    title_terms: dict[str, frozenset[str]] = field(default_factory=dict)  # document id -> its title's stems


def read_loaded(
    conn: sqlite3.Connection, stamp: tuple, connect: Callable[[], sqlite3.Connection], documents: str = "all"
) -> LoadedIndex:
    """The store's rows behind ``conn`` as a LoadedIndex; ``documents``: ``"all"`` reads every
    document's record now, ``"on_demand"`` each when a search first asks for it (``connect``)."""
    if documents not in DOCUMENT_LOADS:
        raise ValueError(f"documents must be one of {', '.join(DOCUMENT_LOADS)}, not {documents!r}")
    meta = conn.execute("SELECT model, dimension, provider FROM embeddings_meta LIMIT 1").fetchone()
    model, dimension, provider = meta if meta else (None, None, None)
    doc_rows = conn.execute("SELECT id, collection FROM documents ORDER BY rowid").fetchall()
    stored = StoredDocuments([d for d, _ in doc_rows], connect)
    vectors = read_vectors(conn, dimension or 0)
    position = {doc_id: i for i, (doc_id, _) in enumerate(doc_rows)}
    # Per row, its document's index (len(doc_rows): none) and collection: map and array
    # indexing, not a Python loop per row (a cold search makes them for every chunk).
    doc_index = np.fromiter(
        map(position.get, vectors.document_ids, repeat(len(position))), dtype=np.int32, count=len(vectors.rowids)
    )
    collection_at = np.array([c for _, c in doc_rows] + [""], dtype=object)
    data = LoadedIndex(
        stamp=stamp,
        rowids=vectors.rowids,
        matrix=vectors.matrix,
        document_ids=vectors.document_ids,
        collections=collection_at[doc_index],
        row_of=dict(zip(vectors.rowids.tolist(), range(len(vectors.rowids)))),
        model=model,
        provider=provider,
        dimension=dimension,
        documents=stored,
        doc_index=doc_index,
        doc_collections=np.array([c for _, c in doc_rows], dtype=str),
        profile=read_profile(conn, provider),
    )
    if documents == "all":
        stored.every()
    return data
