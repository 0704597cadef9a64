"""The interface every chat provider offers, its usage record and its errors.

A provider streams an answer as text pieces::

    usage = ChatUsage()
    for piece in provider.stream(messages, usage):
        print(piece, end="")
    usage.completion_tokens  # filled in as the provider reports it

``streamed=False`` asks the server for one whole answer instead (yielded as a single
piece), for servers or callers that do not want server-sent events. The usage record is
the caller's, so one provider (and its HTTP connection pool) serves concurrent requests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": "..."}


class ChatError(RuntimeError):
    """The chat model failed to answer (after the retries); the message says why."""


class ChatAuthError(ChatError):
    """The provider refused the key (HTTP 401/403): retrying cannot help."""


class ChatUnavailable(ChatError):
    """No chat model is configured or reachable; the message says what was tried."""


@dataclass
class ChatUsage:
    """Tokens the provider reported for one answer (None: it reported none)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    requests: int = 0
    retries: int = 0

    def to_json(self) -> dict[str, Any]:
        total = None
        if self.prompt_tokens is not None or self.completion_tokens is not None:
            total = (self.prompt_tokens or 0) + (self.completion_tokens or 0)
        return {
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "totalTokens": total,
            "requests": self.requests,
            "retries": self.retries,
        }


class ChatProvider(Protocol):
    """What :mod:`rag_assets.answer.ask` needs from a chat model."""

    provider: str  # "openai" or "ollama"
    model: str

    @property
    def endpoint(self) -> str: ...

    @property
    def local(self) -> bool:
        """True when every request goes through the Private tier's egress client."""
        ...

    def stream(
        self, messages: list[Message], usage: ChatUsage, *, streamed: bool = True, max_tokens: int | None = None
    ) -> Iterator[str]: ...

    def close(self) -> None: ...


def complete(
    provider: ChatProvider, messages: list[Message], *, max_tokens: int | None = None
) -> tuple[str, ChatUsage]:
    """One whole answer, not streamed (the follow-up rewrite uses it)."""
    usage = ChatUsage()
    text = "".join(provider.stream(messages, usage, streamed=False, max_tokens=max_tokens))
    return text, usage
