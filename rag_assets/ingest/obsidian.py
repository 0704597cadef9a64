"""A vault note read the way Obsidian reads it: body syntax, properties, tags and aliases.

Applied to the notes of ``vaults:`` only (see :func:`rag_assets.ingest.parsing.parse_collection`);
a site collection's pages are read as plain Markdown, where ``[[x]]`` or ``#word`` may be
meant literally. The body syntax is :mod:`rag_assets.ingest.obsidian_syntax`; here:

* properties: a wikilink in any string value is replaced by its display text (so a filter
  ``author=Steph Ango`` and the page view read it as Obsidian shows it) and recorded as a
  link with ``source: property:<key>``;
* ``tags`` in Obsidian's forms (``tags: a, b``, ``tags: [a, b]``, a YAML list; a leading
  ``#`` dropped), then the body's inline ``#tags``, de-duplicated in that order;
* ``aliases`` (or the older ``alias``), a list or a comma-separated string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rag_assets.ingest.obsidian_syntax import read_note_syntax, replace_wikilinks
from rag_assets.records import Link

_TAG_SEPARATORS = re.compile(r"[,\s]+")
# Part of each vault's source hash (rag_assets/privacy/vaults.py): bump it when the same note
# file would be read differently, so the sensor and `rag build` rebuild every vault once.
NOTE_READING_VERSION = "obsidian-3"  # 2: links resolved, stored with backlinks; 3: aliases stored


@dataclass
class ObsidianNote:
    """A note's body and properties as read, with what the Document records of them."""

    body: str
    frontmatter: dict[str, Any]
    tags: list[str] = field(default_factory=list)
    aliases: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    blocks: dict[str, str] = field(default_factory=dict)


def read_obsidian_note(frontmatter: dict[str, Any], body: str) -> ObsidianNote:
    """The note's text as Obsidian's reading view shows it, and its links, tags and aliases."""
    links: list[Link] = []
    properties = {key: _resolve_links(value, key, links) for key, value in frontmatter.items()}
    syntax = read_note_syntax(body)
    tags = _unique(property_tags(properties.get("tags")) + syntax.tags)
    aliases = property_list(properties.get("aliases", properties.get("alias")))
    return ObsidianNote(syntax.body, properties, tags, aliases, links + syntax.links, syntax.anchors, syntax.blocks)


def _resolve_links(value: Any, key: str, links: list[Link]) -> Any:
    """A property value with each wikilink in its strings as display text (nested values too)."""
    if isinstance(value, str):
        if "[[" not in value:
            return value
        text, found = replace_wikilinks(value, f"property:{key}")
        links.extend(found)
        return text
    if isinstance(value, list):
        return [_resolve_links(v, key, links) for v in value]
    if isinstance(value, dict):
        return {k: _resolve_links(v, f"{key}.{k}", links) for k, v in value.items()}
    return value


def property_tags(raw: Any) -> list[str]:
    """``tags`` as Obsidian reads it: a list, or a string of tags separated by commas or spaces."""
    items = _TAG_SEPARATORS.split(raw) if isinstance(raw, str) else raw if isinstance(raw, list) else [raw]
    tags = [str(item).strip().lstrip("#").strip() for item in items if item is not None]
    return _unique([t for t in tags if t])


def property_list(raw: Any) -> list[str]:
    """``aliases``: a list, or a comma-separated string (an alias may hold spaces)."""
    if raw is None:
        return []
    items = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else [raw]
    return _unique([" ".join(str(item).split()) for item in items if item is not None and str(item).strip()])


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))  # first occurrence kept, in order
