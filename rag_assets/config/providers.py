"""Facts about embedding providers that the configuration checks: names, defaults, and which
hosts count as this machine (the Private tier may only embed there)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

PROVIDERS = ("auto", "openai", "ollama", "local", "minilm", "hashing")
ALIASES = {"openrouter": "openai"}
# Providers that can run on this machine: the only ones the Private tier may use.
LOCAL_PROVIDERS = ("auto", "ollama", "local", "minilm", "hashing")

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
OPENAI_DEFAULT_MODEL = "openai/text-embedding-3-small"
OPENAI_DEFAULT_DIMENSION = 1536
OLLAMA_DEFAULT_HOST = "http://localhost:11434"
OLLAMA_DEFAULT_MODEL = "nomic-embed-text"
OLLAMA_DEFAULT_DIMENSION = 768


def canonical_name(name: str) -> str:
    """A provider's name with aliases resolved (``openrouter`` is ``openai``)."""
    return ALIASES.get(name, name)


def ollama_host(configured: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """The base URL: configured, else ``OLLAMA_HOST`` (``host:port`` allowed), else localhost."""
    env = os.environ if environ is None else environ
    host = (configured or env.get("OLLAMA_HOST") or OLLAMA_DEFAULT_HOST).strip().rstrip("/")
    if "://" not in host:
        host = f"http://{host}"
    if host.count(":") == 1:  # scheme but no port
        host = f"{host}:11434"
    return host


def is_loopback_host(host: str) -> bool:
    """True for ``localhost`` and loopback address literals (the name as written, not resolved)."""
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def endpoint_allowed(url: str, allowed_hosts: Iterable[str] = ()) -> bool:
    """True when the URL's host is loopback or one the owner listed for private text."""
    host = url_host(url)
    if not host:
        return False
    allowed = {h.strip().lower().strip("[]") for h in allowed_hosts}
    # A listed entry may carry a scheme or port ("http://gpu-box:11434"); compare hosts.
    allowed |= {url_host(h) for h in allowed if "://" in h}
    return is_loopback_host(host) or host in allowed


def private_provider_problem(
    name: str, ollama_configured_host: str | None, allowed_hosts: Iterable[str], environ: Mapping[str, str]
) -> str | None:
    """Why this provider may not embed Private text, or None when it is local-only."""
    provider = canonical_name(name)
    if provider not in LOCAL_PROVIDERS:
        return (
            f"embedder {name!r} would send private notes to a remote API; the Private tier embeds "
            f"only locally: choose one of {', '.join(LOCAL_PROVIDERS)}"
        )
    if provider == "ollama":
        host = ollama_host(ollama_configured_host, environ)
        if not endpoint_allowed(host, allowed_hosts):
            return (
                f"Ollama at {host} is not on this machine; private notes go only to a loopback address or a "
                "host listed in private_tier.allowed_hosts (add it there if that machine is yours)"
            )
    return None
