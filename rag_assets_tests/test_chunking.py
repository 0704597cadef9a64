"""Tests of the Markdown chunker: properties on generated Markdown, examples, a real corpus.

The oracles deliberately use markdown-it (the full parser, not the chunker's block-only
instance) on the *input* to find code fences and headings, and on each *chunk* to check
that its fences are balanced, so they do not share logic with the chunker.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from rag_assets.ingest.chunking import (
    ChunkingParams,
    ChunkSpan,
    chunk_document,
    plan_chunks,
)
from rag_assets.records import Chunk, Document

from .conftest import CORPORA
from .deadline import deadline

PARAMS = ChunkingParams()
HANG_SECONDS = 120  # only against a hang: speed is measured in bench/, not asserted here
MD = MarkdownIt("commonmark")
# The shared corpora beside the checkout (../shared), wherever it is cloned.
HUGO_CONTENT = CORPORA / "hugo-docs" / "content"

# --------------------------------------------------------------------------- helpers


def make_doc(body: str, title: str = "Guide", description: str = "", tags: list[str] | None = None) -> Document:
    return Document(
        collection="docs",
        slug="guide",
        path="guide.md",
        title=title,
        description=description,
        tags=list(tags or []),
        frontmatter={},
        body=body,
        updated_at="2024-01-01T00:00:00Z",
        content_sha256="0" * 64,
    )


def line_offsets(text: str) -> list[int]:
    return [0] + [m.end() for m in re.finditer("\n", text)]


def offset_of_line(starts: list[int], line: int, n: int) -> int:
    return starts[line] if line < len(starts) else n


def is_closed_fence(fence, lines: list[str]) -> bool:
    first, last = fence.map
    if last - 1 <= first or last - 1 >= len(lines):
        return False
    line = lines[last - 1].rstrip()
    if len(line) - len(line.lstrip(" ")) > 3:
        return False  # indented 4+ columns: content, not a closing fence
    line = line.lstrip(" ")
    char = fence.markup[0]
    run = len(line) - len(line.lstrip(char))
    return run >= len(fence.markup) and line[run:].strip() == ""


def fences_balanced(text: str) -> bool:
    """No top-level fence of the chunk runs to the end of the chunk unclosed.

    (A fence nested in a list or quote is closed by its container, so it cannot
    swallow the text after it; a top-level one can.)
    """
    lines = text.split("\n")
    return all(is_closed_fence(t, lines) for t in MD.parse(text) if t.type == "fence" and t.level == 0)


def code_regions(body: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every fenced/indented code block of the body, any nesting."""
    starts = line_offsets(body)
    return [
        (offset_of_line(starts, t.map[0], len(body)), offset_of_line(starts, t.map[1], len(body)), t.type)
        for t in MD.parse(body)
        if t.type in ("fence", "code_block")
    ]


def heading_paths(body: str) -> list[tuple[int, list[str]]]:
    """(offset, path) of each top-level heading, from a full independent parse."""
    starts = line_offsets(body)
    tokens = MD.parse(body)
    stack: list[tuple[int, str]] = []
    out = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.level == 0:
            level = int(tok.tag[1])
            text = "".join(c.content for c in tokens[i + 1].children if c.type in ("text", "code_inline"))
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, " ".join(text.split())))
            out.append((offset_of_line(starts, tok.map[0], len(body)), [t for _, t in stack]))
    return out


def expected_heading_path(body: str, start: int) -> list[str]:
    m = re.compile(r"\S").search(body, start)
    first = m.start() if m else start
    path: list[str] = []
    for offset, p in heading_paths(body):
        if offset <= first:
            path = p
    return path


def count_words(text: str) -> int:
    return len(text.split())


def at_word_boundary(body: str, offset: int) -> bool:
    return offset == 0 or offset >= len(body) or body[offset - 1].isspace() or body[offset].isspace()


def without_headings(body: str, start: int, end: int) -> str:
    """body[start:end] with the lines of its top-level headings removed."""
    starts = line_offsets(body)
    text = body[start:end]
    for tok in reversed(MD.parse(body)):
        if tok.type == "heading_open" and tok.level == 0:
            a, b = (offset_of_line(starts, line, len(body)) for line in tok.map)
            if start <= a and b <= end:
                text = text[: a - start] + text[b - start :]
    return text


def atomic_regions(body: str) -> list[tuple[int, int, str]]:
    """Code blocks, HTML blocks with fence-like lines, and each top-level list/quote holding
    a code block (atomic as a whole when its fence cannot be read out of the container):
    the regions the chunking module docstring says are never split."""
    starts = line_offsets(body)
    code = code_regions(body) + [
        (offset_of_line(starts, t.map[0], len(body)), offset_of_line(starts, t.map[1], len(body)), t.type)
        for t in MD.parse(body)
        if t.type == "html_block" and re.search(r"^[ \t>]*(`{3}|~{3})", t.content, re.MULTILINE)
    ]
    containers = [
        (offset_of_line(starts, t.map[0], len(body)), offset_of_line(starts, t.map[1], len(body)), t.type)
        for t in MD.parse(body)
        if t.level == 0 and t.nesting == 1 and t.type in ("bullet_list_open", "ordered_list_open", "blockquote_open")
    ]
    return code + [c for c in containers if any(c[0] <= r[0] and r[1] <= c[1] for r in code)]


# Words that may not begin a chunk mid-line (superset of the chunker's rule).
BLOCK_START_WORD = re.compile(r"`{3}|~{3}|[-+*>#<_]|\d+[.)]")


def large_block(body: str, region: tuple[int, int, str], params: ChunkingParams) -> bool:
    start, end, _ = region
    return count_words(body[start:end]) > params.target_words - params.min_words or end - start > params.max_chars // 2


# --------------------------------------------------------------------------- generators

VOCAB = (
    "the a hugo site page build theme content config server deploy template partial "
    "render hook menu taxonomy section shortcode module output format image resource "
    "front matter markdown list item link path url file directory cache version"
).split()
CJK = "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严"


@st.composite
def words(draw, min_size: int = 1, max_size: int = 12) -> str:
    return " ".join(draw(st.lists(st.sampled_from(VOCAB), min_size=min_size, max_size=max_size)))


@st.composite
def prose(draw, min_words: int, max_words: int) -> str:
    """Sentences of random words, soft-wrapped at random line lengths (one paragraph)."""
    total = draw(st.integers(min_words, max_words))
    out: list[str] = []
    line_len = draw(st.sampled_from([8, 15, 1000]))
    rng = draw(st.randoms(use_true_random=False))
    # (A true random generator: hypothesis's own one can repeat an event 30 times in a
    # row, which makes a degenerate wall of "~~~" words no chunk may start with.)
    tricky_rng = draw(st.randoms(use_true_random=True))
    tricky = draw(st.booleans())
    for i in range(total):
        word = rng.choice(VOCAB)
        if rng.random() < 0.08:
            word += rng.choice([".", "!", "?", ".", ","])
        if tricky and i % line_len and tricky_rng.random() < 0.05:
            # Mid-line only: at a line start these would open a fence.
            word = tricky_rng.choice(["```", "~~~", "```js", "~~~~", "https://example.com/" + "x" * 150])
        out.append(word)
        if (i + 1) % line_len == 0 and i + 1 < total:
            out.append("\n")
    text = " ".join(out).replace(" \n ", "\n")
    return text + "."


@st.composite
def atx_heading(draw) -> str:
    return "#" * draw(st.integers(1, 4)) + " " + draw(words(1, 5)).capitalize()


@st.composite
def setext_heading(draw) -> str:
    return draw(words(1, 5)).capitalize() + "\n" + draw(st.sampled_from("=-")) * draw(st.integers(3, 10))


@st.composite
def bullet_list(draw) -> str:
    items = []
    for i in range(draw(st.integers(1, 6))):
        marker = draw(st.sampled_from(["- ", "* ", f"{i + 1}. "]))
        indent = "  " if i and draw(st.booleans()) and marker == "- " else ""
        items.append(indent + marker + draw(words(1, 20)))
    return "\n".join(items)


@st.composite
def fenced_code(draw, min_lines: int = 0, max_lines: int = 10, words_per_line: int = 8) -> str:
    char = draw(st.sampled_from("`~"))
    length = draw(st.integers(3, 5))
    indent = " " * draw(st.integers(0, 3))
    info = draw(st.sampled_from(["", "python", "sh", "js title=x copy=true", "go-html-template"]))
    other = "~" if char == "`" else "`"
    lines = [indent + char * length + info]
    for _ in range(draw(st.integers(min_lines, max_lines))):
        kind = draw(st.sampled_from(["code", "code", "code", "comment", "other-fence", "short-fence", "blank"]))
        if kind == "code":
            lines.append("    " * draw(st.integers(0, 2)) + draw(words(1, words_per_line)))
        elif kind == "comment":
            lines.append("# " + draw(words(1, 6)))
        elif kind == "other-fence":
            lines.append(other * draw(st.integers(3, 6)))
        elif kind == "short-fence" and length > 3:
            lines.append(char * (length - 1))
        else:
            lines.append("")
    lines.append(" " * draw(st.integers(0, 3)) + char * (length + draw(st.integers(0, 2))))
    return "\n".join(lines)


@st.composite
def container_with_fence(draw) -> str:
    """Fences nested in a list item or a blockquote, and HTML holding fence-like lines."""
    code = draw(fenced_code(max_lines=12))
    kind = draw(st.sampled_from(["list", "list-first", "quote", "html", "indented"]))
    if kind == "list":
        return "- " + draw(words(1, 10)) + "\n\n" + "\n".join("  " + line for line in code.split("\n"))
    if kind == "list-first":
        lines = code.lstrip(" ").split("\n")
        return "\n".join(["1. " + lines[0]] + ["   " + line for line in lines[1:]])
    if kind == "quote":
        return "\n".join(("> " + line).rstrip() for line in (draw(words(1, 10)) + "\n" + code).split("\n"))
    if kind == "html":
        return "<div>\n" + draw(words(1, 10)) + "\n```\n" + draw(words(1, 30)) + "\n</div>"
    lines = [draw(words(1, 8)) for _ in range(draw(st.integers(1, 30)))]
    return "\n".join("    " + line for line in lines)


@st.composite
def big_code(draw) -> str:
    """A code block over the target size (400-700 words)."""
    target = draw(st.integers(400, 700))
    char = draw(st.sampled_from(["```", "~~~~"]))
    lines, total = [], 0
    rng = draw(st.randoms(use_true_random=False))
    while total < target:
        line = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 9)))
        if rng.random() < 0.1:
            line = "# " + line
        lines.append(line)
        total += len(line.split())
    return char + "yaml\n" + "\n".join(lines) + "\n" + char


@st.composite
def cjk_run(draw) -> str:
    rng = draw(st.randoms(use_true_random=False))
    size = draw(st.integers(50, 5000))
    punctuate = draw(st.booleans())
    chars = []
    for _ in range(size):
        chars.append(rng.choice(CJK))
        if punctuate and rng.random() < 0.03:
            chars.append(rng.choice("。！？"))
    return "".join(chars)


BLOCK = st.one_of(
    atx_heading(),
    setext_heading(),
    prose(3, 60),
    prose(3, 60),
    bullet_list(),
    fenced_code(),
    fenced_code(min_lines=5, max_lines=40),
    prose(300, 900),
    big_code(),
    cjk_run(),
    container_with_fence(),
)


@st.composite
def markdown_bodies(draw) -> str:
    blocks = draw(st.lists(BLOCK, min_size=0, max_size=14))
    body = "\n\n".join(blocks)
    if draw(st.integers(0, 9)) == 0:  # a fence left open runs to the end of the document
        body += "\n\n```bash\n# still code\n" + draw(words(0, 30))
    return body + draw(st.sampled_from(["", "\n", "\n\n"]))


# Smaller sizes exercise many boundaries with short generated documents.
SMALL = ChunkingParams(target_words=60, overlap_words=10, min_words=15, max_chars=600)
# Overlap larger than the minimum: overlaps reach back across small chunks.
WIDE_OVERLAP = ChunkingParams(target_words=40, overlap_words=30, min_words=10, max_chars=400)
PARAM_SETS = st.sampled_from([PARAMS, PARAMS, SMALL, WIDE_OVERLAP])

PROPERTY_SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --------------------------------------------------------------------------- property checks


def check_chunk_fields(doc: Document, chunks: list[Chunk], spans: list[ChunkSpan]) -> None:
    assert len(chunks) == len(spans)
    for i, chunk in enumerate(chunks):
        assert chunk.id == f"{doc.collection}/{doc.slug}/chunk-{i}"
        assert (chunk.chunk_index, chunk.total_chunks) == (i, len(chunks))
        assert chunk.word_count == len(chunk.text.split())
        assert (chunk.collection, chunk.slug, chunk.title, chunk.tags) == (
            doc.collection,
            doc.slug,
            doc.title,
            doc.tags,
        )
        # Leading indentation is kept (it can make a line code), blank lines are not.
        assert chunk.text == chunk.text.rstrip() and chunk.text.strip()
        assert not re.match(r"[ \t]*\n", chunk.text)
    assert len({c.id for c in chunks}) == len(chunks)


def check_no_word_lost(body: str, chunks: list[Chunk], spans: list[ChunkSpan]) -> None:
    """The new parts tile the body, and chunk texts = prefix + overlap + new part + suffix."""
    if not body.split():
        return
    assert body[: spans[0].start].strip() == ""
    for prev, span in zip(spans, spans[1:]):
        assert prev.end == span.start
    assert spans[-1].end == len(body)
    for chunk, span in zip(chunks, spans):
        assert span.overlap_start <= span.start < span.end
        assert body[span.start : span.end].strip() in chunk.text
    # Public-output view: drop the added prefix, the overlap and the added closing fence
    # from each chunk's words; what is left, concatenated, is the body word for word.
    if all(at_word_boundary(body, s.start) for s in spans):
        new_words: list[str] = []
        for chunk, span in zip(chunks, spans):
            words = chunk.text.split()
            skip = count_words(span.prefix) + count_words(body[span.overlap_start : span.start])
            new_words.extend(words[skip : len(words) - count_words(span.suffix)])
        assert new_words == body.split()
    else:  # cuts inside long CJK tokens: compare the non-space characters instead
        new_chars: list[str] = []
        for chunk, span in zip(chunks, spans):
            chars = "".join(chunk.text.split())
            skip = len("".join((span.prefix + body[span.overlap_start : span.start]).split()))
            new_chars.append(chars[skip : len(chars) - len("".join(span.suffix.split()))])
        assert "".join(new_chars) == "".join(body.split())


def check_code_blocks_intact(body: str, chunks: list[Chunk], spans: list[ChunkSpan]) -> None:
    for start, end, _ in code_regions(body):
        holders = [i for i, s in enumerate(spans) if s.start <= start and end <= s.end]
        assert len(holders) == 1, (start, end, [(s.start, s.end) for s in spans])
        assert body[start:end].rstrip() in chunks[holders[0]].text


def check_fences_balanced(chunks: list[Chunk]) -> None:
    for chunk in chunks:
        assert fences_balanced(chunk.text), chunk.text


def check_sizes(body: str, chunks: list[Chunk], spans: list[ChunkSpan], params: ChunkingParams) -> None:
    regions = code_regions(body)
    atomics = atomic_regions(body)
    for i, (chunk, span) in enumerate(zip(chunks, spans)):
        new = body[span.start : span.end]
        new_words = count_words(new)
        if new_words > params.target_words or len(chunk.text) > params.max_chars:
            # Only a large code block (plus < min_words of prose on each side) may overflow.
            large = [r for r in atomics if span.start <= r[0] and r[1] <= span.end and large_block(body, r, params)]
            if not large:  # the documented degenerate case: a run of words none may start
                assert re.search(r"(?:^|\s)(?:(?:`{3}|~{3}|[-+*>#<_]|\d+[.)])\S*\s+){3}", new), i
                continue
            assert large, (i, new_words, len(chunk.text))
            block_start, block_end, _ = max(large, key=lambda r: r[1] - r[0])
            assert all(block_start <= r[0] and r[1] <= block_end for r in large)  # just one
            # (Headings directly above the block travel with it and are not counted.)
            assert count_words(without_headings(body, span.start, block_start)) < max(params.min_words, 1)
            assert count_words(body[block_end : span.end]) < max(params.min_words, 1)
        if new_words < params.min_words and len(chunks) > 1:
            # Smaller chunks only where max_chars forced the cut (CJK / long tokens) or a
            # code block next to the chunk left no cut point in the allowed range.
            near_code = any(
                r[0] < spans[j].end and spans[j].start < r[1]
                for r in regions
                for j in (i - 1, i, i + 1)
                if 0 <= j < len(spans)
            )
            char_bound = any(
                len(chunks[j].text) > params.max_chars // 2 for j in (i - 1, i, i + 1) if 0 <= j < len(chunks)
            )
            # ... or the next words offer no legal cut: a chunk never starts mid-line on
            # a word that would begin a block there (fence marker, list marker...).
            following = body[span.end :].split()[: params.min_words]
            no_cut = any(BLOCK_START_WORD.match(w) for w in following)
            assert near_code or char_bound or no_cut, (i, new_words)


def check_overlap(body: str, chunks: list[Chunk], spans: list[ChunkSpan], params: ChunkingParams) -> None:
    word_starts = [m.start() for m in re.finditer(r"\S+", body)]
    atomics = atomic_regions(body)
    cap = params.max_chars // 4
    for i in range(1, len(spans)):
        prev, span = spans[i - 1], spans[i]
        overlap = body[span.overlap_start : span.start]
        # The chunk text is the (re-wrap) prefix followed by the overlap, verbatim.
        text = chunks[i].text
        assert text.startswith(span.prefix.rstrip("\n"))
        if span.rewrapped:
            assert span.prefix.count("\n") == 1 and re.match(r"^[ \t>*+\-0-9.]*(`{3,}|~{3,}|<)", span.prefix)
        if not at_word_boundary(body, span.start) or not at_word_boundary(body, span.overlap_start):
            assert len(overlap) <= cap  # capped overlap inside a long token
            continue
        k = count_words(overlap)
        before = body[: span.start].split()
        assert k <= params.overlap_words
        if k:
            assert overlap.split() == before[-k:]
            prev_body_words = body[prev.overlap_start : prev.end].split()
            if len(prev_body_words) >= k:  # chunk i starts with the last k words of chunk i-1
                prev_words = chunks[i - 1].text.split()
                prev_words = prev_words[: len(prev_words) - count_words(prev.suffix)]
                assert prev_words[-k:] == overlap.split()
                assert text[len(span.prefix) :].split()[:k] == overlap.split()
        wanted = min(params.overlap_words, len(before))
        if k < wanted:
            nominal = word_starts[len(before) - wanted]
            shrink_reasons = (
                span.start - nominal > cap,  # the char cap
                any(r[0] < span.start and nominal < r[1] for r in atomics),  # started in/at code
                # would start a block (fence, list item, quote...) mid-line
                any(BLOCK_START_WORD.match(w) for w in before[-wanted:]),
            )
            assert any(shrink_reasons), (i, k, wanted)


def check_heading_paths(body: str, chunks: list[Chunk], spans: list[ChunkSpan]) -> None:
    if not body.split():
        return
    for chunk, span in zip(chunks, spans):
        assert chunk.heading_path == expected_heading_path(body, span.start)


@PROPERTY_SETTINGS
@given(body=markdown_bodies(), params=PARAM_SETS)
def test_properties_on_generated_markdown(body: str, params: ChunkingParams) -> None:
    doc = make_doc(body, title="Guide", description="How to do it.", tags=["a", "b"])
    chunks = chunk_document(doc, params)
    normalised, spans = plan_chunks(doc, params)
    assert normalised == body
    check_chunk_fields(doc, chunks, spans)
    check_no_word_lost(body, chunks, spans)
    check_code_blocks_intact(body, chunks, spans)
    check_fences_balanced(chunks)
    check_sizes(body, chunks, spans, params)
    check_overlap(body, chunks, spans, params)
    check_heading_paths(body, chunks, spans)
    assert chunks[0].text.startswith("Guide\nHow to do it.\nTags: a, b")
    # Deterministic: same input, same output (IDs included).
    assert chunk_document(dataclasses.replace(doc), params) == chunks


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=markdown_bodies())
def test_no_frontmatter_context_means_body_only(body: str) -> None:
    chunks = chunk_document(make_doc(body, title=""))
    if not body.strip():
        assert chunks == []
    else:
        assert chunks and chunks[0].text.split()[0] == body.split()[0]
        check_fences_balanced(chunks)


# --------------------------------------------------------------------------- examples


def lorem(n: int, offset: int = 0) -> str:
    """n distinct-ish words, with a sentence end every 12 words."""
    out = []
    for i in range(n):
        word = f"w{i + offset}"
        out.append(word + ("." if i % 12 == 11 else ""))
    return " ".join(out)


def test_hash_lines_in_a_fence_are_not_headings() -> None:
    body = (
        "# Real heading\n\n"
        + lorem(150)
        + "\n\n```bash\n# not a heading\necho hi\n## nor this\n```\n\n"
        + lorem(200, 1000)
    )
    chunks = chunk_document(make_doc(body), ChunkingParams(target_words=120, overlap_words=10, min_words=30))
    assert len(chunks) > 1
    assert all(c.heading_path == ["Real heading"] for c in chunks)
    assert sum("# not a heading" in c.text for c in chunks) >= 1


def test_setext_headings_are_headings() -> None:
    body = (
        "Installation\n============\n\n"
        + lorem(150)
        + "\n\nNetwork configuration\n---------------------\n\n"
        + lorem(150, 500)
    )
    chunks = chunk_document(make_doc(body), ChunkingParams(target_words=200, overlap_words=20, min_words=50))
    assert [c.heading_path for c in chunks] == [["Installation"], ["Installation", "Network configuration"]]
    assert chunks[1].text.split("\n")[0] != "---------------------"


def test_nested_heading_path() -> None:
    body = (
        "Intro "
        + lorem(120)
        + "\n\n# A\n\n"
        + lorem(120, 200)
        + "\n\n## B\n\n"
        + lorem(120, 400)
        + "\n\n### C\n\n"
        + lorem(120, 600)
        + "\n\n## D\n\n"
        + lorem(120, 800)
    )
    chunks = chunk_document(make_doc(body), ChunkingParams(target_words=130, overlap_words=10, min_words=30))
    assert [c.heading_path for c in chunks] == [[], ["A"], ["A", "B"], ["A", "B", "C"], ["A", "D"]]


def test_duplicate_headings_get_distinct_ids() -> None:
    body = "\n\n".join(f"## Usage\n\n{lorem(150, i * 1000)}" for i in range(4))
    chunks = chunk_document(make_doc(body), ChunkingParams(target_words=200, overlap_words=20, min_words=50))
    assert len(chunks) == 4
    assert [c.id for c in chunks] == [f"docs/guide/chunk-{i}" for i in range(4)]
    assert all(c.heading_path == ["Usage"] for c in chunks)


def test_large_code_block_is_its_own_unsplit_chunk() -> None:
    code_lines = [" ".join(f"c{i * 10 + j}" for j in range(10)) for i in range(50)]  # 500 words
    code = "```python title=example\n# comment\n" + "\n".join(code_lines) + "\n```"
    body = lorem(200) + "\n\n" + code + "\n\n" + lorem(200, 5000)
    chunks = chunk_document(make_doc(body))
    normalised, spans = plan_chunks(make_doc(body))
    holders = [i for i, s in enumerate(spans) if code in normalised[s.start : s.end]]
    assert len(holders) == 1
    block_chunk = spans[holders[0]]
    assert normalised[block_chunk.start : block_chunk.end].strip() == code  # nothing else new in it
    assert code in chunks[holders[0]].text
    assert chunks[holders[0]].word_count > 500
    # The next chunk's overlap starts inside the block: it is re-wrapped in the same fence.
    after = chunks[holders[0] + 1].text
    assert after.startswith("```python title=example\n")
    assert fences_balanced(after)
    assert all(fences_balanced(c.text) for c in chunks)


def test_overlap_inside_a_fence_is_rewrapped_and_balanced() -> None:
    code = "~~~~js\n" + "\n".join(" ".join(f"k{i}x{j}" for j in range(8)) for i in range(15)) + "\n~~~~"
    body = "## A\n\n" + lorem(200) + "\n\n" + code + "\n\n## B\n\n" + lorem(300, 900)
    chunks = chunk_document(make_doc(body))
    assert len(chunks) == 2
    assert chunks[1].heading_path == ["B"]
    assert chunks[1].text.startswith("~~~~js\n")
    overlap = chunks[0].text.split()[-50:]
    assert chunks[1].text.split()[1:51] == overlap  # opener line, then the last 50 words
    assert all(fences_balanced(c.text) for c in chunks)


def test_plain_prose_sizes_and_overlap() -> None:
    body = "\n\n".join(lorem(90, i * 100) for i in range(12))  # 1080 words, 12 paragraphs
    chunks = chunk_document(make_doc(body, title=""))
    normalised, spans = plan_chunks(make_doc(body, title=""))
    assert len(chunks) == 3
    for i, (chunk, span) in enumerate(zip(chunks, spans)):
        assert 100 <= count_words(normalised[span.start : span.end]) <= 400
        assert normalised[span.start : span.start + 1] == "w"  # paragraph starts: block boundaries
        if i:
            assert chunk.text.split()[:50] == chunks[i - 1].text.split()[-50:]
            assert chunk.word_count == 50 + count_words(normalised[span.start : span.end])


def test_long_cjk_paragraph_is_bounded() -> None:
    sentence = "中文文本没有空格所以必须按字符切分这是一个很长的句子用于测试"  # 30 chars
    body = "## 中文\n\n" + "。".join([sentence] * 330)  # ~10,000 characters, a single "word"
    chunks = chunk_document(make_doc(body))
    assert len(body) > 10_000
    assert len(chunks) >= 4
    assert all(len(c.text) <= 3000 for c in chunks)
    normalised, spans = plan_chunks(make_doc(body))
    for span in spans[:-1]:
        assert normalised[span.end - 1] == "。"  # cut at sentence punctuation
    assert "".join("".join(normalised[s.start : s.end].split()) for s in spans) == "".join(body.split())


def test_cjk_without_punctuation_is_cut_at_characters() -> None:
    body = "汉" * 10_000
    chunks = chunk_document(make_doc(body, title=""))
    assert all(len(c.text) <= 3000 for c in chunks) and len(chunks) >= 4


def test_short_document_is_one_chunk_with_context() -> None:
    body = lorem(60)
    chunks = chunk_document(make_doc(body, title="Title", description="A short page.", tags=["x", "y"]))
    assert len(chunks) == 1
    assert chunks[0].text == "Title\nA short page.\nTags: x, y\n\n" + body
    assert chunks[0].heading_path == []
    assert (chunks[0].chunk_index, chunks[0].total_chunks) == (0, 1)


def test_context_only_on_first_chunk() -> None:
    chunks = chunk_document(make_doc(lorem(1000), title="Title", tags=["t"]))
    assert chunks[0].text.startswith("Title\nTags: t\n\n")
    assert all("Tags: t" not in c.text for c in chunks[1:])


def test_empty_bodies() -> None:
    assert [c.text for c in chunk_document(make_doc("", title="Only title"))] == ["Only title"]
    assert [c.text for c in chunk_document(make_doc("  \n\n", title="T", tags=["a"]))] == ["T\nTags: a"]
    assert chunk_document(make_doc("", title="")) == []
    assert chunk_document(make_doc(" \n", title="")) == []


def test_unclosed_fence_is_closed_in_the_chunk() -> None:
    body = lorem(30) + "\n\n````sh\necho one\n# two\n"
    (chunk,) = chunk_document(make_doc(body, title=""))
    assert chunk.text.endswith("# two\n````")
    assert fences_balanced(chunk.text)


def test_title_that_reads_as_a_list_item_cannot_unbalance_fences() -> None:
    # "- Intro" opens a list item; the indented fence joins it, its closing line does not.
    body = "  ```\nx\n```\n\n" + lorem(30)
    (chunk,) = chunk_document(make_doc(body, title="- Intro"))
    assert chunk.text.startswith("- Intro\n\n  ```")
    assert fences_balanced(chunk.text)


def test_sections_are_kept_together_when_they_fit() -> None:
    body = "\n\n".join(f"## S{i}\n\n{lorem(150, i * 1000)}" for i in range(6))
    chunks = chunk_document(make_doc(body))
    # Two 150-word sections per chunk (300 <= 400 new words), cut at headings.
    assert [c.heading_path for c in chunks] == [["S0"], ["S2"], ["S4"]]
    normalised, spans = plan_chunks(make_doc(body))
    assert all(normalised[s.start : s.start + 3] == "## " for s in spans)


def test_heading_attributes_and_markup_are_not_in_heading_path() -> None:
    body = "## Use `hugo server` *now* {#run}\n\n" + lorem(20)
    assert chunk_document(make_doc(body))[0].heading_path == ["Use hugo server now"]


def test_params_are_validated() -> None:
    with pytest.raises(ValueError):
        ChunkingParams(target_words=100, min_words=200)


# --------------------------------------------------------------------------- real corpus


def strip_frontmatter(text: str) -> str:
    if text.startswith("---"):
        parts = text.split("---", 2)
        if len(parts) == 3:
            return parts[2].lstrip("\n")
    return text


@pytest.mark.skipif(not HUGO_CONTENT.is_dir(), reason="hugo-docs corpus not available")
def test_hugo_docs_corpus() -> None:
    """Every real Hugo doc chunks without error, with balanced fences (linear time: test_chunking_linear.py)."""
    docs = [
        make_doc(strip_frontmatter(path.read_text(encoding="utf-8")), title=path.stem, tags=["hugo"])
        for path in sorted(HUGO_CONTENT.rglob("*.md"))
    ]
    assert len(docs) > 500
    with deadline(HANG_SECONDS):  # ~0.5 s on an idle machine; only a hang fails here
        results = [chunk_document(doc) for doc in docs]
    for doc, chunks in zip(docs, results):
        assert chunks, doc.body[:100]
        for chunk in chunks:
            assert fences_balanced(chunk.text), chunk.id
        body, spans = plan_chunks(doc)
        assert "".join(body[s.start : s.end] for s in spans).split() == body.split()


def test_word_starts_of_ascii_text_are_the_regular_expression_ones():
    from rag_assets.ingest.blocks import word_starts

    every_ascii = "".join(chr(c) for c in range(128))
    texts = [
        "",
        " ",
        "one",
        "  lead and trail  ",
        every_ascii * 3,
        "a\x1cb\x1dc\x1ed\x1fe\x0bf\x0cg\rh\ti\nj",
        "caf\u00e9 \u00a0x\u2003y",
    ]
    for text in texts:
        assert word_starts(text) == [m.start() for m in re.finditer(r"\S+", text)], repr(text)
