"""The chunking vocabulary: where a chunk's text comes from (the size knobs, ChunkingParams,
are configuration: rag_assets.config.settings).

A ChunkSpan is a slice of the body plus a prefix and suffix; render_span turns it into chunk text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")


@dataclass(frozen=True)
class ChunkSpan:
    """Where one chunk's text comes from: ``prefix + body[overlap_start:end] + suffix``.

    ``body[start:end]`` is the chunk's new content; ``body[overlap_start:start]`` is
    the overlap repeated from before.  ``prefix`` is the frontmatter context (chunk 0)
    or the opening line of a code block the overlap starts in (``rewrapped``);
    ``suffix`` is a closing fence line: for a fence the body leaves open at its end,
    or (rarely) for a fence nested in a list/quote that the chunk cuts off from its
    container.  Exposed so tests and debugging tools can check the chunker's
    guarantees against the source.
    """

    overlap_start: int
    start: int
    end: int
    prefix: str
    suffix: str
    rewrapped: bool
    heading_path: tuple[str, ...]


def render_span(body: str, span: ChunkSpan) -> str:
    """The chunk text of ``span``; blank lines around it are dropped, nothing else changes."""
    text = body[span.overlap_start : span.end].rstrip()
    if not span.rewrapped:  # inside a re-wrapped block, leading blank lines are code
        text = _LEADING_BLANK_LINES.sub("", text, count=1)
    if span.suffix:
        text += "\n" + span.suffix
    return (span.prefix + text).rstrip()
