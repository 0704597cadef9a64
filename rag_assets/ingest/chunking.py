"""Split a parsed Markdown :class:`~rag_assets.records.Document` into retrievable chunks.

The public entry points (chunk_document, plan_chunks, ChunkingParams, ChunkSpan, render_span)
and the frontmatter context of chunk 0; the guarantees they keep are described below.  The
work lives in blocks (the Markdown block model), packing (the Planner), cuts (the cut search)
and spans (the chunking vocabulary).

Why it works the way it does
----------------------------
Retrieval quality depends on chunks that are (a) about one topic, (b) small enough
for the embedding model, and (c) still valid Markdown, because the chunk text is
shown to a language model (an unclosed code fence turns everything after it into
"code").  So the chunker:

* parses the body **once** with markdown-it (block rules only: inline parsing is
  not needed for structure and would double the cost) and works with the token
  ``.map`` line ranges, so ``#`` lines inside code fences are never taken for
  headings and setext headings are;
* treats every code block (fenced or indented, at any nesting level) as
  **atomic**: a chunk boundary never falls inside one.  So is an HTML block that
  contains fence-like lines, and a whole top-level list/quote holding a fence that
  would not be closed if read without its container (closed only by the
  container's end, or by a closing line indented 4+ columns);
* cuts, in order of preference, before a heading (the outermost one available,
  which keeps a whole section together when it fits; never right after one), at a
  block boundary, after a sentence, between words; text without spaces (CJK) is
  cut after sentence punctuation (``。！？.!?``) or, failing that, at a character
  boundary.

Every chunk's text is a verbatim slice of the body ``body[overlap_start:end]``
(so no word is lost or altered), preceded by an optional prefix: the frontmatter
context for chunk 0, or a *re-wrap* line for an overlap that starts inside a code
block (see below), and followed by an optional closing fence when the body
itself leaves a top-level fence open at its very end.  A slice starts either at a
whole source line (indentation included) or mid-line on a word that reads as
paragraph text there (never on a triple backtick, list marker, ``>``...), so a
top-level fence reads in the chunk exactly as in the source and stays balanced.
Fences nested in lists/quotes can read differently without their container's
first line; the rare chunks holding one are parsed again and, if a fence is left
open, get a closing fence appended.

Sizes (all "words" are whitespace-separated tokens, i.e. ``str.split()``)
-----------------------------------------------------------------------
``target_words`` counts **new** words only: the overlap copied from the previous
chunk and the frontmatter context of chunk 0 are not counted.  Guarantees:

* new words per chunk <= ``target_words``, and chunk text <= ``max_chars``
  characters, except for a chunk built around a *large atomic block* (one with
  more than ``target_words - min_words`` words or more than ``max_chars // 2``
  characters).  Such a block always gets a chunk of its own, which may exceed
  both limits; the only other new content that chunk holds is the headings
  directly above the block and, on each side, a stretch of fewer than
  ``min_words`` words (and at most ``max_chars // 2`` characters) lying between
  it and the next large block or the document edge, merged into it rather than
  left as a tiny chunk.  (Also exempt, as degenerate inputs: a heading line
  longer than the limits, as headings are never split, and chunk 0 when the
  frontmatter context alone takes more than three quarters of ``max_chars``.)
* new words per chunk >= ``min_words`` whenever the structure allows it (and
  ``target_words >= 2 * min_words``, as with the defaults): the cut search first
  looks for a cut leaving at least ``min_words`` on both sides.
  A chunk can be smaller only if the whole document is (a document under
  ``min_words`` words that fits in ``max_chars`` is exactly one chunk), if it or
  its neighbour was cut by ``max_chars`` (long tokens, CJK), or if the range where
  the cut should go holds no legal cut point (it lies in a code block, or on words
  such as a mid-line ``~~~`` that must not start a chunk).  Conversely, a long
  run of such words (say fifty ``~~~`` in a row) may push a chunk past the limits.

Overlap and fences
------------------
Chunk *i > 0* starts with the last ``overlap_words`` words of the body before its
new content, which are the last words of chunk *i-1* (exactly so whenever chunk
*i-1* has at least ``overlap_words`` words of body text).  When those words start
inside a fenced code block, the block's opening line (with its info string) is
prepended, so the copied tail of the block and its original closing fence form a
balanced block again; the same is done for an HTML block that contains
fence-like lines.  To keep this guarantee simple the overlap may be a few words
*shorter* than ``overlap_words`` when its first word falls on a fence's opening
or closing line, on a mid-line word that would begin a block (see above),
mid-line inside a fence nested in a list or quote (its indentation or ``>``
prefix would be lost), or inside an atomic list/quote.  The overlap is also capped at ``max_chars // 4`` characters (otherwise 50 "words" of
CJK text could be the whole previous chunk); a capped overlap may begin inside a
long token.
"""

from __future__ import annotations

from rag_assets.config.settings import ChunkingParams
from rag_assets.ingest.blocks import FENCE_RUN, Layout
from rag_assets.ingest.packing import Planner
from rag_assets.ingest.spans import ChunkSpan, render_span
from rag_assets.records import Chunk, Document

__all__ = ["ChunkingParams", "ChunkSpan", "chunk_document", "context_prefix", "plan_chunks", "render_span"]


def context_prefix(title: str, description: str, tags: list[str]) -> str:
    """Title, description and tags, so the first chunk says what the page is about
    (public: :mod:`rag_assets.search.documents` strips it to give a page's body back)."""
    lines = []
    for part in (title, description):
        text = " ".join(str(part or "").split())
        if text:
            lines.append(_escape_fence_start(text))
    tags = [" ".join(str(tag).split()) for tag in (tags or [])]
    tags = [tag for tag in tags if tag]
    if tags:
        lines.append(_escape_fence_start("Tags: " + ", ".join(tags)))
    return "\n".join(lines) + "\n\n" if lines else ""


def _escape_fence_start(line: str) -> str:
    # A title like "```foo" would open a code fence swallowing the whole chunk.
    return "\\" + line if FENCE_RUN.match(line) else line


def plan_chunks(doc: Document, params: ChunkingParams = ChunkingParams()) -> tuple[str, list[ChunkSpan]]:
    """The body as chunked (line endings normalised) and where each chunk's text comes from."""
    body = doc.body.replace("\r\n", "\n").replace("\r", "\n")
    layout = Layout(body)
    return body, Planner(layout, params, context_prefix(doc.title, doc.description, doc.tags)).plan()


def chunk_document(doc: Document, params: ChunkingParams = ChunkingParams()) -> list[Chunk]:
    """Split ``doc`` into heading-aware, overlapping chunks with balanced code fences.

    See the module docstring for the size, overlap and fence guarantees.  The output
    depends only on ``doc`` and ``params`` (IDs are index based: ``<collection>/<slug>/
    chunk-<i>``), so rebuilding an unchanged document yields identical chunks.
    """
    body, spans = plan_chunks(doc, params)
    texts = [render_span(body, span) for span in spans]
    total = len(texts)
    return [
        Chunk(
            id=f"{doc.collection}/{doc.slug}/chunk-{i}",
            text=text,
            collection=doc.collection,
            slug=doc.slug,
            title=doc.title,
            chunk_index=i,
            total_chunks=total,
            heading_path=list(span.heading_path),
            word_count=len(text.split()),
            tags=list(doc.tags),
        )
        for i, (span, text) in enumerate(zip(spans, texts))
    ]
