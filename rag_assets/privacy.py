"""The Private tier's hard rule: its text is embedded on this machine or a host the owner named.

Two gates, so that one mistake is not enough to leak a note:

- at load time, :func:`private_settings_problem` turns a remote provider (or an Ollama host
  that is neither loopback nor listed in ``private_tier.allowed_hosts``) into a configuration
  error;
- at run time, :func:`enforce_local_only` refuses any embedder it cannot prove local and
  installs a guard on the HTTP sender that checks every request's URL before it is sent.

Host names are compared as written, never resolved: DNS could point a trusted-looking name
anywhere, so only loopback literals (``localhost``, ``127.0.0.0/8``, ``::1``) and the listed
hosts pass.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Iterable, Mapping
from urllib.parse import urlsplit

from rag_assets.embedders.base import Embedder
from rag_assets.embedders.hashing import HashingEmbedder
from rag_assets.embedders.http import RemoteEmbedder
from rag_assets.embedders.ollama import ollama_host
from rag_assets.embedders.selection import EmbedderSettings, Selection, canonical_name, select_embedder

LOCAL_PROVIDERS = ("auto", "ollama", "local", "hashing")


class PrivacyError(RuntimeError):
    """Private text was about to leave the machine; nothing was sent."""


def is_loopback_host(host: str) -> bool:
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


def private_settings_problem(
    settings: EmbedderSettings, allowed_hosts: Iterable[str], environ: Mapping[str, str]
) -> str | None:
    """Why these settings may not embed Private text, or None when they are local-only."""
    name = canonical_name(settings.name)
    if name not in LOCAL_PROVIDERS:
        return (
            f"embedder {settings.name!r} would send private notes to a remote API; the Private tier embeds "
            f"only locally: choose one of {', '.join(LOCAL_PROVIDERS)}"
        )
    if name == "ollama":
        host = ollama_host(settings.ollama.host, environ)
        if not endpoint_allowed(host, allowed_hosts):
            return (
                f"Ollama at {host} is not on this machine; private notes go only to a loopback address or a "
                "host listed in private_tier.allowed_hosts (add it there if that machine is yours)"
            )
    return None


def enforce_local_only(embedder: Embedder, allowed_hosts: Iterable[str] = ()) -> Embedder:
    """The embedder, proven local and guarded per request; PrivacyError otherwise."""
    allowed = tuple(allowed_hosts)
    if isinstance(embedder, HashingEmbedder):
        return embedder
    if isinstance(embedder, RemoteEmbedder):
        if embedder.provider != "ollama":
            raise PrivacyError(
                f"refusing to send private text to {embedder.provider} ({embedder.model}): the Private tier "
                "embeds only locally"
            )

        def guard(url: str) -> None:
            if not endpoint_allowed(url, allowed):
                raise PrivacyError(
                    f"refusing to send private text to {url}: not a loopback address nor a host listed in "
                    "private_tier.allowed_hosts"
                )

        embedder.restrict_endpoints(guard)
        guard(embedder.endpoint)  # fail before the first batch, not inside it
        return embedder
    from rag_assets.embedders.local import LocalEmbedder

    if isinstance(embedder, LocalEmbedder):
        return embedder
    raise PrivacyError(
        f"refusing to embed private text with {type(embedder).__name__}: it cannot be proven to run locally"
    )


def select_private_embedder(
    settings: EmbedderSettings, allowed_hosts: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> Selection:
    """The Private tier's embedder (``auto``: local Ollama, else the local model, else hashing),
    guarded by :func:`enforce_local_only`."""
    env = os.environ if environ is None else environ
    allowed = tuple(allowed_hosts)
    problem = private_settings_problem(settings, allowed, env)
    if problem:
        raise PrivacyError(problem)
    selection = select_embedder(settings, env, ollama_allowed=lambda host: endpoint_allowed(host, allowed))
    return Selection(enforce_local_only(selection.embedder, allowed), selection.provider, selection.reason)
