"""Reading Markdown files into :class:`Document` records.

Every way a file can be unusable (not Markdown, binary, not UTF-8, empty, broken
frontmatter, a slug another file already took, and everything the walker refuses:
symlinks out of the folder, FIFOs, files too large, undecodable names, unreadable
files) becomes a :class:`SkippedFile` with a reason a site owner can act on, never
an exception: one bad file must not stop a collection from building.

The work per file is bounded: at most ``max_file_bytes`` are read, the frontmatter
is at most :data:`MAX_FRONTMATTER_CHARS` long, and YAML aliases may not expand it to
more than :data:`MAX_FRONTMATTER_VALUES` values (a few hundred bytes of nested
aliases, the "billion laughs", would otherwise expand to billions).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from rag_assets.base.work_pool import WorkPool
from rag_assets.ingest.obsidian import read_obsidian_note
from rag_assets.ingest.sources import VANISHED_REASON, unreadable_reason
from rag_assets.ingest.walker import (
    DEFAULT_MAX_FILE_BYTES,
    MARKDOWN_SUFFIXES,
    FileRefused,
    Listing,
    WalkPolicy,
    default_policy,
    list_folder,
    read_bounded,
)
from rag_assets.records import Chunk, Document, ParsedCollection, SkippedFile

# Frontmatter is a handful of fields; these limits are far above any real page's.
MAX_FRONTMATTER_CHARS = 100_000
MAX_FRONTMATTER_VALUES = 10_000
MAX_FRONTMATTER_DEPTH = 50
_FRONTMATTER_CLOSERS = ("---", "...")
_FIRST_H1 = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.MULTILINE)
_MDX_ESM_LINE = re.compile(r"^(import|export)\s.*$", re.MULTILINE)
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# libyaml's loader parses frontmatter about ten times faster than the pure-Python one.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UnusableFile(Exception):
    """Raised inside this module for a file that must be skipped; carries the reason."""


def parse_collection(
    content_dir: Path,
    collection: str,
    content_hash: str,
    reuse: Mapping[str, tuple[Document, list[Chunk]]] | None = None,
    *,
    root: Path | None = None,
    policy: WalkPolicy | None = None,
    holds: Callable[[str], bool] | None = None,
    hashed: Collection[str] = (),
    obsidian: bool = False,
    listing: Listing | None = None,
    pool: WorkPool | None = None,
) -> ParsedCollection:
    """Parse every file of one collection folder, keeping the failures with their reasons.

    Files found in ``reuse`` (unchanged since they were last chunked) are not read again:
    their previous Document and chunks are carried over. ``root`` is the folder when it is
    not ``content_dir/collection`` (a note vault anywhere on disk); paths are then still
    ``<collection>/<path in the folder>``. ``policy`` is the walk's (see
    :mod:`rag_assets.ingest.boundaries`); it must be the one the content hash was computed with.
    ``holds`` keeps only the files (and skipped entries) of one shard (see ingest/shards.py).
    ``hashed`` names the files the content hash was computed over (``<collection>/...``): one
    of them that this listing no longer finds vanished in between and is reported as skipped.

    The skipped files are sorted by path, so the shards of a collection rejoin into the
    same list as the collection parsed whole. ``obsidian`` reads each note's Obsidian syntax
    (wikilinks, embeds, comments, callouts, tags, aliases: see rag_assets/ingest/obsidian.py),
    for the notes of a vault. ``listing``: the folder's :func:`list_folder` (this policy, the
    ``<collection>/`` prefix) when the caller has it already, as for the content hash.
    ``pool``: the files not reused are parsed in its worker processes (rag_assets.base.work_pool),
    the same documents in the same order as here.
    """
    reuse = reuse or {}
    keep = holds or (lambda _: True)
    policy = policy or default_policy(root or content_dir)
    cached_chunks: dict[str, list[Chunk]] = {}
    root = root or content_dir / collection
    if not root.is_dir():
        missing = [SkippedFile(path=collection, reason="collection folder does not exist")]
        return ParsedCollection(
            collection=collection, content_hash=content_hash, documents=[], skipped=[s for s in missing if keep(s.path)]
        )
    documents: list[Document] = []
    listing = listing if listing is not None else list_folder(root, policy, prefix=f"{collection}/")
    skipped: list[SkippedFile] = [s for s in listing.skipped if keep(s.path)]
    slug_owner: dict[str, str] = {}
    kept = [(f"{collection}/{item.rel}", item.where) for item in listing.files]
    kept = [(rel, where) for rel, where in kept if keep(rel)]
    read = functools.partial(
        _parse_file, root=root, collection=collection, max_file_bytes=policy.max_file_bytes, obsidian=obsidian
    )
    # The files not reused parsed first (in worker processes with a pool), then taken in order.
    parsed = iter((pool or WorkPool(1)).map(read, [where for rel, where in kept if rel not in reuse]))
    result: Document | SkippedFile  # reused documents are parsed ones; a fresh parse may skip
    for rel, _ in kept:
        if rel in reuse:
            result, chunks = reuse[rel]
            cached_chunks[rel] = chunks
        else:
            result = next(parsed)
        if isinstance(result, SkippedFile):
            skipped.append(result)
            continue
        if result.slug in slug_owner:
            skipped.append(slug_taken(rel, result.slug, slug_owner[result.slug]))
            continue
        slug_owner[result.slug] = rel
        documents.append(result)
    skipped += vanished_since_hashing(hashed, listing, collection, keep)
    skipped.sort(key=lambda item: item.path)
    return ParsedCollection(collection, content_hash, documents, skipped, cached_chunks)


def vanished_since_hashing(
    hashed: Collection[str], listing: Listing, collection: str, keep: Callable[[str], bool]
) -> list[SkippedFile]:
    """The hashed files the parser's listing lacks: deleted between hashing and parsing."""
    seen = {f"{collection}/{item.rel}" for item in listing.files} | {s.path for s in listing.skipped}
    return [SkippedFile(path=rel, reason=VANISHED_REASON) for rel in sorted(hashed) if rel not in seen and keep(rel)]


def slug_taken(path: str, slug: str, owner: str) -> SkippedFile:
    """The file at ``path`` is skipped: ``owner`` (first in path order) already has its slug."""
    return SkippedFile(path=path, reason=f"same slug '{slug}' as {owner}; rename one of them")


def _parse_file(
    path: str, *, root: Path, collection: str, max_file_bytes: int, obsidian: bool
) -> Document | SkippedFile:
    """parse_markdown_file of a listed path (the walk's string), as a worker process calls it."""
    return parse_markdown_file(
        Path(path), root=root, collection=collection, max_file_bytes=max_file_bytes, obsidian=obsidian
    )


def parse_markdown_file(
    path: Path,
    *,
    root: Path,
    collection: str,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    obsidian: bool = False,
) -> Document | SkippedFile:
    """One file of the collection folder ``root`` as a Document, or a SkippedFile saying why
    it cannot be indexed (``obsidian``: a vault note, its Obsidian syntax read)."""
    rel = f"{collection}/{path.relative_to(root).as_posix()}"
    try:
        doc = _parse(path, rel, collection, root, max_file_bytes, obsidian)
        return as_obsidian_note(doc) if obsidian else doc
    except UnusableFile as exc:
        return SkippedFile(path=rel, reason=str(exc))
    except (OSError, FileRefused) as exc:
        return SkippedFile(path=rel, reason=unreadable_reason(exc))


def _parse(path: Path, rel: str, collection: str, root: Path, max_file_bytes: int, obsidian: bool = False) -> Document:
    if path.suffix.lower() not in MARKDOWN_SUFFIXES:
        kind = path.suffix.lower() or "no extension"
        raise UnusableFile(f"not a Markdown file ({kind}); only {', '.join(MARKDOWN_SUFFIXES)} are indexed")
    raw, info = read_bounded(path, max_file_bytes)
    text = decode_markdown_bytes(raw)
    frontmatter, body = split_frontmatter(text)
    if path.suffix.lower() == ".mdx":
        body = strip_mdx_esm(body)
    # A vault note of properties only (a book, a person) is still a note, named by its file,
    # and other notes link to it; a page without text or title is not.
    if not body.strip() and not frontmatter.get("title") and not (obsidian and frontmatter):
        raise UnusableFile("empty file: no text and no title")
    slug = path.relative_to(root).with_suffix("").as_posix()
    title = _title(frontmatter, body, slug)
    return Document(
        collection=collection,
        slug=slug,
        path=rel,
        title=title,
        description=_text_field(frontmatter.get("description")),
        tags=normalise_tags(frontmatter.get("tags")),
        frontmatter=frontmatter,
        body=body,
        updated_at=_updated_at(frontmatter, info.st_mtime),
        content_sha256=hashlib.sha256(raw).hexdigest(),
    )


def as_obsidian_note(doc: Document) -> Document:
    """The Document of a vault note: body and properties as Obsidian shows them, and the
    links, tags, aliases and block ids it records (the title is read again from them)."""
    note = read_obsidian_note(doc.frontmatter, doc.body)
    return replace(
        doc,
        title=_title(note.frontmatter, note.body, doc.slug),
        description=_text_field(note.frontmatter.get("description")),
        tags=note.tags,
        frontmatter=note.frontmatter,
        body=note.body,
        links=note.links,
        aliases=note.aliases,
        anchors=note.anchors,
        blocks=note.blocks,
    )


def decode_markdown_bytes(raw: bytes) -> str:
    """UTF-8 text with the BOM removed and CRLF/CR line endings made LF."""
    if not raw.strip():
        raise UnusableFile("empty file")
    if b"\0" in raw[:8192]:
        raise UnusableFile("binary file (contains NUL bytes), not Markdown text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnusableFile(
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start}); re-save the file as UTF-8"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """YAML frontmatter between ``---`` lines, and the body after it."""
    if not text.startswith("---\n") and text.rstrip("\n") != "---":
        return {}, text
    lines = text.split("\n")
    for end in range(1, len(lines)):
        if lines[end].rstrip() in _FRONTMATTER_CLOSERS:
            break
    else:
        raise UnusableFile("frontmatter opened with '---' is never closed; add a closing '---' line")
    block = "\n".join(lines[1:end])
    if len(block) > MAX_FRONTMATTER_CHARS:
        raise UnusableFile(
            f"frontmatter is {len(block):,} characters, more than {MAX_FRONTMATTER_CHARS:,}; "
            "move long text into the body"
        )
    try:
        data = yaml.load(block, Loader=_YAML_LOADER) if block.strip() else {}
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 2}" if where is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UnusableFile(f"invalid YAML frontmatter{line}: {problem}") from None
    except (ValueError, OverflowError) as exc:
        # A value YAML reads but Python cannot hold: `date: 2024-02-30` (day is out of range).
        raise UnusableFile(f"invalid YAML frontmatter: {exc}; fix the value") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UnusableFile(f"frontmatter must be a YAML mapping of fields, not a {type(data).__name__}")
    # An alias needs an anchor ('&name'); without one the budget error must not blame aliases.
    budget = _ValueBudget(through_aliases="&" in block and "*" in block)
    return json_safe(data, budget), "\n".join(lines[end + 1 :])


def json_safe(value: Any, budget: _ValueBudget | None = None, depth: int = 0) -> Any:
    """Frontmatter values as JSON types: dates become ISO strings, keys strings.

    YAML aliases load as shared references, cheap in memory; copying them out here is
    where they expand, so every value copied counts against a budget and the copy stops
    (the file is skipped) before the expansion can exhaust memory.
    """
    budget = budget or _ValueBudget()
    budget.spend(len(value) if isinstance(value, str) else 0)
    if depth > MAX_FRONTMATTER_DEPTH:
        # Also stops an alias that refers to itself (`a: &a [*a]`), which nests without end.
        raise UnusableFile(f"frontmatter nests more than {MAX_FRONTMATTER_DEPTH} levels deep; flatten it")
    if isinstance(value, dict):
        for key in value:
            budget.spend(len(str(key)))
        return {str(k): json_safe(v, budget, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v, budget, depth + 1) for v in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class _ValueBudget:
    """How many more frontmatter values one file may expand to."""

    def __init__(self, limit: int = MAX_FRONTMATTER_VALUES, *, through_aliases: bool = True) -> None:
        self.limit = limit
        self.left = limit
        self.chars_left = MAX_FRONTMATTER_CHARS
        self.through_aliases = through_aliases

    def spend(self, chars: int = 0) -> None:
        self.left -= 1
        self.chars_left -= chars
        if self.chars_left < 0:
            # One long string aliased thousands of times stays under the value count but
            # expands to gigabytes in every copy made downstream (cache, store, index).
            raise UnusableFile(
                f"frontmatter expands to more than {MAX_FRONTMATTER_CHARS:,} characters"
                + (" through YAML aliases; remove the aliases" if self.through_aliases else "")
            )
        if self.left >= 0:
            return
        if self.through_aliases:
            raise UnusableFile(
                f"frontmatter expands to more than {self.limit:,} values through YAML aliases; remove the aliases"
            )
        raise UnusableFile(f"frontmatter holds more than {self.limit:,} values; move the data out of the frontmatter")


def normalise_tags(raw: Any) -> list[str]:
    """Tags from a YAML list or a comma-separated string, de-duplicated, order kept."""
    if raw is None:
        return []
    items = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else [raw]
    tags: list[str] = []
    for item in items:
        tag = str(item).strip()
        if tag and tag not in tags:
            tags.append(tag)
    return tags


def strip_mdx_esm(body: str) -> str:
    """Drop MDX ``import``/``export`` lines outside code fences: they are code, not prose."""
    out: list[str] = []
    fence: str | None = None
    for line in body.split("\n"):
        match = _FENCE_LINE.match(line)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker
            elif marker[0] == fence[0] and len(marker) >= len(fence):
                fence = None
        if fence is None and _MDX_ESM_LINE.match(line):
            continue
        out.append(line)
    return "\n".join(out)


def _text_field(value: Any) -> str:
    if value is None:
        return ""
    return " ".join(str(value).split())


def _title(frontmatter: dict[str, Any], body: str, slug: str) -> str:
    title = _text_field(frontmatter.get("title"))
    if title:
        return title
    match = _FIRST_H1.search(body)
    if match:
        return match.group(1).strip()
    return slug.rsplit("/", 1)[-1].replace("-", " ").replace("_", " ").strip() or slug


def _updated_at(frontmatter: dict[str, Any], mtime_seconds: float) -> str:
    for key in ("lastmod", "updated", "date"):
        value = frontmatter.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    mtime = dt.datetime.fromtimestamp(mtime_seconds, tz=dt.UTC)
    return mtime.isoformat(timespec="seconds").replace("+00:00", "Z")
