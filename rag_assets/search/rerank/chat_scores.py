"""Reading relevance scores out of a chat model's answer, however it chose to write them.

Asked for ``{"scores": [7, 0, 10]}``, small local models answer that, or the same in a
```json fence, or after some prose or a ``<think>`` block, or as numbered lines
(``[1] 7``, ``Passage 2: 0``), or ``yes``/``no``. :func:`parse_scores` accepts each of
those, in that order of trust, and returns one score in [0, 1] per passage (0-10 divided by
ten, clamped; yes = 1, no = 0). An answer it cannot read as exactly one score per passage is
:class:`~rag_assets.embed.http.MalformedResponse`, which the sender retries.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from rag_assets.base.http_retry import MalformedResponse

SCALE = 10.0
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_NUMBERED = re.compile(
    r"^\W*(?:passage|document|doc)?\s*#?\[?(\d+)\]?\s*[:=)\].-]+\s*\**\s*(\d+(?:\.\d+)?|yes|no|true|false)\b",
    re.IGNORECASE | re.MULTILINE,
)
_BARE = re.compile(r"^[\s\d.,;/\[\]]+$")
_WORDS = {"yes": SCALE, "true": SCALE, "relevant": SCALE, "no": 0.0, "false": 0.0, "irrelevant": 0.0}


def parse_scores(text: str, expected: int) -> list[float]:
    """One score in [0, 1] per passage from the model's answer; MalformedResponse otherwise."""
    text = _THINK.sub("", text or "").strip()
    for found in (
        _from_json(text),
        _from_numbered_lines(text, expected),
        _from_bare_numbers(text),
        _from_word(text, expected),
    ):
        if found is not None and len(found) == expected:
            return [min(max(v, 0.0), SCALE) / SCALE for v in found]
    raise MalformedResponse(f"could not read {expected} relevance score(s) from the answer {text[:120]!r}")


def _value(item: Any) -> float | None:
    """A score from a number, a numeric string, yes/no, or an object holding one."""
    if isinstance(item, dict):
        for key in ("score", "relevance", "relevance_score", "rating"):
            if key in item:
                return _value(item[key])
        return None
    if isinstance(item, bool):
        return SCALE if item else 0.0
    if isinstance(item, (int, float)):
        return float(item) if math.isfinite(item) else None
    if isinstance(item, str):
        word = item.strip().lower()
        if word in _WORDS:
            return _WORDS[word]
        try:
            number = float(word)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _values(items: list[Any]) -> list[float] | None:
    values = [_value(item) for item in items]
    numbers = [v for v in values if v is not None]
    return numbers if len(numbers) == len(values) else None


def _json_candidates(text: str) -> Iterator[Any]:
    """The answer, its fenced blocks, and its outermost {...} / [...] spans, decoded."""
    spans = [text, *_FENCE.findall(text)]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = text.find(opener), text.rfind(closer)
        if 0 <= start < end:
            spans.append(text[start : end + 1])
    for span in spans:
        try:
            yield json.loads(span)
        except ValueError:
            continue


def _from_json(text: str) -> list[float] | None:
    for decoded in _json_candidates(text):
        found = _from_decoded(decoded)
        if found is not None:
            return found
    return None


def _from_decoded(decoded: Any) -> list[float] | None:
    if isinstance(decoded, list):
        return _values(decoded)
    if not isinstance(decoded, dict):
        value = _value(decoded)
        return None if value is None else [value]
    for key in ("scores", "relevance", "ratings", "results"):
        if isinstance(decoded.get(key), list):
            return _values(decoded[key])
    numbered = {int(k): v for k, v in decoded.items() if str(k).strip().isdigit()}
    if numbered and sorted(numbered) == list(range(1, len(numbered) + 1)):
        return _values([numbered[i] for i in sorted(numbered)])
    single = _value(decoded)
    return None if single is None else [single]


def _from_numbered_lines(text: str, expected: int) -> list[float] | None:
    by_number: dict[int, float] = {}
    for number, raw in _NUMBERED.findall(text):
        value = _value(raw)
        if value is not None and 1 <= int(number) <= expected:
            by_number.setdefault(int(number), value)
    if sorted(by_number) != list(range(1, expected + 1)):
        return None
    return [by_number[i] for i in range(1, expected + 1)]


def _from_bare_numbers(text: str) -> list[float] | None:
    if not _BARE.match(text):
        return None
    return _values(re.findall(r"\d+(?:\.\d+)?", text)) or None


def _from_word(text: str, expected: int) -> list[float] | None:
    """A lone yes / no (or a number) answering a single passage."""
    if expected != 1:
        return None
    match = re.match(r"\W*(\w+(?:\.\d+)?)", text)
    value = _value(match.group(1)) if match else None
    return None if value is None else [value]
