"""Pack search hits into a prompt-ready context that fits a token budget, with citations.

::

    result = index.search(query, embedder, SearchParams(k=20))
    packed = pack_context(result.hits, budget=1500)
    prompt = f"{instructions}\\n\\n{packed.text}\\n\\nQuestion: {query}"
    packed.to_json()  # {"text", "citations", "tokens", "budget", "tokenizer", "dropped"}

Selection
---------
Hits are taken greedily in relevance order, as searches rank them (reranked hits first, in the
reranker's order; ties keep their input order); a hit is added
when the context *as it would be emitted with it* (citation tags, separators, merged
passages) still counts at most ``budget`` tokens, and skipped otherwise, after which
the next, smaller hits are still tried. ``tokens`` is the count of the final ``text``
with the same counter, so ``tokens <= budget`` always holds. Each passage is counted
once and remembered; a try costs the sum of its passages' counts, exact for counters
whose tokens never span whitespace (``additive = True``: WordPiece, the estimate) and
confirmed by counting the whole candidate context for any other counter. Packing 50
hits into 1500 tokens takes ~35 ms with WordPiece (1000 hits into 100k: ~1.2 s).

Passages
--------
Selected chunks of one document with consecutive ``chunk_index`` values (i, i+1, ...)
become one passage: the next chunk starts with the tail of the previous one (the
chunker's overlap), so that tail is found and dropped. It is found, not assumed to be
50 words: the longest run of words ending the first text that also starts the second
(compared word by word, so whitespace differences do not matter; the first of those
words may be the end of a longer token, as in a CJK overlap cut inside a run without
spaces). A re-wrap line the chunker puts before an overlap that starts inside a code
fence, and a closing fence it appends to balance a chunk, are recognised too. For
chunks of one real document the merged passage is exactly the body region they cover.
Chunks with no overlap found (overlap disabled) are joined with a blank line.

Non-consecutive chunks of one document stay separate passages, placed next to each
other in document order. A passage's score is the best score of its chunks; documents
are emitted in order of their best passage, so with one passage per document the
passages are simply in score order.

Each passage starts with a citation tag on its own line::

    [posts:homelab-proxmox-setup#network-configuration]
    <passage text>

The anchor is the GitHub/Hugo-style slug of the deepest heading of the passage's first
chunk (:func:`heading_anchor`); without a heading the tag is ``[posts:homelab-proxmox-setup]``.
A vault note (the Safe and Private tiers: ``pack_context(..., notes=True)``) is cited as
Obsidian links it, ``[[Projects/Proxmox setup#Network]]`` (the note's path in its vault and
the heading's own text). Duplicate headings in one page (GitHub/Hugo suffix them ``-1``, ``-2``) and custom
``{#id}`` anchors cannot be known from a chunk and are not reproduced. Passages are
separated by one blank line.

Token counting is :mod:`rag_assets.search.tokens`'s.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_assets.index.params import Hit
from rag_assets.search.passages import (
    PASSAGE_SEPARATOR,
    citation_tag,
    join_consecutive_chunks,
    note_citation,
)
from rag_assets.search.tokens import TokenCounter, default_token_counter

TAG_SEPARATOR = "\n"
"""Between a citation tag and its passage text."""


# --------------------------------------------------------------------------- packing


@dataclass
class PackedContext:
    """A context ready to paste into a prompt, and where each passage came from."""

    text: str
    citations: list[dict[str, Any]]
    tokens: int
    budget: int
    tokenizer: str
    dropped: list[str] = field(default_factory=list)
    # Set when hits were given but not even the best passage fits: the tokens it needs.
    needed_budget: int | None = None
    best_tag: str = ""  # that passage's citation tag

    @property
    def message(self) -> str | None:
        """Why the context is empty although hits were found, and the budget that would do; None otherwise."""
        if self.needed_budget is None:
            return None
        return (
            f"The budget of {self.budget} tokens is smaller than the best passage ({self.best_tag}), which needs "
            f"{self.needed_budget} tokens by {self.tokenizer}: give a budget of at least {self.needed_budget}."
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "text": self.text,
            "citations": [dict(c) for c in self.citations],
            "tokens": self.tokens,
            "budget": self.budget,
            "tokenizer": self.tokenizer,
            "dropped": list(self.dropped),
        }
        if self.needed_budget is not None:  # only then: a packed context keeps its six keys
            out["neededBudget"] = self.needed_budget
            out["message"] = self.message
        return out


_CHUNK_ID = re.compile(r"/chunk-(\d+)$")


def _document_key(hit: Hit) -> str:
    return hit.document_id or f"{hit.collection}/{hit.slug}"


def _chunk_index(hit: Hit) -> int:
    """``hit.chunk_index``; hits built without it (0) fall back to the ``chunk-<i>`` of the id."""
    if hit.chunk_index == 0:
        match = _CHUNK_ID.search(hit.id)
        if match:
            return int(match.group(1))
    return hit.chunk_index


@dataclass
class _Passage:
    hits: list[Hit]  # document order
    text: str
    score: float
    tag: str

    def citation(self) -> dict[str, Any]:
        first = self.hits[0]
        return {
            "tag": self.tag,
            "id": first.id,
            "ids": [h.id for h in self.hits],
            "collection": first.collection,
            "slug": first.slug,
            "title": first.title,
            "headingPath": list(first.heading_path),
            "score": round(self.score, 6),
        }

    def render(self) -> str:
        return f"{self.tag}{TAG_SEPARATOR}{self.text}" if self.text else self.tag


class _Packer:
    """Renders a set of selected hits; remembers merged texts across tries. ``notes``: the hits
    are vault notes, cited as Obsidian links (:func:`note_citation`)."""

    def __init__(self, notes: bool = False) -> None:
        self._joined: dict[tuple[str, str], str] = {}
        self.notes = notes

    def passages(self, selected: Sequence[Hit]) -> list[_Passage]:
        by_doc: dict[str, list[Hit]] = {}
        for hit in selected:  # score order: dict order = documents by best score
            by_doc.setdefault(_document_key(hit), []).append(hit)
        passages: list[_Passage] = []
        for hits in by_doc.values():
            hits = sorted(hits, key=_chunk_index)
            run: list[Hit] = [hits[0]]
            for hit in hits[1:]:
                if _chunk_index(hit) == _chunk_index(run[-1]) + 1:
                    run.append(hit)
                else:
                    passages.append(self._passage(run))
                    run = [hit]
            passages.append(self._passage(run))
        return passages

    def _passage(self, run: list[Hit]) -> _Passage:
        text = _trim(run[0].text)
        key = run[0].id
        for hit in run[1:]:
            step = (key, hit.id)
            if step not in self._joined:
                self._joined[step] = join_consecutive_chunks(text, _trim(hit.text))
            text = self._joined[step]
            key = f"{key}+{hit.id}"
        first = run[0]
        return _Passage(
            hits=list(run),
            text=text,
            score=max(h.score for h in run),
            tag=(
                note_citation(first.slug, first.heading_path)
                if self.notes
                else citation_tag(first.collection, first.slug, first.heading_path)
            ),
        )


_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")


def _trim(text: str) -> str:
    """Blank lines around a text dropped; a first line's indentation is Markdown, so it stays."""
    return _LEADING_BLANK_LINES.sub("", text).rstrip()


def _render(passages: Sequence[_Passage]) -> str:
    return PASSAGE_SEPARATOR.join(p.render() for p in passages)


def _order(hit: Hit) -> tuple[int, float, float]:
    """Reranked hits first, by the reranker's score (rag_assets.search.rerank); then by
    relevance, the order a search ranks and shows (the fused score breaks ties)."""
    return (0, -hit.rerank_score, 0.0) if hit.rerank_score is not None else (1, -hit.relevance, -hit.score)


def pack_context(
    hits: Sequence[Hit], budget: int, *, tokenizer: TokenCounter | None = None, notes: bool = False
) -> PackedContext:
    """The best-scoring hits that fit in ``budget`` tokens, merged into cited passages.

    See the module docstring for the selection, merging and tag rules. ``tokenizer``
    defaults to :func:`default_token_counter`. Duplicate hit ids count once (the first,
    best-scored one). A budget too small for any passage gives an empty text with every
    hit in ``dropped``, and ``needed_budget`` (with ``message``): what the best passage needs;
    ``budget <= 0`` raises ValueError. ``notes``: the hits are vault notes (the Safe and Private
    tiers, :func:`~rag_assets.search.passages.cites_notes`), tagged ``[[Note#Heading]]``.
    """
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise TypeError(f"budget must be an integer number of tokens, not {type(budget).__name__}")
    if budget <= 0:
        raise ValueError(f"budget must be a positive number of tokens, got {budget}")
    counter = tokenizer if tokenizer is not None else default_token_counter()
    ordered: list[Hit] = []
    seen: set[str] = set()
    for hit in sorted(hits, key=_order):  # stable: ties keep input order
        if hit.id not in seen:
            seen.add(hit.id)
            ordered.append(hit)
    additive = bool(getattr(counter, "additive", False))
    passages, dropped = _select(ordered, budget, counter, additive, notes)
    text = _render(passages)
    tokens = counter.count(text)
    if tokens > budget and additive:  # a counter wrongly declared additive: count everything exactly
        passages, dropped = _select(ordered, budget, counter, False, notes)
        text = _render(passages)
        tokens = counter.count(text)
    packed = PackedContext(
        text=text,
        citations=[p.citation() for p in passages],
        tokens=tokens,
        budget=budget,
        tokenizer=counter.name,
        dropped=dropped,
    )
    if not passages and ordered:  # an empty context must say what budget the best passage needs
        best = _Packer(notes).passages(ordered[:1])[0]
        packed.needed_budget, packed.best_tag = counter.count(best.render()), best.tag
    return packed


def _select(
    ordered: Sequence[Hit], budget: int, counter: TokenCounter, additive: bool, notes: bool = False
) -> tuple[list[_Passage], list[str]]:
    """The greedy pass: passages of the hits kept, ids of the hits dropped.

    A try is first priced as the sum of its passages' counts (each passage counted once
    and remembered) plus the separators'. For an *additive* counter (one whose tokens
    never span whitespace, so a text's count is the sum of its blank-line-separated
    parts: WordPiece with BERT pre-tokenization, the estimate) that sum is exact. For
    any other counter a try the sum puts within ``budget`` plus one token per passage
    boundary is counted again as a whole, exactly, so ``tokens <= budget`` holds
    whatever the counter.
    """
    packer = _Packer(notes)
    counts: dict[str, int] = {}
    separator = counter.count(PASSAGE_SEPARATOR)

    def price(passage: _Passage) -> int:
        rendered = passage.render()
        if rendered not in counts:
            counts[rendered] = counter.count(rendered)
        return counts[rendered]

    selected: list[Hit] = []
    dropped: list[str] = []
    passages: list[_Passage] = []
    tokens = 0
    for pos, hit in enumerate(ordered):
        if tokens >= budget:  # full: nothing else can fit
            dropped.extend(h.id for h in ordered[pos:])
            break
        trial = packer.passages(selected + [hit])
        approx = sum(price(p) for p in trial) + separator * (len(trial) - 1)
        if additive:
            cost = approx
        elif approx > budget + len(trial) - 1:
            cost = approx  # far enough over that boundary effects cannot bring it back
        else:
            cost = counter.count(_render(trial))
        if cost <= budget:
            selected.append(hit)
            passages, tokens = trial, cost
        else:
            dropped.append(hit.id)
    return passages, dropped
