"""What every MCP tool is built from: the tool record, who calls, what a tool works with,
and the tier gate (the Private tier only to this machine).

Both the search tools (``mcp_tools``) and ``ask`` (``mcp_ask``) are built on these, so neither
module needs the other to describe a tool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from jsonschema import Draft202012Validator

from rag_assets.config import TIERS, RagConfig
from rag_assets.config.providers import is_loopback_host
from rag_assets.search.retrieval import SearchIndex
from rag_assets.serve.tiers import Tiers


class ToolError(Exception):
    """A call the tool cannot serve as made; the message tells the model what to do instead."""


@dataclass(frozen=True)
class Caller:
    """Who is calling: ``stdio`` (a process the user launched) or ``http`` from ``client_host``."""

    transport: str
    client_host: str | None = None


@dataclass
class ToolEnv:
    """What the tools work with: the configuration and the per-tier index/embedder cache."""

    cfg: RagConfig
    tiers: Tiers


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


def private_allowed(caller: Caller, serve_private: bool) -> bool:
    """May this caller read the Private tier? Over stdio yes (the user launched the process);
    over HTTP only when the server serves the tier at all (``serve_private``: bound to loopback,
    or started with allow_private_remote) *and* the request comes from a loopback address, so
    not even allow_private_remote opens it to a remote MCP client. Anything else, an unknown
    transport included, is refused."""
    if caller.transport == "stdio":
        return True
    if caller.transport == "http":
        return serve_private and bool(caller.client_host) and is_loopback_host(caller.client_host or "")
    return False


def tier_index(env: ToolEnv, caller: Caller, tier: str) -> SearchIndex:
    """The tier's search index, once the caller is allowed to read it (ToolError otherwise)."""
    if tier not in TIERS:
        raise ToolError(f"unknown tier {tier!r}; use one of {', '.join(TIERS)} (public is the default)")
    if tier == "private" and not private_allowed(caller, env.tiers.serve_private):
        raise ToolError(
            "the private tier is only served to this machine: over stdio (`rag mcp`) or over HTTP from a "
            "loopback address to a server bound to 127.0.0.1; search tier public or safe instead"
        )
    return env.tiers.index(tier)
