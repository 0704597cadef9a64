"""Note embeds transcluded: ``![[Note]]``, ``![[Note#Heading]]``, ``![[Note#^block]]`` bring the
embedded text into the embedding note's chunks, when the vault sets ``transclude_embeds``.

Runs after link resolution (:func:`rag_assets.ingest.link_resolution.resolve_vault`), on the
documents of ONE vault as they will be chunked (sanitised already in the Safe tier), so the
text can only come from a note of the same vault and tier, found by the resolution rules; an
unresolved, ambiguous or outside embed brings nothing. The embedded text is appended after the
note's own text (the embed's position is not kept by the reading, which drops embeds), each
under a line ``Embedded from Note > Heading:``; its headings become plain lines, so the
embedding note gains no section it does not have.

Bounds, each reported in the vault's :class:`LinkReport`:

* a whole note's own embeds are followed to :data:`MAX_EMBED_DEPTH` levels (a heading's
  section or a block is included as it reads, its embeds not followed);
* a note already being expanded (a loop, or a note embedding itself) is not included again:
  each note's text appears at most once per embedding chain (``transclusion_loop``);
* at most :data:`MAX_TRANSCLUDED_CHARS` characters are added to one note (``transclusion_capped``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rag_assets.ingest.blocks import Layout
from rag_assets.ingest.link_resolution import LinkIssue, LinkReport, heading_key
from rag_assets.records import Document, ResolvedLink

# Part of a vault's source hash when transclusion is on: bump it when the same notes would transclude differently.
TRANSCLUSION_VERSION = "transclude-1"
MAX_EMBED_DEPTH = 3  # embeds inside embedded notes, followed this many levels
MAX_TRANSCLUDED_CHARS = 20_000  # added to one note at most (about 3,000 words)


@dataclass
class _Expansion:
    """One embedding note's transclusion in progress: the text so far, what was cut or skipped."""

    note: str
    pieces: list[str]
    layouts: dict[str, Layout]  # shared by the vault's notes: 5,000 heading embeds parse a note once
    size: int = 0
    capped: bool = False


def transclude_vault(documents: list[Document], report: LinkReport) -> list[Document]:
    """The documents with the text of their note embeds appended (only notes that embed change)."""
    by_id = {d.id: d for d in documents}
    out = []
    layouts: dict[str, Layout] = {}
    for doc in documents:
        if not _note_embeds(doc):
            out.append(doc)
            continue
        run = _Expansion(doc.id, [], layouts)
        _expand(doc, by_id, (doc.id,), 1, run, report)
        if run.capped:
            report.add(
                LinkIssue(
                    doc.id, "", "transclusion_capped", f"transcluded text cut at {MAX_TRANSCLUDED_CHARS} characters"
                )
            )
        out.append(replace(doc, body=doc.body.rstrip("\n") + "".join(run.pieces) + "\n") if run.pieces else doc)
    return out


def _note_embeds(doc: Document) -> list[ResolvedLink]:
    """The note's body embeds that resolved to a note of the vault, in order."""
    return [r for r in doc.resolved_links if r.link.kind == "embed" and r.status == "note" and r.link.source == "body"]


def _expand(
    doc: Document, by_id: dict[str, Document], chain: tuple[str, ...], depth: int, run: _Expansion, report: LinkReport
) -> None:
    """Append the text of each of ``doc``'s note embeds, following whole-note embeds to the depth bound."""
    for resolved in _note_embeds(doc):
        target = by_id.get(resolved.to)
        if target is None:
            continue
        link = resolved.link
        if target.id in chain:  # reported even once the size bound is reached
            what = "embeds itself" if target.id == doc.id else "embed loop: " + " -> ".join((*chain, target.id))
            report.add(LinkIssue(run.note, link.target, "transclusion_loop", f"{what}; included once, not again"))
            continue
        if run.capped:
            continue
        text = _embedded_text(target, link.heading, link.block, run.layouts)
        if text is None:
            continue  # the heading or block is not there (already reported by resolution)
        label = " > ".join(p for p in (target.title or target.slug, *link.heading.split("#")) if p)
        _append(run, f"\n\nEmbedded from {label}:\n\n{_plain_headings(text)}")
        if not link.heading and not link.block:
            if depth < MAX_EMBED_DEPTH:
                _expand(target, by_id, (*chain, target.id), depth + 1, run, report)
            elif _note_embeds(target):
                report.add(
                    LinkIssue(
                        run.note,
                        link.target,
                        "transclusion_depth",
                        f"embeds deeper than {MAX_EMBED_DEPTH} levels not followed",
                    )
                )


def _append(run: _Expansion, text: str) -> None:
    """Add text to the note's transclusion, cut at the size bound."""
    room = MAX_TRANSCLUDED_CHARS - run.size
    if len(text) > room:
        text, run.capped = text[: max(room, 0)], True
    run.pieces.append(text)
    run.size += len(text)


def _embedded_text(target: Document, heading: str, block: str, layouts: dict[str, Layout]) -> str | None:
    """The whole note, its section under ``heading`` (``A#B`` nested), or block ``block``; None if absent."""
    if block:
        wanted = block.lower()
        return next((text for anchor, text in target.blocks.items() if anchor.lower() == wanted), None)
    if not heading:
        return target.body.strip()
    layout = layouts.get(target.id) or layouts.setdefault(target.id, Layout(target.body))
    keys = [heading_key(p) for p in heading.split("#") if p.strip()]
    for i, h in enumerate(layout.headings):
        if [heading_key(p) for p in h.path[-len(keys) :]] == keys and len(h.path) >= len(keys):
            end = next((n.start for n in layout.headings[i + 1 :] if n.level <= h.level), len(target.body))
            return target.body[h.start : end].strip()
    return None


def _plain_headings(text: str) -> str:
    """The text with each ATX heading's ``#`` marks dropped (a setext heading is left as written)."""
    layout = Layout(text)
    pieces, cursor = [], 0
    for h in layout.headings:
        line_end = text.find("\n", h.start)
        line = text[h.start : len(text) if line_end < 0 else line_end]
        stripped = line.lstrip()
        if stripped.startswith("#"):
            pieces += [text[cursor : h.start], stripped.lstrip("#").strip().rstrip("#").strip()]
            cursor = h.start + len(line)
    pieces.append(text[cursor:])
    return "".join(pieces)
