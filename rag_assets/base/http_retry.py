"""The HTTP retry policy every remote provider shares (embedders, chat models, rerankers).

A :class:`RetryPolicy` says how often and how long to retry; :func:`retry_after_seconds` reads
a 429's ``Retry-After``, :func:`backoff_seconds` is exponential backoff with full jitter;
:func:`decode_json` and :func:`error_text` read an answer and a failed one. The rules each
provider applies with them are in its module (for embedders, :mod:`rag_assets.embed.http`).
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class RetryPolicy:
    """How often to retry a request and how long to wait: backoff, the ``Retry-After`` cap, the timeout."""

    max_retries: int = 3
    base_backoff: float = 0.5
    max_backoff: float = 8.0
    retry_after_cap: float = 60.0
    timeout: float = 30.0


class MalformedResponse(Exception):
    """The answer parsed but does not fit the request (count, dimension, values)."""


def retry_after_seconds(value: str | None, cap: float, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds to wait (delta-seconds or HTTP date), capped; None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = parsed.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), cap)


def backoff_seconds(policy: RetryPolicy, attempt: int, rng: random.Random) -> float:
    """Exponential backoff with full jitter before retry ``attempt + 1``: ``uniform(0, base * 2**attempt)``, capped."""
    return min(policy.max_backoff, rng.uniform(0, policy.base_backoff * 2**attempt))


def decode_json(body: bytes) -> Any:
    """orjson for speed (decoding dominates client time for 1536-d vectors); the stdlib as a
    fallback, since it accepts the bare NaN some servers emit, so validation can name it."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return json.loads(body)


def error_text(response: httpx.Response) -> str:
    """The provider's error message from a failed answer (JSON ``error.message`` or the body), cut short."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason_phrase
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message", error))[:200]
        return str(error)[:200]
    return str(body)[:200]


def batched(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
