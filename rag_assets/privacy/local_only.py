"""The Private tier's hard rule: its text is embedded on this machine or a host the owner named.

Two gates, so that one mistake is not enough to leak a note:

- at load time, :func:`private_settings_problem` turns a remote provider (or an Ollama host
  that is neither loopback nor listed in ``private_tier.allowed_hosts``) into a configuration
  error;
- at run time, :func:`enforce_local_only` refuses any embedder it cannot prove local and
  makes its HTTP sender use the Private tier's egress client (:mod:`rag_assets.base.egress`):
  approved host only, checked per request, no proxy, no redirect.

Which hosts are approved, and how the client keeps to them, is :mod:`rag_assets.base.egress`'s
concern; the names below are re-exported from there for the callers that import them here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from rag_assets.base.egress import PrivacyError, PrivateEgress
from rag_assets.config.providers import private_provider_problem
from rag_assets.embed.base import Embedder
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.embed.http import RemoteEmbedder
from rag_assets.embed.selection import EmbedderSettings, Selection, select_embedder

__all__ = ["PrivacyError", "enforce_local_only", "private_settings_problem", "select_private_embedder"]


def private_settings_problem(
    settings: EmbedderSettings, allowed_hosts: Iterable[str], environ: Mapping[str, str]
) -> str | None:
    """Why these settings may not embed Private text, or None when they are local-only."""
    return private_provider_problem(settings.name, settings.ollama.host, allowed_hosts, environ)


def enforce_local_only(embedder: Embedder, allowed_hosts: Iterable[str] = ()) -> Embedder:
    """The embedder, proven local and sending only through the Private tier's egress client;
    PrivacyError otherwise."""
    egress = PrivateEgress(tuple(allowed_hosts))
    if isinstance(embedder, HashingEmbedder):
        return embedder
    if isinstance(embedder, RemoteEmbedder):
        if embedder.provider != "ollama":
            raise PrivacyError(
                f"refusing to send private text to {embedder.provider} ({embedder.model}): the Private tier "
                "embeds only locally"
            )
        embedder.restrict_egress(egress)
        egress.check_url(embedder.endpoint)  # fail before the first batch, not inside it
        return embedder
    from rag_assets.embed.local import LocalEmbedder
    from rag_assets.embed.minilm import MiniLMEmbedder

    # Both run weights from a folder on this disk, in this process, and open no connection.
    if isinstance(embedder, (LocalEmbedder, MiniLMEmbedder)):
        return embedder
    raise PrivacyError(
        f"refusing to embed private text with {type(embedder).__name__}: it cannot be proven to run locally"
    )


def select_private_embedder(
    settings: EmbedderSettings, allowed_hosts: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> Selection:
    """The Private tier's embedder (``auto``: local Ollama, else minilm, else the local model, else hashing),
    guarded by :func:`enforce_local_only`."""
    env = os.environ if environ is None else environ
    allowed = tuple(allowed_hosts)
    problem = private_settings_problem(settings, allowed, env)
    if problem:
        raise PrivacyError(problem)
    selection = select_embedder(settings, env, private_egress=PrivateEgress(allowed))
    return Selection(enforce_local_only(selection.embedder, allowed), selection.provider, selection.reason)
