"""The ``serve:`` section of ``rag.yaml``: who may use a server beyond loopback, and how much.

Read by ``rag serve`` (rag_assets.serve.access, rag_assets.serve.limits) and ``rag token``.
Nothing here applies to a server bound to loopback and its loopback clients: they are the
machine's owner, exempt from tokens and limits alike.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.dataclasses import dataclass


def normal_origin(value: str) -> str:
    """A web origin written one way (``scheme://host[:port]``, lower case, no default port), so
    ``HTTPS://Notes.Example.org:443`` and ``https://notes.example.org`` compare equal.
    ValueError for anything else (a path, a query, credentials, another scheme, ``null``)."""
    parts = urlsplit(value.strip())
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise ValueError(f"{value!r} is not an origin: give scheme://host[:port], e.g. https://notes.example.org")
    port = parts.port  # ValueError for a port that is not a number in 0-65535
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = 80 if parts.scheme == "http" else 443
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None and port != default else "")


class RateLimitSection(BaseModel):
    """One token bucket per client: ``burst`` requests at once, refilled at ``per_second``."""

    # allow_inf_nan=False: `.inf` is no rate (as in every other section).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    per_second: float = Field(gt=0, le=10_000, description="Requests per second refilled into each client's bucket.")
    burst: int = Field(ge=1, le=100_000, description="Requests a client may make at once before the rate applies.")


class ServeSection(BaseModel):
    """``serve:``: tokens, per-client limits, the anonymous chat allowance and CORS of ``rag serve``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    token_file: str | None = Field(
        None,
        description="Where `rag token` keeps the tokens' salted hashes (mode 0600, never inside output_dir); "
        "default $XDG_CONFIG_HOME/rag-assets/tokens.json; $RAG_TOKEN_FILE overrides it.",
    )
    cors_origins: list[Annotated[str, AfterValidator(normal_origin)]] = Field(
        default_factory=list,
        description="Origins (scheme://host[:port]) of other sites whose pages may call the API (/search, /context, "
        "/embed, and POST /ask, /mcp), e.g. the site that publishes search.html; none by default. The server's own "
        "origin always may; a request another page started is refused (403), and no CORS header is sent to it.",
    )
    search_limit: RateLimitSection = Field(
        default_factory=lambda: RateLimitSection(per_second=10, burst=20),
        description="Per client: /search, /context, /embed and MCP requests (a page typing a query makes a few a second).",
    )
    ask_limit: RateLimitSection = Field(
        default_factory=lambda: RateLimitSection(per_second=0.1, burst=3),
        description="Per client: POST /ask and the MCP ask tool (each spends chat-model tokens): 3 at once, then 1 per 10 s.",
    )
    max_concurrent_asks: int = Field(
        4, ge=1, le=1000, description="Answers generated at once, all clients together; more wait (429)."
    )
    anonymous_chat_tokens_per_day: int = Field(
        50_000,
        ge=0,
        description="Chat-model tokens anonymous questions may spend per UTC day; past it /ask gives the sources only.",
    )
    admin_vault_roots: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description="Folders (besides rag.yaml's own folder and below) under which the admin console may add a vault.",
    )
    dagster_url: str = Field(
        "http://127.0.0.1:3000",
        min_length=1,
        description="The Dagster UI the admin console links a launched run to: <dagster_url>/runs/<run id>.",
    )

    @field_validator("cors_origins", "search_limit", "ask_limit", "admin_vault_roots", mode="before")
    @classmethod
    def _blank_is_default(cls, value: Any, info: ValidationInfo) -> Any:
        # `cors_origins:` with nothing under it reads as null: the default, as in the other sections.
        if value is None and info.field_name is not None:
            return cls.model_fields[info.field_name].get_default(call_default_factory=True)
        return value


@dataclass(frozen=True)
class RateLimit:
    """A token bucket's refill rate (per second) and size."""

    per_second: float
    burst: int


_DEFAULTS = ServeSection()


@dataclass(frozen=True)
class ServeSettings:
    """The validated ``serve:`` section, paths resolved (defaults: :class:`ServeSection`)."""

    token_file: Path | None = None  # None: $RAG_TOKEN_FILE, else $XDG_CONFIG_HOME/rag-assets/tokens.json
    cors_origins: tuple[str, ...] = ()
    search_limit: RateLimit = RateLimit(_DEFAULTS.search_limit.per_second, _DEFAULTS.search_limit.burst)
    ask_limit: RateLimit = RateLimit(_DEFAULTS.ask_limit.per_second, _DEFAULTS.ask_limit.burst)
    max_concurrent_asks: int = _DEFAULTS.max_concurrent_asks
    anonymous_chat_tokens_per_day: int = _DEFAULTS.anonymous_chat_tokens_per_day
    admin_vault_roots: tuple[Path, ...] = ()  # absolute
    dagster_url: str = _DEFAULTS.dagster_url


def serve_settings(section: ServeSection, resolve: Callable[[str], Path]) -> ServeSettings:
    """The settings of a validated section; ``resolve`` makes a relative path absolute."""
    return ServeSettings(
        token_file=resolve(section.token_file) if section.token_file else None,
        cors_origins=tuple(section.cors_origins),
        search_limit=RateLimit(section.search_limit.per_second, section.search_limit.burst),
        ask_limit=RateLimit(section.ask_limit.per_second, section.ask_limit.burst),
        max_concurrent_asks=section.max_concurrent_asks,
        anonymous_chat_tokens_per_day=section.anonymous_chat_tokens_per_day,
        admin_vault_roots=tuple(resolve(root) for root in section.admin_vault_roots),
        dagster_url=section.dagster_url.rstrip("/"),
    )
