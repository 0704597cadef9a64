"""Limits for the public: per-client rate limits, a cap on answers generated at once, and a daily
allowance of chat-model tokens for anonymous questions (``serve:`` in rag.yaml).

- :class:`RateLimiter`: a token bucket per client (its address when anonymous, an IPv6 one's
  /64; its token's name when it has one): ``burst`` requests at once, refilled at ``per_second``. :class:`RateLimits`
  applies the ``search_limit`` bucket to ``/search``, ``/context``, ``/embed`` and ``/mcp``
  and the ``ask_limit`` bucket to ``POST /ask`` (the MCP ``ask`` tool takes from the same one);
  over it, a 429 with ``Retry-After`` in whole seconds (at least 1).
- :class:`AskSlots`: at most ``max_concurrent_asks`` answers in flight, all clients together;
  one more is a 429 with ``Retry-After``.
- :class:`DailyBudget`: the chat-model tokens anonymous questions spent today (UTC), from the
  provider's reported usage or an estimate, kept in a small JSON file so a restart does not
  reset it. Past ``anonymous_chat_tokens_per_day``, an anonymous ``/ask`` gets the sources only,
  with the reason.

Callers with scope ``admin`` (a loopback client of a loopback-bound server has it) are exempt
from all three.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.responses import JSONResponse

from rag_assets.answer.ask import Event, Prepared
from rag_assets.config.serving import RateLimit, ServeSettings
from rag_assets.serve.access import AUTHENTICATED, scopes_of

log = logging.getLogger("rag_assets.serve.limits")

MAX_CLIENTS = 100_000  # buckets kept; past it the full ones (idle clients) are dropped
CHARS_PER_TOKEN = 4  # the estimate when a provider reports no usage
PROMPT_OVERHEAD_TOKENS = 200  # the grounding instructions around the sources
SEARCH_PATHS = ("/search", "/context", "/embed", "/mcp")
ASK_PATHS = ("/ask",)
EXEMPT_SCOPE = "admin"


def retry_after(seconds: float) -> int:
    """``Retry-After`` in whole seconds, at least 1 (0 would invite an immediate retry)."""
    return max(1, math.ceil(seconds))


def too_many(message: str, wait: float) -> JSONResponse:
    seconds = retry_after(wait)
    return JSONResponse(
        {"error": f"{message}; retry after {seconds} s", "retryAfter": seconds},
        status_code=429,
        headers={"Retry-After": str(seconds)},
    )


def client_key(scope: Any) -> str:
    """Whose bucket a request takes from: the token's name, else the client's address (:func:`address_key`)."""
    user = scope.get("user") if isinstance(scope, dict) else getattr(scope, "user", None)
    name = getattr(user, "display_name", "")
    if name and getattr(user, "is_authenticated", False):
        return f"token:{name}"
    client = scope.get("client") if isinstance(scope, dict) else None
    return address_key(client[0] if client else None)


def address_key(host: str | None) -> str:
    """An anonymous client's key: its IPv4 address, or its IPv6 address's /64. One subscriber is
    given a whole /64 and may use any address in it, so keyed by address it would get a fresh
    bucket per request."""
    try:
        ip = ipaddress.ip_address(host or "")
    except ValueError:
        return f"addr:{host or 'unknown'}"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # ::ffff:a.b.c.d, an IPv4 client of a dual-stack socket
            return f"addr:{ip.ipv4_mapped}"
        return f"addr:{ipaddress.IPv6Network((ip, 64), strict=False)}"
    return f"addr:{ip}"


def exempt(who: Any) -> bool:
    return EXEMPT_SCOPE in scopes_of(who)


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """Token buckets keyed by client; :meth:`take` answers 0 (served) or the seconds to wait."""

    def __init__(self, limit: RateLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) >= MAX_CLIENTS:
                    self._forget_idle(now)
                bucket = self._buckets[key] = _Bucket(float(self.limit.burst), now)
            bucket.tokens = min(float(self.limit.burst), bucket.tokens + (now - bucket.updated) * self.limit.per_second)
            bucket.updated = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.limit.per_second

    def _forget_idle(self, now: float) -> None:
        full = [
            k
            for k, b in self._buckets.items()
            if b.tokens + (now - b.updated) * self.limit.per_second >= self.limit.burst
        ]
        for key in full or list(self._buckets)[: len(self._buckets) // 2]:
            del self._buckets[key]


class AskSlots:
    """At most ``size`` answers generated at once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._used = 0
        self._lock = threading.Lock()

    def acquire(self) -> Slot | None:
        with self._lock:
            if self._used >= self.size:
                return None
            self._used += 1
        return Slot(self)

    def _release(self) -> None:
        with self._lock:
            self._used -= 1


class Slot:
    """One answer's place; :meth:`release` may be called more than once (stream end and clean-up)."""

    def __init__(self, slots: AskSlots) -> None:
        self._slots = slots
        self._released = False
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._slots._release()


class DailyBudget:
    """Chat-model tokens spent today on anonymous questions, persisted in ``path`` (JSON)."""

    def __init__(self, path: Path, per_day: int, today: Callable[[], str] | None = None) -> None:
        self.path = path
        self.per_day = per_day
        self.today = today or (lambda: datetime.now(UTC).date().isoformat())
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and isinstance(data.get("tokens"), int):
                return data
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.warning(
                "cannot read %s (%s); counting today's anonymous chat tokens from 0", self.path, type(exc).__name__
            )
        return {"day": self.today(), "tokens": 0}

    def spent(self) -> int:
        data = self._read()
        return data["tokens"] if data.get("day") == self.today() else 0

    def exhausted(self) -> bool:
        return self.spent() >= self.per_day

    def add(self, tokens: int) -> None:
        if tokens <= 0:
            return
        with self._lock:
            total = self.spent() + tokens
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".chat-usage-", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"day": self.today(), "tokens": total}, out)
            os.replace(tmp, self.path)

    def reason(self) -> str:
        return (
            f"today's allowance of chat-model tokens for anonymous questions ({self.per_day:,}) is spent; it "
            "renews at 00:00 UTC (a signed-in token is not counted against it)"
        )


def tokens_spent(event: Event, prepared: Prepared, answer_chars: int) -> int:
    """Chat-model tokens one finished answer cost: the provider's count, else an estimate; 0 when no model ran."""
    if event.kind == "done":
        if event.data.get("model") is None:
            return 0
        total = (event.data.get("usage") or {}).get("totalTokens")
        if total:
            return int(total)
    elif event.data.get("status") != 502:  # 503 (no model) or 403 (refused before sending): nothing spent
        return 0
    return estimated_tokens(prepared, answer_chars)


def estimated_tokens(prepared: Prepared, answer_chars: int) -> int:
    """What an answer cost when the provider did not say: the sources, the prompt, the words so far."""
    prompt_chars = len(prepared.request.question) + len(prepared.rewrite.query)
    return prepared.context_tokens + PROMPT_OVERHEAD_TOKENS + (prompt_chars + answer_chars) // CHARS_PER_TOKEN


def counted(events: Iterator[Event], prepared: Prepared, budget: DailyBudget | None) -> Iterator[Event]:
    """``events`` unchanged; when they end, what the answer cost is added to ``budget`` (if any).

    A client that leaves mid-stream closes this generator at a ``yield``: past the ``sources``
    event the model was asked (the provider bills the prompt), so the estimate is counted then;
    otherwise reading the first words and hanging up would make every answer free."""
    answer_chars = 0
    asked = finished = False
    try:
        for event in events:
            if event.kind == "token":
                answer_chars += len(event.data.get("text", ""))
            elif event.kind in ("done", "error"):
                finished = True
                if budget is not None:
                    budget.add(tokens_spent(event, prepared, answer_chars))
            asked = asked or event.kind != "sources"
            yield event
    finally:
        if isinstance(events, Generator):
            events.close()  # the model's stream too: its connection closed, the provider stops writing
        if budget is not None and asked and not finished and prepared.selection.provider is not None:
            budget.add(estimated_tokens(prepared, answer_chars))


class Limits:
    """The server's limits, shared by the HTTP routes and the MCP tools."""

    def __init__(self, settings: ServeSettings, usage_path: Path) -> None:
        self.search = RateLimiter(settings.search_limit)
        self.ask = RateLimiter(settings.ask_limit)
        self.slots = AskSlots(settings.max_concurrent_asks)
        self.budget = DailyBudget(usage_path, settings.anonymous_chat_tokens_per_day)

    def anonymous_budget(self, who: Any) -> DailyBudget | None:
        """The budget a caller's answers count against: anonymous ones only."""
        return None if AUTHENTICATED in scopes_of(who) else self.budget


class RateLimits:
    """ASGI middleware (inside the authentication middleware): the per-client buckets by path."""

    def __init__(self, app: Any, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] != "OPTIONS" and not exempt(scope):
            path = scope["path"]
            limiter = self.limits.ask if path in ASK_PATHS else self.limits.search if path in SEARCH_PATHS else None
            wait = limiter.take(client_key(scope)) if limiter is not None else 0.0
            if wait > 0:
                await too_many(f"too many requests to {path} from this client", wait)(scope, receive, send)
                return
        await self.app(scope, receive, send)
