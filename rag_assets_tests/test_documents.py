"""search/documents.py: a page put back together from its chunks, and its sections by anchor."""

from __future__ import annotations

from rag_assets.config.settings import ChunkingParams
from rag_assets.ingest.chunking import chunk_document, context_prefix
from rag_assets.records import Document
from rag_assets.search.documents import page_body, sections_of

_count = iter(range(1000))


def prose(sentences: int) -> str:
    # Numbered: text repeated word for word across a chunk boundary would make the overlap ambiguous.
    return " ".join(
        f"Sentence {next(_count)} about the homelab keeps this section long enough to cut." for _ in range(sentences)
    )


BODY = (
    "# Guide\n\n"
    + prose(6)
    + "\n\n## Setup\n\n"
    + prose(5)
    + "\n\n```bash\n# a comment, not a heading\n"
    + "".join(f"echo step {i}\n" for i in range(30))
    + "```\n\n"
    + "## Setup\n\n"
    + prose(4)
    + "\n\n### Details\n\n"
    + prose(3)
    + "\n\n# Appendix\n\n"
    + prose(2)
    + "\n"
)


def document(body: str = BODY) -> Document:
    return Document(
        collection="docs",
        slug="guide",
        path="docs/guide.md",
        title="Guide",
        description="How it is set up.",
        tags=["homelab"],
        frontmatter={},
        body=body,
        updated_at="2026-01-01T00:00:00Z",
        content_sha256="0",
    )


def test_page_body_gives_back_the_body_the_chunks_were_cut_from():
    doc = document()
    chunks = chunk_document(doc, ChunkingParams(target_words=60, overlap_words=15, min_words=20))
    assert len(chunks) >= 5 and chunks[0].text.startswith("Guide\nHow it is set up.\nTags: homelab\n\n")
    assert page_body([c.text for c in chunks], context_prefix(doc.title, doc.description, doc.tags)) == BODY


def test_sections_have_unique_anchors_and_skip_code():
    sections = sections_of(BODY)
    assert [(s.anchor, s.level) for s in sections] == [
        ("guide", 1),
        ("setup", 2),
        ("setup-1", 2),
        ("details", 3),
        ("appendix", 1),
    ]
    first_setup, second_setup, details = sections[1], sections[2], sections[3]
    assert "# a comment, not a heading" in BODY[first_setup.start : first_setup.end]
    assert (
        BODY[second_setup.start : second_setup.end].startswith("## Setup\n")
        and "### Details" in BODY[second_setup.start : second_setup.end]
    )
    assert (
        BODY[details.start : details.end].rstrip().endswith("long enough to cut.")
        and "# Appendix" not in BODY[details.start : details.end]
    )
    assert BODY[sections[0].start : sections[0].end] == BODY[: sections[4].start]
