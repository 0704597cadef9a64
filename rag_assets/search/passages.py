"""Passages of a context: citation tags (page and heading anchor) and consecutive chunks of one
page joined back into the text they cover, their overlap dropped."""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import quote

PASSAGE_SEPARATOR = "\n\n"
"""Between passages: one blank line."""

# --------------------------------------------------------------------------- citations

_ANCHOR_DROP = re.compile(r"[^\w\- ]")


def heading_anchor(heading: str) -> str:
    """GitHub-style anchor of a heading: lowercase, punctuation dropped, spaces to ``-``.

    ``"Network Configuration"`` -> ``network-configuration``; ``"Step 1: VLANs & bridges"``
    -> ``step-1-vlans--bridges`` (GitHub, like Hugo's default, keeps the double hyphen).
    Letters and digits of any script are kept.
    """
    text = _ANCHOR_DROP.sub("", heading.strip().lower())
    return text.replace(" ", "-")


def citation_tag(collection: str, slug: str, heading_path: Sequence[str] = ()) -> str:
    """``[<collection>:<slug>#<anchor>]`` for the deepest heading, ``[<collection>:<slug>]`` without one."""
    anchor = heading_anchor(heading_path[-1]) if heading_path else ""
    return f"[{collection}:{slug}#{anchor}]" if anchor else f"[{collection}:{slug}]"


# Characters Obsidian does not allow in a link's heading part (it drops them when it links one).
_NOTE_HEADING_DROP = re.compile(r"[\[\]|#^]")


def cites_notes(tier: str) -> bool:
    """True for the tiers whose stores hold vault notes only (Safe and Private): their passages
    are cited as Obsidian links; the public tier's site pages keep ``[collection:slug#anchor]``."""
    return tier != "public"


def note_citation(slug: str, heading_path: Sequence[str] = ()) -> str:
    """``[[<note path>#<deepest heading>]]``, how Obsidian links a note's section (``[[<note path>]]``
    without a heading). The path (the slug: the note's path in its vault, without ``.md``)
    always resolves, however many notes share the file name."""
    heading = " ".join(_NOTE_HEADING_DROP.sub(" ", heading_path[-1]).split()) if heading_path else ""
    return f"[[{slug}#{heading}]]" if heading else f"[[{slug}]]"


def obsidian_uri(vault: str, slug: str) -> str:
    """``obsidian://open?vault=<vault>&file=<note path>``, both URL-encoded (``/`` too), which
    opens the note in Obsidian. ``vault`` is the vault's name in rag.yaml: Obsidian knows a
    vault by its folder's name, so the two should match for the link to open."""
    return f"obsidian://open?vault={quote(vault, safe='')}&file={quote(slug, safe='')}"


# --------------------------------------------------------------------------- merging chunks

_WORD = re.compile(r"\S+")
_FENCE_OPENER_LINE = re.compile(r"\A[ \t>]*(?:`{3,}|~{3,})[^\n]*\n")
_FENCE_CLOSER_LINE = re.compile(r"\n[ \t>]*(?:`{3,}|~{3,})[ \t]*\Z")
# The first overlap word may be the end of a longer token (a capped CJK overlap); only
# accepted when it is at least this long, so that "a." never matches the end of "data.".
_MIN_PARTIAL_WORD = 8


def _overlap(first: str, second: str) -> tuple[int, int]:
    """Longest word prefix of ``second`` that ends ``first``: (words, offset in ``second`` after it).

    (0, 0) when there is none. A match made only of punctuation (a lone fence marker
    ending one chunk and opening the next) does not count.
    """
    words1 = _WORD.findall(first)
    matches2 = list(_WORD.finditer(second))
    words2 = [m.group() for m in matches2]
    n1 = len(words1)
    if not n1 or not words2:
        return 0, 0
    last, head = words1[-1], words2[0]
    for k in range(min(n1, len(words2)), 0, -1):
        if words2[k - 1] != last and k > 1:
            continue
        start = words1[n1 - k]
        if not (head == start or (len(head) >= _MIN_PARTIAL_WORD and start.endswith(head))):
            continue
        if k > 1 and words2[1:k] != words1[n1 - k + 1 :]:
            continue
        if any(ch.isalnum() for word in words2[:k] for ch in word):
            return k, matches2[k - 1].end()
    return 0, 0


def join_consecutive_chunks(first: str, second: str) -> str:
    """``first`` followed by ``second`` without the words ``second`` repeats from ``first``'s end.

    For chunk i and i+1 of one document this is the body region both cover, verbatim.
    Handles the chunker's re-wrap line (a fence opener before an overlap that starts in
    a code block) and an appended closing fence: of the readings with and without them,
    the one with the longest overlap wins. Without any overlap the two texts are joined
    with a blank line.
    """
    if not first.strip():
        return second
    if not second.strip():
        return first
    opener = _FENCE_OPENER_LINE.match(second)
    closer = _FENCE_CLOSER_LINE.search(first)
    heads = [first] + ([first[: closer.start()]] if closer else [])
    skips = [0] + ([opener.end()] if opener else [])
    best: tuple[int, str] | None = None
    for head in heads:
        for skip in skips:
            words, end = _overlap(head, second[skip:])
            if words and (best is None or words > best[0]):
                best = (words, head + second[skip + end :])
    return best[1] if best is not None else first + PASSAGE_SEPARATOR + second
