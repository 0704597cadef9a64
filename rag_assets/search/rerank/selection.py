"""Which reranker a search uses, from ``reranker:`` in rag.yaml and the tier searched.

``none`` (the default) means no reranking stage. ``http`` and ``chat`` talk to
``reranker.base_url`` (``$RAG_RERANKER_BASE_URL`` overrides it, as ``$RAG_OPENAI_BASE_URL``
does for the embedder), with the key from ``$<api_key_env>`` when one is named.
``cross_encoder`` loads ``reranker.model_path`` in this process.

The Private tier's passages are raw private notes, so for it an HTTP reranker must be
provably local: its host loopback (or listed in ``private_tier.allowed_hosts``, the same
rule as the Private tier's embedder), every request sent through
:class:`~rag_assets.base.egress.PrivateEgress`'s client. Any other endpoint is refused
with :class:`~rag_assets.base.egress.PrivacyError` before a request is made. Safe-tier
passages were sanitised when they were stored, so the Safe and Public tiers may use any.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from rag_assets.base.egress import PrivacyError, PrivateEgress
from rag_assets.base.http_retry import RetryPolicy
from rag_assets.config.masking import mask_url
from rag_assets.config.settings import RagConfig, RerankerSettings
from rag_assets.index.params import SearchError
from rag_assets.search.rerank.base import Reranker
from rag_assets.search.rerank.stage import RerankStage

RERANKERS = ("none", "chat", "http", "cross_encoder")


def reranker_base_url(settings: RerankerSettings, environ: Mapping[str, str]) -> str:
    return (environ.get("RAG_RERANKER_BASE_URL") or settings.base_url or "").strip()


def retry_policy(settings: RerankerSettings) -> RetryPolicy:
    """The embedders' retry rules with the reranker's own timeout and retries; a search is
    interactive, so no Retry-After is honoured past one timeout."""
    return RetryPolicy(max_retries=settings.max_retries, timeout=settings.timeout, retry_after_cap=settings.timeout)


def select_reranker(
    settings: RerankerSettings,
    tier: str,
    *,
    private_hosts: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Reranker | None:
    """The configured reranker for ``tier`` (None for ``none``); PrivacyError when it would
    send Private-tier passages off the machine."""
    env = os.environ if environ is None else environ
    if settings.name == "none":
        return None
    if settings.name == "cross_encoder":
        from rag_assets.search.rerank.cross_encoder import CrossEncoderReranker

        return CrossEncoderReranker(settings.model_path or "", batch_size=settings.batch_size)
    if settings.name not in ("chat", "http"):
        raise ValueError(f"unknown reranker {settings.name!r}; choose one of: {', '.join(RERANKERS)}")
    base_url = reranker_base_url(settings, env)
    egress = _private_egress(settings.name, base_url, tuple(private_hosts)) if tier == "private" else None
    api_key = env.get(settings.api_key_env) if settings.api_key_env else None
    common: dict[str, Any] = dict(
        base_url=base_url,
        api_key=api_key,
        api_key_env=settings.api_key_env,
        policy=retry_policy(settings),
        egress=egress,
    )
    if settings.name == "http":
        from rag_assets.search.rerank.http import HttpReranker

        return HttpReranker(model=settings.model, **common)
    from rag_assets.search.rerank.chat import ChatReranker

    return ChatReranker(model=settings.model or "", batch_size=settings.batch_size, **common)


def _private_egress(name: str, base_url: str, allowed_hosts: tuple[str, ...]) -> PrivateEgress:
    egress = PrivateEgress(allowed_hosts)
    if not egress.allows(base_url):
        raise PrivacyError(
            f"refusing to rerank private notes with the {name} reranker at {mask_url(base_url)}: not a loopback address "
            "nor a host listed in private_tier.allowed_hosts; use a local reranker (one on this machine, or "
            "cross_encoder) or search the private tier without reranking (--no-rerank, rerank=false)"
        )
    return egress


def rerank_stage(
    cfg: RagConfig, tier: str, requested: bool | None = None, environ: Mapping[str, str] | None = None
) -> RerankStage | None:
    """The stage a search of ``tier`` runs: the configured reranker unless ``requested`` is
    False; ``requested=True`` without a configured reranker is a SearchError."""
    settings = cfg.reranker
    if requested is False:
        return None
    if not settings.enabled:
        if requested:
            raise SearchError(
                "no reranker is configured: name one under reranker: in rag.yaml (chat, http or cross_encoder)"
            )
        return None
    reranker = select_reranker(settings, tier, private_hosts=cfg.private_hosts, environ=environ)
    return RerankStage(reranker, settings.top_n) if reranker is not None else None
