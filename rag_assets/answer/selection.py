"""Choosing the chat model for a tier: by name, or ``auto`` with the reason, as for the embedders.

``auto`` tries the OpenAI-compatible API when its key variable is set (OpenRouter by default;
``llm.openai.base_url``, else ``$RAG_OPENAI_BASE_URL``, else OpenRouter), then Ollama when it
answers and has ``llm.ollama.model`` pulled (``llm.ollama.host``, else ``$OLLAMA_HOST``), and
otherwise chooses none, saying what it tried. ``none`` never answers: `rag ask` then lists the
sources.

The Private tier answers only with a provably local model: the endpoint's host must be
loopback or listed in ``private_tier.allowed_hosts`` (the rule of its embedder), and every
request, probes included, goes through :class:`~rag_assets.base.egress.PrivateEgress`'s
client (no proxy, no redirect). A named provider elsewhere is refused with
:class:`~rag_assets.base.egress.PrivacyError` before anything is sent; ``auto`` skips it.
The Safe tier's sources are the sanitised text of its store, so any provider may answer it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rag_assets.answer.providers.base import ChatProvider, ChatUnavailable
from rag_assets.answer.providers.ollama_chat import OllamaChat
from rag_assets.answer.providers.openai_chat import OpenAIChat
from rag_assets.base.egress import PrivacyError, PrivateEgress
from rag_assets.config.masking import mask_url
from rag_assets.config.providers import OPENROUTER_BASE_URL, canonical_name, is_loopback_host, ollama_host, url_host
from rag_assets.config.settings import LlmSettings
from rag_assets.embed.ollama import ollama_health

# The embedders' rules, read from the llm settings' fields of the same names.
from rag_assets.embed.selection import retry_policy

CHAT_PROVIDERS = ("auto", "openai", "ollama", "none")


@dataclass(frozen=True)
class ChatSelection:
    """The chosen model (None: no answer will be generated) and why."""

    provider: ChatProvider | None
    reason: str

    @property
    def name(self) -> str:
        return "none" if self.provider is None else f"{self.provider.provider}:{self.provider.model}"


def openai_base_url(settings: LlmSettings, env: Mapping[str, str]) -> str:
    """``llm.openai.base_url``, else ``$RAG_OPENAI_BASE_URL`` (as for embeddings), else OpenRouter."""
    return (settings.openai.base_url or env.get("RAG_OPENAI_BASE_URL") or OPENROUTER_BASE_URL).strip()


def select_chat(
    settings: LlmSettings,
    tier: str,
    *,
    private_hosts: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> ChatSelection:
    """The chat model that answers questions about ``tier`` (see the module docstring)."""
    env = os.environ if environ is None else environ
    egress = PrivateEgress(tuple(private_hosts)) if tier == "private" else None
    name = canonical_name(settings.name)
    if name == "none":
        return ChatSelection(None, "llm.name is none: no chat model answers")
    if name == "openai":
        return ChatSelection(_openai(settings, env, egress), "configured: openai-compatible API")
    if name == "ollama":
        return ChatSelection(_ollama(settings, env, egress), "configured: ollama")
    if name == "auto":
        return _auto(settings, env, egress)
    raise ValueError(f"unknown chat provider {settings.name!r}; choose one of: {', '.join(CHAT_PROVIDERS)}")


def _auto(settings: LlmSettings, env: Mapping[str, str], egress: PrivateEgress | None) -> ChatSelection:
    tried: list[str] = []
    key_env = settings.openai.api_key_env
    base_url = openai_base_url(settings, env)
    if not env.get(key_env):
        tried.append(f"{key_env} not set")
    elif egress is not None and not egress.allows(base_url):
        tried.append(f"the OpenAI-compatible API at {mask_url(base_url)} is not local")
    else:
        return ChatSelection(_openai(settings, env, egress), f"auto: {key_env} is set")
    host = ollama_host(settings.ollama.host, env)
    model = settings.ollama.model
    if egress is not None and not egress.allows(host):
        tried.append(f"Ollama at {mask_url(host)} is not local")
    else:
        health = ollama_health(host, timeout=1.0, egress=egress)
        if health.online and health.has_model(model):
            return ChatSelection(_ollama(settings, env, egress), f"auto: Ollama at {mask_url(host)} has {model}")
        tried.append(
            f"Ollama at {mask_url(host)} lacks {model} (ollama pull {model})"
            if health.online
            else f"Ollama at {mask_url(host)} is not reachable"
        )
    return ChatSelection(None, "no chat model available: " + "; ".join(tried))


def _openai(settings: LlmSettings, env: Mapping[str, str], egress: PrivateEgress | None) -> OpenAIChat:
    base_url = openai_base_url(settings, env)
    if egress is not None:
        _check_local("openai-compatible API", base_url, egress)
    key = env.get(settings.openai.api_key_env)
    if not key and not is_loopback_host(url_host(base_url)):
        raise ChatUnavailable(
            f"llm.name is openai but {settings.openai.api_key_env} is not set; set it, or point llm.openai.base_url "
            "at a local server"
        )
    return OpenAIChat(
        base_url=base_url,
        model=settings.openai.model,
        api_key=key,
        policy=retry_policy(settings),
        temperature=settings.temperature,
        max_tokens=settings.max_answer_tokens,
        egress=egress,
    )


def _ollama(settings: LlmSettings, env: Mapping[str, str], egress: PrivateEgress | None) -> OllamaChat:
    host = ollama_host(settings.ollama.host, env)
    if egress is not None:
        _check_local("Ollama", host, egress)
    return OllamaChat(
        host=host,
        model=settings.ollama.model,
        policy=retry_policy(settings),
        temperature=settings.temperature,
        max_tokens=settings.max_answer_tokens,
        egress=egress,
    )


def _check_local(what: str, url: str, egress: PrivateEgress) -> None:
    if not egress.allows(url):
        raise PrivacyError(
            f"refusing to answer from private notes with the {what} at {mask_url(url)}: not a loopback address nor a "
            "host listed in private_tier.allowed_hosts; the Private tier answers only with a model on this machine "
            "(Ollama, or an OpenAI-compatible server on 127.0.0.1)"
        )


def chat_for_tier(
    settings: LlmSettings, tier: str, *, private_hosts: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> ChatSelection:
    """:func:`select_chat`, with a provider that cannot be set up (ChatUnavailable) as no model and
    its reason; PrivacyError (a non-local model for the Private tier) still raises."""
    try:
        return select_chat(settings, tier, private_hosts=private_hosts, environ=environ)
    except ChatUnavailable as exc:
        return ChatSelection(None, str(exc))
