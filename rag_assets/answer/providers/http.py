"""Sending one chat request with the embedders' retry rules, streamed or not.

The rules are :mod:`rag_assets.embed.http`'s (its :class:`RetryPolicy`, ``Retry-After``
reading and jittered backoff), applied to the *start* of an answer:

- 429: wait for ``Retry-After`` (capped), else back off; 5xx, timeouts, dropped connections
  and an unreadable answer: back off and try again, at most ``max_retries`` times;
- 401/403: :class:`ChatAuthError` at once; any other 4xx: :class:`ChatError` at once.

Once a piece of the answer has been passed on, a failure cannot be retried without
repeating it, so it ends the answer with a :class:`ChatError` saying so.

The client: for the Private tier, :class:`~rag_assets.base.egress.PrivateEgress`'s
(approved host only, no proxy, no redirect; the URL checked before the first attempt).
Otherwise the environment's proxy applies to remote hosts only, as for the Ollama probes:
a proxy cannot answer for this machine's loopback.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import httpx

from rag_assets.answer.providers.base import ChatAuthError, ChatError, ChatUsage
from rag_assets.base.egress import PrivateEgress
from rag_assets.base.http_retry import MalformedResponse, RetryPolicy, backoff_seconds, error_text, retry_after_seconds
from rag_assets.config.masking import mask_url
from rag_assets.config.providers import is_loopback_host, url_host

# Reads an open 2xx response into answer pieces, filling in the usage; raises
# MalformedResponse (or ValueError) for an answer it cannot read.
Reader = Callable[[httpx.Response, ChatUsage], Iterator[str]]

# A token is about 4 characters; a server that sends far more than max_tokens asked for
# ignores the limit and might never stop, so the answer is cut off with an error.
MAX_CHARS_PER_TOKEN = 16
# The read timeout only bounds the silence between two reads: a server sending keep-alive
# comments or empty pieces forever would never time out. An answer gets this many read
# timeouts in all (600 s by default), however it trickles.
ANSWER_TIMEOUTS = 10


class _Deadline(httpx.SyncByteStream):
    """A response stream that times out at ``deadline`` (time.monotonic) whatever it receives."""

    def __init__(self, inner: httpx.SyncByteStream, deadline: float, seconds: float) -> None:
        self.inner, self.deadline, self.seconds = inner, deadline, seconds

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            if time.monotonic() > self.deadline:
                raise httpx.ReadTimeout(f"the answer took over {self.seconds:g}s in all")
            yield chunk

    def close(self) -> None:
        self.inner.close()


def chat_client(
    base_url: str, policy: RetryPolicy, headers: dict[str, str], egress: PrivateEgress | None
) -> httpx.Client:
    """The HTTP client for a chat endpoint (see the module docstring for the rules)."""
    if egress is not None:
        return egress.client(timeout=policy.timeout, headers=headers)
    return httpx.Client(timeout=policy.timeout, headers=headers, trust_env=not is_loopback_host(url_host(base_url)))


@dataclass
class ChatHttp:
    """POSTs chat requests for one provider; one instance serves concurrent answers."""

    label: str  # for messages: "ollama (http://localhost:11434)"
    base_url: str
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    headers: dict[str, str] = field(default_factory=dict)
    egress: PrivateEgress | None = None
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.client = chat_client(self.base_url, self.policy, self.headers, self.egress)

    def close(self) -> None:
        self.client.close()

    def stream(
        self, url: str, payload: dict[str, Any], read: Reader, usage: ChatUsage, max_tokens: int
    ) -> Iterator[str]:
        """The answer's pieces as ``read`` finds them, with the retries of the module docstring;
        ChatError once they pass ``max_tokens`` by far (MAX_CHARS_PER_TOKEN characters a token)."""
        max_chars = max_tokens * MAX_CHARS_PER_TOKEN
        if self.egress is not None:
            self.egress.check_url(url)  # refuse before the first attempt, not inside the retries
        problem, wait = "no attempt made", None
        for attempt in range(self.policy.max_retries + 1):
            if attempt:
                usage.retries += 1
                self.sleep(wait if wait is not None else backoff_seconds(self.policy, attempt - 1, self.rng))
            usage.requests += 1
            wait = None
            try:
                response = self.client.send(self.client.build_request("POST", url, json=payload), stream=True)
            except httpx.TimeoutException:
                problem = f"timed out after {self.policy.timeout:g}s"
                continue
            except httpx.TransportError as exc:
                problem = f"connection error ({type(exc).__name__}: {exc})"
                continue
            try:
                status = response.status_code
                if status >= 400:
                    response.read()
                    problem, wait = self._failed_status(response)
                    continue
                seconds = self.policy.timeout * ANSWER_TIMEOUTS
                # a Client's (not an AsyncClient's) response: its stream is a SyncByteStream
                response.stream = _Deadline(
                    cast(httpx.SyncByteStream, response.stream), time.monotonic() + seconds, seconds
                )
                passed_on = False
                chars = 0
                try:
                    for piece in read(response, usage):
                        chars += len(piece)
                        if chars > max_chars:
                            raise ChatError(
                                f"{self.label} sent more than {max_chars} characters, far over the {max_tokens} tokens "
                                "asked for (llm.max_answer_tokens); the answer was cut off"
                            )
                        passed_on = True
                        yield piece
                    return
                except (httpx.TransportError, MalformedResponse, ValueError, KeyError, TypeError) as exc:
                    problem = _reading_problem(exc, self.policy.timeout)
                    if passed_on:
                        raise ChatError(f"{self.label} stopped in the middle of the answer: {problem}") from None
            finally:
                response.close()
        raise ChatError(f"{self.label} failed after {self.policy.max_retries} retries: {problem}")

    def _failed_status(self, response: httpx.Response) -> tuple[str, float | None]:
        """(problem, wait) for a retryable status; raises for one retrying cannot fix."""
        status = response.status_code
        if status in (401, 403):
            raise ChatAuthError(
                f"{self.label} refused the request with HTTP {status} ({error_text(response)}); check the API key "
                "(llm.openai.api_key_env names its variable; OPENROUTER_API_KEY by default)"
            )
        if status == 429:
            return "rate limited (HTTP 429)", retry_after_seconds(
                response.headers.get("retry-after"), self.policy.retry_after_cap
            )
        if status >= 500:
            return f"HTTP {status} ({error_text(response)})", None
        raise ChatError(f"{self.label}: HTTP {status} ({error_text(response)})")


def _reading_problem(exc: Exception, timeout: float) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return str(exc) if "in all" in str(exc) else f"no data for {timeout:g}s"
    if isinstance(exc, httpx.TransportError):
        return f"connection error ({type(exc).__name__}: {exc})"
    return f"malformed response: {exc}"


def provider_label(provider: str, base_url: str) -> str:
    return f"{provider} ({mask_url(base_url)})"
