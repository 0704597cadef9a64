"""Obsidian's Markdown extensions read with markdown-it rules, and a note body rewritten as read.

A vault note's body reaches the chunker (and so the embedder and BM25) as Obsidian shows it
in reading view, not as typed:

* ``[[Note]]``, ``[[Note|alias]]``, ``[[Note#Heading]]``, ``[[Note#^block]]`` become their
  display text (the alias, else the note name, ``Note > Heading`` for a heading link);
* embeds ``![[diagram.png]]`` and ``![[Other note#Section]]`` leave no text;
* ``%% comments %%`` (inline, or whole lines up to a closing ``%%`` line) are dropped;
* a ``^block-id`` at the end of a block is dropped (kept as an anchor);
* a callout's ``[!type]`` marker is dropped, its title and text stay (a callout without a
  title keeps its type as title, as Obsidian shows it).

Every link (and Markdown links to ``.md`` files), inline ``#tag`` and block id is recorded.
The rules are markdown-it rules, so code spans, fences, indented code, HTML blocks and link
URLs are never read as Obsidian syntax. The rewrite maps each rule's position in an inline
token's content back to the body through the token's line map; a line whose content cannot
be located (a tab markdown-it expanded) keeps its text as typed, its links still recorded.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from rag_assets.records import Link

# A wikilink is one line; this bounds the search for its "]]" (10,000 "[[" on a line stay linear).
MAX_WIKILINK_CHARS = 1000
_WIKILINK_IN_TEXT = re.compile(r"(!?)\[\[([^\[\]\n]{1,%d})\]\]" % MAX_WIKILINK_CHARS)  # noqa: UP031 (braces of the regex)
_BLOCK_ID = re.compile(r"\^([A-Za-z0-9-]+)[ \t]*$")
_TAG = re.compile(r"#([\w/-]+)")
_CALLOUT = re.compile(r"\[!([^\]\n]+)\][+-]?[ \t]*")
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
NOTE_SUFFIXES = (".md", ".markdown", ".mdx")


@dataclass
class NoteSyntax:
    """What one body holds: its text as read, and the links, tags and block ids found in it."""

    body: str
    links: list[Link] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    blocks: dict[str, str] = field(default_factory=dict)  # block id -> the block's text, as typed


def parse_wikilink(inner: str, *, embed: bool, source: str = "body") -> Link | None:
    """The link written as ``[[inner]]`` (``![[inner]]`` when ``embed``), or None when empty."""
    target, _, alias = inner.replace("\\|", "|").partition("|")
    note, _, subpath = target.partition("#")
    note = note.strip()
    parts = [p.strip() for p in subpath.split("#") if p.strip()]
    block = parts[0][1:] if parts and parts[0].startswith("^") else ""
    headings = [] if block else parts
    if not note and not headings and not block:
        return None
    display = "" if embed else alias.strip() or " > ".join([note, *headings] if note else headings) or note
    kind = "embed" if embed else "wikilink"
    return Link(note, "#".join(headings), block, display, kind, source)


def replace_wikilinks(text: str, source: str) -> tuple[str, list[Link]]:
    """A plain string (a property value, not Markdown) with its wikilinks as display text."""
    links: list[Link] = []

    def display(match: re.Match) -> str:
        link = parse_wikilink(match.group(2), embed=bool(match.group(1)), source=source)
        if link is None:
            return match.group(0)
        links.append(link)
        return link.display

    return _WIKILINK_IN_TEXT.sub(display, text), links


def is_note_target(target: str) -> bool:
    """Does a link name a note (no extension, or a Markdown one) rather than an attachment?"""
    name = target.rsplit("/", 1)[-1]
    return "." not in name or name.lower().endswith(NOTE_SUFFIXES)


# --- markdown-it rules ------------------------------------------------------------


def _push(state: StateInline, start: int, end: int, **meta) -> None:
    token = state.push("obsidian", "", 0)
    token.meta = {"start": start, "end": end, **meta}


def _wikilink_rule(state: StateInline, silent: bool) -> bool:
    pos, src = state.pos, state.src
    embed = src.startswith("![[", pos)
    if not embed and not src.startswith("[[", pos):
        return False
    inner_start = pos + (3 if embed else 2)
    close = src.find("]]", inner_start, min(state.posMax, inner_start + MAX_WIKILINK_CHARS + 2))
    if close < 0:
        return False
    inner = src[inner_start:close]
    link = None if "\n" in inner or "[[" in inner else parse_wikilink(inner, embed=embed)
    if link is None:
        return False
    if not silent:
        _push(state, pos, close + 2, link=link, text=link.display)
    state.pos = close + 2
    return True


def _comment_rule(state: StateInline, silent: bool) -> bool:
    pos = state.pos
    if not state.src.startswith("%%", pos):
        return False
    close = state.src.find("%%", pos + 2, state.posMax)
    if close < 0:
        return False  # an unclosed %% stays text rather than hiding the rest of the block
    if not silent:
        _push(state, pos, close + 2, text="")
    state.pos = close + 2
    return True


def _block_id_rule(state: StateInline, silent: bool) -> bool:
    pos, src = state.pos, state.src
    if src[pos] != "^" or (pos > 0 and not src[pos - 1].isspace()) or state.posMax != len(src):
        return False
    match = _BLOCK_ID.match(src, pos, state.posMax)  # only at the very end of the block
    if match is None:
        return False
    if not silent:
        _push(state, pos, match.end(), anchor=match.group(1), text="")
    state.pos = match.end()
    return True


def _tag_rule(state: StateInline, silent: bool) -> bool:
    pos, src = state.pos, state.src
    if src[pos] != "#" or (pos > 0 and not src[pos - 1].isspace()):
        return False
    match = _TAG.match(src, pos, state.posMax)
    tag = match.group(1).strip("/") if match else ""
    if match is None or not tag or tag.isdigit():  # "#123" is an issue number, not a tag
        return False
    if not silent:
        _push(state, pos, match.end(), tag=tag)  # no "text": the tag stays in the text
    state.pos = match.end()
    return True


def _comment_block_rule(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """``%%`` opening a line, closed by a later line ending in ``%%``: the lines are dropped."""
    first = state.src[state.bMarks[start] + state.tShift[start] : state.eMarks[start]]
    if state.sCount[start] - state.blkIndent >= 4 or not first.startswith("%%") or "%%" in first[2:]:
        return False
    line = start + 1
    while line < end:
        text = state.src[state.bMarks[line] + state.tShift[line] : state.eMarks[line]]
        if text.rstrip().endswith("%%"):
            break
        line += 1
    else:
        return False
    if not silent:
        token = state.push("obsidian_comment", "", 0)
        token.map = [start, line + 1]
    state.line = line + 1
    return True


def obsidian_markdown() -> MarkdownIt:
    """CommonMark (as the chunker parses it) plus Obsidian's inline and comment rules."""
    md = MarkdownIt("commonmark")
    md.inline.ruler.before("link", "obsidian_wikilink", _wikilink_rule)
    md.inline.ruler.before("text", "obsidian_comment", _comment_rule)
    md.inline.ruler.before("text", "obsidian_block_id", _block_id_rule)
    md.inline.ruler.before("text", "obsidian_tag", _tag_rule)
    md.block.ruler.before(
        "fence", "obsidian_comment", _comment_block_rule, {"alt": ["paragraph", "reference", "blockquote", "list"]}
    )
    return md


_MD = obsidian_markdown()  # only read after creation


# --- the rewrite --------------------------------------------------------------------


class _Rewrite:
    """Edits of one body (offset ranges and their replacement), collected from its tokens."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", body)]
        self.edits: list[tuple[int, int, str]] = []
        self.found = NoteSyntax(body)

    def line_span(self, line: int) -> tuple[int, int]:
        start = self.line_starts[line] if line < len(self.line_starts) else len(self.body)
        end = self.line_starts[line + 1] - 1 if line + 1 < len(self.line_starts) else len(self.body)
        return start, end

    def content_offsets(self, token: Token) -> list[int | None]:
        """Body offset of each line of an inline token's content (None: not located)."""
        offsets: list[int | None] = []
        for k, text in enumerate(token.content.split("\n")):
            start, end = self.line_span(token.map[0] + k) if token.map else (0, 0)
            line, want = self.body[start:end].rstrip(), text.rstrip()
            if want and line.endswith(want):
                offsets.append(start + len(line) - len(want))
            else:
                at = line.find(want) if want else -1
                offsets.append(start + at if at >= 0 else None)
        return offsets

    def inline(self, token: Token) -> None:
        content_starts = [0] + [m.end() for m in re.finditer("\n", token.content)]
        offsets = self.content_offsets(token)

        def to_body(pos: int) -> int | None:
            k = bisect_right(content_starts, pos) - 1
            base = offsets[k] if k < len(offsets) else None
            return None if base is None else base + pos - content_starts[k]

        children = token.children or []
        for i, child in enumerate(children):
            if child.type == "link_open":
                self.markdown_link(child, children[i + 1 :])
            if child.type != "obsidian":
                continue
            self.record(child.meta)
            if "anchor" in child.meta:  # the block's text up to its id, read as the body is below
                self.found.blocks.setdefault(child.meta["anchor"], token.content[: child.meta["start"]].rstrip())
            if "text" in child.meta:
                start, end = to_body(child.meta["start"]), to_body(child.meta["end"])
                if start is not None and end is not None:
                    self.edits.append((start, end, child.meta["text"]))

    def record(self, meta: dict) -> None:
        if "link" in meta:
            self.found.links.append(meta["link"])
        if "tag" in meta:
            self.found.tags.append(meta["tag"])
        if "anchor" in meta:
            self.found.anchors.append(meta["anchor"])

    def markdown_link(self, opener: Token, rest: list[Token]) -> None:
        """``[x](Other%20note.md#Part)``: a link to a note of the vault, recorded like a wikilink."""
        href = str(opener.attrs.get("href", ""))
        path, _, fragment = href.partition("#")
        path = unquote(path)
        if not path or _URL_SCHEME.match(path) or not path.lower().endswith(NOTE_SUFFIXES):
            return
        words = []
        for token in rest:
            if token.type == "link_close":
                break
            words.append(token.meta.get("text", "") if token.type == "obsidian" else token.content)
        self.found.links.append(Link(path, unquote(fragment), "", "".join(words).strip(), "markdown"))

    def callout(self, token: Token) -> None:
        """``> [!type] Title``: the marker goes; a callout without a title shows its type."""
        match = _CALLOUT.match(token.content)
        offsets = self.content_offsets(token)
        if match is None or not offsets or offsets[0] is None:
            return
        titled = match.end() < len(token.content) and token.content[match.end()] != "\n"
        label = "" if titled else match.group(1).strip().replace("-", " ").capitalize()
        self.edits.append((offsets[0], offsets[0] + match.end(), label))

    def drop_lines(self, first: int, last: int) -> None:
        start = self.line_span(first)[0]
        end = self.line_starts[last] if last < len(self.line_starts) else len(self.body)
        self.edits.append((start, end, ""))

    def result(self) -> NoteSyntax:
        pieces, cursor = [], 0
        for start, end, text in sorted(self.edits):
            if start < cursor:
                continue  # overlaps an earlier edit (a construct inside another): keep the first
            pieces += [self.body[cursor:start], text]
            cursor = end
        pieces.append(self.body[cursor:])
        self.found.body = "".join(pieces)
        # De-duplicated once here: a membership test per find was quadratic in a note of 10,000 tags.
        self.found.tags = list(dict.fromkeys(self.found.tags))
        self.found.anchors = list(dict.fromkeys(self.found.anchors))
        # A block's text as read (links as display text); a block holds no block id, so no recursion.
        self.found.blocks = {a: read_note_syntax(text).body for a, text in self.found.blocks.items()}
        return self.found


def read_note_syntax(body: str) -> NoteSyntax:
    """The body as Obsidian's reading view shows it, with its links, tags and block ids."""
    rewrite = _Rewrite(body)
    tokens = _MD.parse(body)
    for i, token in enumerate(tokens):
        if token.type == "obsidian_comment" and token.map:
            rewrite.drop_lines(*token.map)
        elif token.type == "inline":
            if i >= 2 and tokens[i - 2].type == "blockquote_open" and tokens[i - 1].type == "paragraph_open":
                rewrite.callout(token)
            rewrite.inline(token)
    return rewrite.result()
