"""What every MCP tool is built from: the tool record, who calls, what a tool works with,
and the tier gate (the caller's scopes, and the Private tier only where the server serves it).

Both the search tools (``mcp_tools``) and ``ask`` (``mcp_ask``) are built on these, so neither
module needs the other to describe a tool.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

from rag_assets.config import TIERS, RagConfig
from rag_assets.config.providers import is_loopback_host
from rag_assets.search.retrieval import SearchIndex
from rag_assets.serve.access import ANONYMOUS_SCOPES, LOOPBACK_SCOPES, TierDenied
from rag_assets.serve.limits import Limits
from rag_assets.serve.tiers import Tiers


class ToolError(Exception):
    """A call the tool cannot serve as made; the message tells the model what to do instead."""


@dataclass(frozen=True)
class Caller:
    """Who is calling: ``stdio`` (a process the user launched) or ``http`` from ``client_host``;
    ``scopes``: what the HTTP request's authentication granted (None: decided from the rest)."""

    transport: str
    client_host: str | None = None
    scopes: tuple[str, ...] | None = None
    user: str = ""  # the token's name, for its rate-limit bucket ("" anonymous)


@dataclass
class ToolEnv:
    """What the tools work with: the configuration and the per-tier index/embedder cache."""

    cfg: RagConfig
    tiers: Tiers
    limits: Limits | None = None  # rag serve's limits (rag_assets.serve.limits); none over stdio


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[ToolEnv, Caller, dict[str, Any]], dict[str, Any]]  # blocking: run it in a thread
    read_only: bool = True
    validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Draft202012Validator.check_schema(self.input_schema)
        object.__setattr__(self, "validator", Draft202012Validator(self.input_schema))


# --------------------------------------------------------------------------- tiers


def caller_scopes(caller: Caller, serve_private: bool) -> tuple[str, ...]:
    """Over stdio every scope (the user launched the process); over HTTP what the request's
    authentication granted, or for a caller made by hand, every scope for a loopback address
    when the server serves the Private tier, else public; an unknown transport: public."""
    if caller.transport == "stdio":
        return LOOPBACK_SCOPES
    if caller.transport != "http":
        return ANONYMOUS_SCOPES
    if caller.scopes is not None:
        return caller.scopes
    loopback = bool(caller.client_host) and is_loopback_host(caller.client_host or "")
    return LOOPBACK_SCOPES if loopback and serve_private else ANONYMOUS_SCOPES


def private_allowed(caller: Caller, serve_private: bool) -> bool:
    """May this caller read the Private tier? Over stdio yes; over HTTP when the server serves it
    (``serve_private``) and the caller's scopes include private."""
    return caller.transport == "stdio" or (serve_private and "private" in caller_scopes(caller, serve_private))


def tier_index(env: ToolEnv, caller: Caller, tier: str) -> SearchIndex:
    """The tier's search index, once the caller is allowed to read it (ToolError otherwise)."""
    if tier not in TIERS:
        raise ToolError(f"unknown tier {tier!r}; use one of {', '.join(TIERS)} (public is the default)")
    serve_private = env.tiers.serve_private or caller.transport == "stdio"
    if tier == "private" and not private_allowed(caller, serve_private):
        raise ToolError(
            "the private tier is only served to this machine: over stdio (`rag mcp`) or over HTTP from a "
            "loopback address to a server bound to 127.0.0.1 (or with a token with scope private, to a server "
            "started with --allow-private-remote); search tier public or safe instead"
        )
    try:
        return env.tiers.index(tier, list(caller_scopes(caller, serve_private)))
    except TierDenied as exc:
        raise ToolError(f"{exc} (for MCP, the Authorization header of the client's HTTP requests)") from None
