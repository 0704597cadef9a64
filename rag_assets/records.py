"""Records that flow between the pipeline steps.

Plain dataclasses: they are pickled by Dagster's IO manager between assets and
serialised into the published outputs, so they hold only JSON-friendly values
(plus a numpy matrix on :class:`EmbeddedCollection`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import numpy as np  # annotations only: `rag status` reads no vectors and never loads numpy


@dataclass(frozen=True)
class SkippedFile:
    """A file that was not indexed, and why (shown in logs, metadata and the CLI)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Link:
    """A link from a vault note: a wikilink, an embed, or a Markdown link to another note.

    Recorded as written (resolution to a note happens later): ``target`` is the note or file
    name before any ``#`` ("Other note", "folder/Note.md", "diagram.png"; "" for a link within
    the note itself), ``heading`` the heading path after ``#`` ("Setup#Network" for
    ``[[Note#Setup#Network]]``), ``block`` the id after ``#^``. ``display`` is the text the
    chunk holds in the link's place ("" for an embed, which leaves no text). ``source`` is
    ``body``, or ``property:<key>`` for a wikilink inside a property.
    """

    target: str
    heading: str = ""
    block: str = ""
    display: str = ""
    kind: str = "wikilink"  # wikilink | embed | markdown
    source: str = "body"


@dataclass(frozen=True)
class ResolvedLink:
    """A note's link after resolution within its own vault (rag_assets.ingest.link_resolution).

    ``status``: ``note`` (``to`` is the target note's document id), ``file`` (a vault file that
    is not an indexed note: an attachment; ``to`` is its vault path), ``unresolved`` (no such
    note or file), ``ambiguous`` (several equally good matches, in ``candidates``; not linked),
    ``outside`` (a path that leaves the vault, never followed). ``problem`` says what is wrong
    with a link that still resolved (a heading or block the target note does not have).
    """

    link: Link
    status: str
    to: str = ""
    candidates: tuple[str, ...] = ()
    problem: str = ""

    def to_json(self) -> dict[str, Any]:
        """The stored form (``documents.links``): only the fields that hold something."""
        out: dict[str, Any] = {"target": self.link.target, "kind": self.link.kind, "status": self.status}
        extra = {
            "heading": self.link.heading,
            "block": self.link.block,
            "display": self.link.display,
            "to": self.to,
            "problem": self.problem,
        }
        out.update({k: v for k, v in extra.items() if v})
        if self.link.source != "body":
            out["source"] = self.link.source
        if self.candidates:
            out["candidates"] = list(self.candidates)
        return out


@dataclass(frozen=True)
class Backlink:
    """A note that links to this one: its document id, how (kind, property) and to which part."""

    source_id: str
    kind: str = "wikilink"
    source: str = "body"  # body, or property:<key>
    heading: str = ""
    block: str = ""

    def to_json(self) -> dict[str, Any]:
        """The stored form (``documents.backlinks``)."""
        out: dict[str, Any] = {"from": self.source_id, "kind": self.kind}
        for key, value in (
            ("source", self.source if self.source != "body" else ""),
            ("heading", self.heading),
            ("block", self.block),
        ):
            if value:
                out[key] = value
        return out


def under_collection(collection: str) -> tuple[str, str]:
    """The bounds (low inclusive, high exclusive) of the keys under ``<collection>/``: a document's
    or chunk's ID, a file's path. A collection's name holds no "/", and "0" sorts just after it,
    so ``key >= low AND key < high`` is a range of a primary key, not a scan or a join."""
    return f"{collection}/", f"{collection}0"


@dataclass
class Document:
    """One Markdown file, parsed: frontmatter split from the body."""

    collection: str
    slug: str
    path: str  # relative to the content dir, POSIX separators
    title: str
    description: str
    tags: list[str]
    frontmatter: dict[str, Any]  # JSON-safe (dates are ISO strings)
    body: str
    updated_at: str  # ISO 8601 UTC: frontmatter lastmod/updated/date, else file mtime
    content_sha256: str  # of the file's bytes
    # Vault notes only (Obsidian syntax, see rag_assets/ingest/obsidian.py); empty elsewhere.
    links: list[Link] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)  # block ids (``^id``) found in the note
    # Block id -> the block's text as read (for ``![[Note#^id]]`` transclusion, when a vault sets it).
    blocks: dict[str, str] = field(default_factory=dict)
    # Filled for vault notes by link resolution, after parsing (and, in the Safe tier, sanitising).
    resolved_links: list[ResolvedLink] = field(default_factory=list)
    backlinks: list[Backlink] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.collection}/{self.slug}"


@dataclass
class Chunk:
    """A retrievable piece of a document, with the metadata the index publishes."""

    id: str  # <collection>/<slug>/chunk-<i>
    text: str
    collection: str
    slug: str
    title: str
    chunk_index: int
    total_chunks: int
    heading_path: list[str]
    word_count: int
    tags: list[str]

    @property
    def document_id(self) -> str:
        return f"{self.collection}/{self.slug}"

    def metadata(self) -> dict[str, Any]:
        """The ``metadata`` object of a chunk in the published JSON index."""
        return {
            "collection": self.collection,
            "slug": self.slug,
            "title": self.title,
            "chunkIndex": self.chunk_index,
            "totalChunks": self.total_chunks,
            "headingPath": list(self.heading_path),
            "wordCount": self.word_count,
            "tags": list(self.tags),
        }


@dataclass(frozen=True)
class ShardPart:
    """Which shard of its collection a record holds (see rag_assets.ingest.shards).

    ``hash_entries`` are the shard's files' hashes (and skip markers): the union over the
    shards gives the collection's own content hash, so the rejoined collection publishes
    exactly what it would unsharded.
    """

    index: int
    count: int
    hash_entries: dict[str, str]


@dataclass
class CollectionSnapshot:
    """The files of one collection at one moment, and their combined hash."""

    collection: str
    root: str  # absolute path of the collection folder
    content_hash: str
    files: dict[str, str]  # relative path -> SHA-256 of the bytes
    total_bytes: int
    # Entries the walker would not read (symlinks out of the folder, FIFOs, files too large,
    # undecodable names, files that vanished): never hashed, only their reasons are.
    skipped: list[SkippedFile] = field(default_factory=list)


@dataclass
class ParsedCollection:
    """Output of ``parsed_documents``: every file of a collection, parsed or skipped."""

    collection: str
    content_hash: str
    documents: list[Document]
    skipped: list[SkippedFile] = field(default_factory=list)
    # Chunks of documents reused unchanged from the previous build, by document path;
    # those documents were not read again and carry an empty body.
    cached_chunks: dict[str, list[Chunk]] = field(default_factory=dict)
    shard: ShardPart | None = None  # None: the whole collection


@dataclass
class ChunkedCollection:
    """Output of ``chunks``: the documents (without bodies) and their chunks."""

    collection: str
    content_hash: str
    documents: list[Document]
    chunks: list[Chunk]
    skipped: list[SkippedFile] = field(default_factory=list)
    shard: ShardPart | None = None


@dataclass
class EmbeddedCollection:
    """Output of ``embeddings``: chunks with one float32 vector each (row i is chunk i)."""

    collection: str
    content_hash: str
    documents: list[Document]
    chunks: list[Chunk]
    vectors: np.ndarray  # shape (len(chunks), dimension), float32, L2-normalised
    model: str
    dimension: int
    skipped: list[SkippedFile] = field(default_factory=list)
    provider: str = "hashing"
    # Chunks whose batch failed: left out of `chunks` and `vectors`, retried on the next run.
    failed_chunk_ids: list[str] = field(default_factory=list)
    shard: ShardPart | None = None


class RecordSequence(Sequence[EmbeddedCollection]):
    """Embedded collections in name order, each loaded when it is reached, so that a publish
    need not hold every collection's records at once.

    Loaded records are kept for the next pass while the kept ones hold at most ``keep_chunks``
    chunks in all (a publish still reads the records several times: its whole-index writers
    each take every collection); beyond that, a record is released once passed and loaded again
    on the next pass. ``keep_chunks=0``: one collection's records at a time.
    """

    def __init__(
        self,
        names: Iterable[str],
        load: Callable[[str], EmbeddedCollection],
        keep_chunks: int = 0,
        facts: Callable[[str], RecordFacts | None] | None = None,
    ) -> None:
        self.names = sorted(names)
        self._load = load
        self._facts = facts
        self.keep_chunks = keep_chunks
        self._kept: dict[str, EmbeddedCollection] = {}
        self._kept_chunks = 0

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, index: int) -> EmbeddedCollection: ...

    @overload
    def __getitem__(self, index: slice) -> RecordSequence: ...

    def __getitem__(self, index: int | slice) -> EmbeddedCollection | RecordSequence:
        if isinstance(index, slice):
            return RecordSequence(self.names[index], self._load, self.keep_chunks, self._facts)
        return self.record(self.names[index])

    def __iter__(self) -> Iterator[EmbeddedCollection]:
        for name in self.names:
            yield self.record(name)

    def facts(self, name: str) -> RecordFacts | None:
        """What the collection's record holds, read without loading it (None: unknown, load it)."""
        return self._facts(name) if self._facts is not None else None

    def record(self, name: str) -> EmbeddedCollection:
        """The collection's record, loaded now unless kept from an earlier pass."""
        record = self._kept.get(name)
        if record is not None:
            return record
        record = self._load(name)
        if self._kept_chunks + len(record.chunks) <= self.keep_chunks:
            self._kept[name] = record
            self._kept_chunks += len(record.chunks)
        return record


def in_name_order(collections: Iterable[EmbeddedCollection]) -> Iterable[EmbeddedCollection]:
    """``collections`` by collection name: a :class:`RecordSequence` as it is (already in that
    order; sorting it would load every record at once), anything else sorted."""
    if isinstance(collections, RecordSequence):
        return collections
    return sorted(collections, key=lambda c: c.collection)


@dataclass(frozen=True)
class CollectionFacts:
    """What the publish step's report needs of one published collection, kept once its
    records are released (counts, skipped files, chunks without a vector, a preview)."""

    collection: str
    documents: int
    chunks: int
    skipped: list[SkippedFile]
    failed_chunk_ids: list[str]
    preview: list[Chunk]  # its first chunk (none for an empty collection)

    @classmethod
    def of(cls, col: EmbeddedCollection) -> CollectionFacts:
        return cls(
            col.collection,
            len(col.documents),
            len(col.chunks),
            list(col.skipped),
            list(col.failed_chunk_ids),
            col.chunks[:1],
        )


@dataclass(frozen=True)
class RecordFacts:
    """What an embedded record holds, written beside its pickle (rag_assets.defs.io_managers) so
    that a publish can tell an unchanged collection, and report on it, without unpickling it."""

    content_hash: str
    model: str
    dimension: int
    provider: str
    facts: CollectionFacts
    shard: tuple[int, int] | None = None  # (index, count) of a shard's record

    # Read by records_to_reembed, as on a record.
    @property
    def collection(self) -> str:
        return self.facts.collection

    @classmethod
    def of(cls, col: EmbeddedCollection) -> RecordFacts:
        shard = (col.shard.index, col.shard.count) if col.shard else None
        return cls(col.content_hash, col.model, col.dimension, col.provider, CollectionFacts.of(col), shard)

    def to_json(self) -> dict[str, Any]:
        f = self.facts
        return {
            "collection": f.collection,
            "contentHash": self.content_hash,
            "model": self.model,
            "dimension": self.dimension,
            "provider": self.provider,
            "shard": list(self.shard) if self.shard else None,
            "documents": f.documents,
            "chunks": f.chunks,
            "skipped": [[s.path, s.reason] for s in f.skipped],
            "failedChunkIds": list(f.failed_chunk_ids),
            "preview": [asdict(c) for c in f.preview],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RecordFacts:
        """The facts as :meth:`to_json` wrote them; KeyError/TypeError/ValueError on another shape."""
        facts = CollectionFacts(
            str(data["collection"]),
            int(data["documents"]),
            int(data["chunks"]),
            [SkippedFile(str(path), str(reason)) for path, reason in data["skipped"]],
            [str(i) for i in data["failedChunkIds"]],
            [Chunk(**c) for c in data["preview"]],
        )
        shard = data["shard"]
        return cls(
            str(data["contentHash"]),
            str(data["model"]),
            int(data["dimension"]),
            str(data["provider"]),
            facts,
            (int(shard[0]), int(shard[1])) if shard else None,
        )
