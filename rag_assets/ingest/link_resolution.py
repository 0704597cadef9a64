"""A vault's links resolved by Obsidian's rules, within that one vault, and what failed to resolve.

Resolution only ever looks names up in the vault's own list of files (never the file system,
never another vault or tier), so a link cannot bring any text into the index; a path that
climbs out of the vault (``[[../../etc/passwd]]``) is reported as ``outside`` and never
followed. The rules, as Obsidian applies them:

* a link names a note by its file name, or by as much of its path as makes it unique
  (``[[Note]]``, ``[[Projects/Note]]``: Obsidian writes the shortest unique path);
* case-insensitive; ``.md`` is optional (``[[Note.md]]`` is ``[[Note]]``); a name with another
  extension (``![[diagram.png]]``) names an attachment;
* ``/`` at the start is the vault root; ``./`` and ``../`` are relative to the linking note;
* several notes of that name: the one in the linking note's folder, else the one whose path
  is the link as written from the root; otherwise the link is ``ambiguous`` (reported with
  its candidates, and not linked rather than linked to a guess);
* ``#Heading`` (``#A#B`` for a nested one) and ``#^block`` are checked against the target
  note's headings (compared as Obsidian does: case and the characters ``#|^:%[]`` aside) and
  block ids; a missing one leaves the link resolved to the note, with a ``problem``.

Bounded work: one dictionary lookup per link; a note's links beyond
:data:`MAX_LINKS_PER_NOTE` are counted and reported, not resolved or stored; loops of note
embeds (a note embedding itself too) are found in one linear pass and reported (a vault that
sets ``transclude_embeds`` includes each note once per chain: rag_assets/ingest/transclusion.py).
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from rag_assets.ingest.blocks import Layout
from rag_assets.ingest.obsidian_syntax import NOTE_SUFFIXES
from rag_assets.records import Backlink, Document, Link, ResolvedLink

MAX_LINKS_PER_NOTE = 5_000  # resolved and stored per note; the rest counted and reported
MAX_ISSUES_LISTED = 200  # per kind of issue: the counts are complete, the list is not
_HEADING_NOISE = re.compile(r"[#|^:%\[\]\\\s]+")


@dataclass(frozen=True)
class LinkIssue:
    """One link that did not resolve cleanly, or one loop of embeds, for the report."""

    note: str  # the linking note's document id
    target: str  # as written: Note, Note#Heading, Note#^block
    kind: str  # unresolved | ambiguous | outside | heading | block | capped | embed_loop
    detail: str

    def line(self) -> str:
        """One line for `rag check` and the metadata's Markdown."""
        return f"{self.note}: {self.target or '(this note)'}: {self.detail}"


@dataclass
class LinkReport:
    """What resolution found in one vault: counts, and the first issues of each kind."""

    vault: str
    notes: int = 0
    links: int = 0  # every link considered (wikilinks, embeds, Markdown links to notes)
    to_notes: int = 0
    to_files: int = 0
    counts: Counter = field(default_factory=Counter)  # issue kind -> how many
    issues: list[LinkIssue] = field(default_factory=list)

    @property
    def resolved(self) -> int:
        """Links that resolved, to a note or a file."""
        return self.to_notes + self.to_files

    def share_resolved(self) -> float:
        """Resolved links (to a note or a file) over all links; 1.0 for a vault without links."""
        return self.resolved / self.links if self.links else 1.0

    def add(self, issue: LinkIssue) -> None:
        """Count an issue; list it while fewer than MAX_ISSUES_LISTED of its kind are listed."""
        self.counts[issue.kind] += 1
        if self.counts[issue.kind] <= MAX_ISSUES_LISTED:  # so 10,000 unresolved links hide no loop
            self.issues.append(issue)

    def summary(self) -> str:
        """``52 notes, 137 links: 90 resolved (85 to notes, 5 to files), 40 unresolved, ...``."""
        problems = ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items()))
        return (
            f"{self.notes} notes, {self.links} links: {self.resolved} resolved ({self.to_notes} to notes, "
            f"{self.to_files} to files)" + (f", {problems}" if problems else "")
        )


@dataclass(frozen=True)
class _Entry:
    """A file of the vault: a note (``doc_id`` set) or another file, by its vault path."""

    rel: str  # path inside the vault, as on disk
    doc_id: str = ""


def note_key(path: str) -> str:
    """The lookup key of a path or link target: lower case, a note suffix dropped."""
    low = path.strip().lower()
    for suffix in NOTE_SUFFIXES:
        if low.endswith(suffix):
            return low[: -len(suffix)]
    return low


def heading_key(text: str) -> str:
    """A heading as link targets match it: case, ``#|^:%[]`` and runs of spaces aside."""
    return _HEADING_NOISE.sub(" ", text).strip().lower()


class VaultFiles:
    """The vault's notes and other files, looked up by Obsidian's rules (no file is opened)."""

    def __init__(self, documents: Iterable[Document], files: Iterable[str]) -> None:
        """Index the notes by slug and the other files by path, each also by file name."""
        self.by_path: dict[str, _Entry] = {}  # note_key(path in vault) -> entry
        self.by_name: dict[str, list[_Entry]] = defaultdict(list)  # note_key(file name) -> entries
        for doc in documents:
            self._add(_Entry(doc.slug, doc.id))  # a note's slug is its path in the vault, suffix dropped
        for rel in files:
            if note_key(rel) not in self.by_path:
                self._add(_Entry(rel))

    def _add(self, entry: _Entry) -> None:
        """Register one file under its path and its file name."""
        key = note_key(entry.rel)
        self.by_path[key] = entry
        self.by_name[posixpath.basename(key)].append(entry)
        if not entry.doc_id and key != entry.rel.lower():  # a non-note .md file also by its full name
            self.by_path[entry.rel.lower()] = entry

    def find(self, target: str, from_rel: str) -> tuple[str, list[_Entry]]:
        """(status, entries): ``found`` with one entry, ``ambiguous`` with several, ``unresolved``
        or ``outside`` with none."""
        wanted = target.strip().replace("\\", "/")
        folder = posixpath.dirname(from_rel)
        rooted = wanted.startswith("/")
        wanted = wanted.lstrip("/")
        parts = wanted.split("/")
        if ".." in parts or "." in parts:
            joined = posixpath.normpath(wanted if rooted else posixpath.join(folder, wanted))
            if joined == ".." or joined.startswith("../") or joined.startswith("/"):
                return "outside", []
            entry = self.by_path.get(note_key(joined))
            return ("found", [entry]) if entry else ("unresolved", [])
        key = note_key(wanted)
        if rooted:
            entry = self.by_path.get(key)
            return ("found", [entry]) if entry else ("unresolved", [])
        matches = [e for e in self.by_name.get(posixpath.basename(key), []) if _ends_with(note_key(e.rel), key)]
        if len(matches) <= 1:
            return ("found", matches) if matches else ("unresolved", [])
        for preferred in (
            [e for e in matches if posixpath.dirname(e.rel) == folder],
            [e for e in matches if note_key(e.rel) == key],
        ):
            if len(preferred) == 1:
                return "found", preferred
        return "ambiguous", sorted(matches, key=lambda e: e.rel)


def _ends_with(path_key: str, key: str) -> bool:
    """A path key is the link's key, or ends with it after a ``/`` (a shorter unique path)."""
    return path_key == key or path_key.endswith("/" + key)


@dataclass
class VaultLinks:
    """Every note's resolved links and backlinks, and the vault's report."""

    documents: list[Document]
    report: LinkReport


def resolve_vault(vault: str, documents: list[Document], files: Iterable[str]) -> VaultLinks:
    """The documents with ``resolved_links`` and ``backlinks`` filled, and what did not resolve.

    ``files``: every file of the vault by its path inside the vault (``dir/x.png``), sanitised
    like the documents in the Safe tier, so a sanitised link finds a sanitised name.
    """
    index = VaultFiles(documents, files)
    by_id = {d.id: d for d in documents}
    headings: dict[str, Any] = {}
    report = LinkReport(vault, notes=len(documents))
    out_links: dict[str, list[ResolvedLink]] = {}
    backlinks: dict[str, dict[Backlink, None]] = defaultdict(dict)
    for doc in documents:
        resolved = _resolve_note(doc, index, by_id, headings, report)
        out_links[doc.id] = resolved
        for r in resolved:
            if r.status == "note" and r.to != doc.id:
                backlinks[r.to][Backlink(doc.id, r.link.kind, r.link.source, r.link.heading, r.link.block)] = None
    _report_embed_loops(out_links, report)
    documents = [replace(d, resolved_links=out_links[d.id], backlinks=list(backlinks.get(d.id, {}))) for d in documents]
    return VaultLinks(documents, report)


def _resolve_note(
    doc: Document, index: VaultFiles, by_id: dict[str, Document], headings: dict[str, Any], report: LinkReport
) -> list[ResolvedLink]:
    """One note's links, resolved, each distinct link once, at most MAX_LINKS_PER_NOTE."""
    rel = doc.slug
    repeats = Counter(doc.links)  # 10,000 copies of one link are one link, resolved once
    distinct = list(repeats)
    report.links += len(doc.links)
    if len(distinct) > MAX_LINKS_PER_NOTE:
        beyond = distinct[MAX_LINKS_PER_NOTE:]
        report.add(
            LinkIssue(
                doc.id,
                "",
                "capped",
                f"{len(distinct)} distinct links; the first {MAX_LINKS_PER_NOTE} "
                "are resolved and stored, the rest counted as unresolved",
            )
        )
        report.counts["unresolved"] += sum(repeats[link] for link in beyond)
        distinct = distinct[:MAX_LINKS_PER_NOTE]
    out = []
    for link in distinct:
        resolved = _resolve_link(link, doc, rel, index, by_id, headings)
        _tally(resolved, doc.id, repeats[link], report)
        out.append(resolved)
    return out


def _resolve_link(
    link: Link, doc: Document, rel: str, index: VaultFiles, by_id: dict[str, Document], headings: dict[str, Any]
) -> ResolvedLink:
    """One link: to this note, a note, a file, or why not."""
    if not link.target:  # [[#Heading]], [[#^block]]: this note
        return _checked(ResolvedLink(link, "note", doc.id), doc, headings)
    status, entries = index.find(link.target, rel)
    if status == "ambiguous":
        return ResolvedLink(link, "ambiguous", candidates=tuple(e.doc_id or e.rel for e in entries))
    if status != "found":
        return ResolvedLink(link, status)
    entry = entries[0]
    if not entry.doc_id:
        return ResolvedLink(link, "file", entry.rel)
    return _checked(ResolvedLink(link, "note", entry.doc_id), by_id[entry.doc_id], headings)


def _checked(resolved: ResolvedLink, target: Document, headings: dict[str, Any]) -> ResolvedLink:
    """The link with a ``problem`` when the heading or block it names is not in ``target``.

    ``headings`` caches each target's heading keys (and, under ``^<id>``, its block ids), so
    5,000 links to one note parse it once."""
    link = resolved.link
    if link.block:
        if "^" + target.id not in headings:
            headings["^" + target.id] = frozenset(a.lower() for a in target.anchors)
        if link.block.lower() not in headings["^" + target.id]:
            return replace(resolved, problem=f"no block ^{link.block} in {target.title or target.slug}")
    if link.heading:
        if target.id not in headings:
            headings[target.id] = [heading_key(h.path[-1]) for h in Layout(target.body).headings if h.path]
        missing = _missing_heading(link.heading.split("#"), headings[target.id])
        if missing:
            return replace(resolved, problem=f"no heading {missing!r} in {target.title or target.slug}")
    return resolved


def _missing_heading(parts: list[str], present: list[str]) -> str:
    """The first part of a nested heading link not found after the previous ones ("" if all are)."""
    at = 0
    for part in parts:
        key = heading_key(part)
        try:
            at = present.index(key, at) + 1
        except ValueError:
            return part
    return ""


def _tally(resolved: ResolvedLink, note: str, times: int, report: LinkReport) -> None:
    """Count a link written ``times`` times in the note; list it when it did not resolve cleanly."""
    link = resolved.link
    written = link.target + (f"#{link.heading}" if link.heading else "") + (f"#^{link.block}" if link.block else "")
    if resolved.status == "note":
        report.to_notes += times
        if resolved.problem:
            report.add(LinkIssue(note, written, "block" if link.block else "heading", resolved.problem))
    elif resolved.status == "file":
        report.to_files += times
    elif resolved.status == "ambiguous":
        report.add(LinkIssue(note, written, "ambiguous", "several notes match: " + ", ".join(resolved.candidates[:10])))
        report.counts["ambiguous"] += times - 1
    elif resolved.status == "outside":
        report.add(LinkIssue(note, written, "outside", "points outside the vault; never followed"))
        report.counts["outside"] += times - 1
    else:
        report.add(LinkIssue(note, written, "unresolved", "no note or file of that name in the vault"))
        report.counts["unresolved"] += times - 1


def _report_embed_loops(out_links: dict[str, list[ResolvedLink]], report: LinkReport) -> None:
    """Each loop of note embeds (a strongly connected group, or a note embedding itself)."""
    graph = {
        note: sorted({r.to for r in links if r.link.kind == "embed" and r.status == "note"})
        for note, links in out_links.items()
    }
    for group in strongly_connected(graph):
        if len(group) > 1 or group[0] in graph.get(group[0], ()):
            names = sorted(group)
            shown = " -> ".join(names[:10] + (["..."] if len(names) > 10 else []) + [names[0]])
            what = "embeds itself" if len(group) == 1 else f"embed loop of {len(group)} notes: {shown}"
            report.add(LinkIssue(names[0], names[0] if len(group) == 1 else "", "embed_loop", what))


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative (a chain of 10,000 embeds has no
    recursion limit to hit), in linear time."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            edges = graph.get(node, [])
            if i < len(edges):
                work.append((node, i + 1))
                nxt = edges[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if work:  # returning to the caller: pass the lowest index up
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                groups.append(group)
    return groups
