"""The MCP ``ask`` tool: a question answered from a tier's sources by the configured chat model.

It is ``POST /ask`` without streaming (:mod:`rag_assets.serve.ask_routes`): the same retrieval,
abstention without a model call, grounded prompt, citation check and answer log; its result is
the ``rag ask --json`` document. Served only when a chat model is configured (``llm.name``
openai or ollama) or ``auto`` finds one when the server starts, so an agent is never offered a
tool that cannot answer. The Private tier goes through the same guard as the other tools
(:func:`~rag_assets.serve.mcp_base.tier_index`) and answers only with a local model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rag_assets.answer.ask import AskRequest, collect, generate, prepare
from rag_assets.answer.selection import ChatSelection, chat_for_tier
from rag_assets.config import RagConfig
from rag_assets.search.rerank.stage import search_reranked
from rag_assets.serve.ask_routes import ChatModels
from rag_assets.serve.limits import DailyBudget, Limits, address_key, counted, exempt, retry_after
from rag_assets.serve.mcp_base import Caller, ToolEnv, ToolError, ToolSpec, caller_scopes, tier_index
from rag_assets.serve.mcp_schemas import ASK_SCHEMA

ASK_DESCRIPTION = (
    "Answer a question from the notes with a chat model, citing its sources as [n]. Returns the answer, "
    "the citations (collection, slug, title, heading path of each [n]), a citation check (numbers that name "
    "no source, or an answer citing nothing) and the sources retrieved. When no passage is relevant enough "
    "it abstains without asking the model (abstained: true) and lists the nearest pages. Prefer search or "
    "get_context when you will write the answer yourself; use ask for a short, cited answer."
)


def chat_model_available(cfg: RagConfig) -> bool:
    """Serve ``ask``? Yes when a model is named; with ``auto``, when one is found now."""
    name = cfg.llm.name
    if name == "none":
        return False
    if name != "auto":
        return True
    return chat_for_tier(cfg.llm, "public", private_hosts=cfg.private_hosts).provider is not None


def ask_tool(cfg: RagConfig) -> ToolSpec:
    """The ``ask`` ToolSpec; one chat model per tier is chosen on first use and kept."""
    models = ChatModels(cfg)

    def run_ask(env: ToolEnv, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        question = args["question"].strip()
        if not question:
            raise ToolError("question is empty; ask a question in plain words")
        tier = args.get("tier", "public")
        index = tier_index(env, caller, tier)  # the tier guard comes first
        scopes = list(caller_scopes(caller, env.tiers.serve_private))
        with _ask_allowance(env.limits, caller, scopes) as budget:
            question = env.tiers.question(tier, question)  # sanitised on the Safe tier before anything sees it
            request = AskRequest(question=question, tier=tier, collections=tuple(args.get("collections") or ()))
            selection = models.get(tier)  # PrivacyError for a non-local model on the Private tier
            if budget is not None and selection.provider is not None and budget.exhausted():
                selection = ChatSelection(None, budget.reason())
            stage = env.tiers.rerank_stage(tier, None)

            def search(query, params):
                return search_reranked(index, query, env.tiers.embedder(tier, index), params, stage)

            prepared = prepare(request, search, selection, index.path, env.cfg.llm)
            collected = collect(prepared, counted(generate(prepared, streamed=False), prepared, budget))
        if collected.status != 200:
            raise ToolError(
                f"no answer: {collected.body['error']}; the sources found are available through get_context "
                "with the same question"
            )
        return collected.body

    return ToolSpec("ask", ASK_DESCRIPTION, ASK_SCHEMA, run_ask)


@contextmanager
def _ask_allowance(limits: Limits | None, caller: Caller, scopes: list[str]) -> Iterator[DailyBudget | None]:
    """The limits of POST /ask for one MCP answer: the caller's ask bucket and an answer slot
    (ToolError when over either); yields the anonymous budget the answer counts against."""
    if limits is None or exempt(scopes):
        yield None
        return
    key = f"token:{caller.user}" if caller.user else address_key(caller.client_host)
    wait = limits.ask.take(key)
    if wait > 0:
        raise ToolError(f"too many questions from this client; retry after {retry_after(wait)} s")
    slot = limits.slots.acquire()
    if slot is None:
        raise ToolError(f"{limits.slots.size} answers are being written already; retry in a few seconds")
    try:
        yield limits.anonymous_budget(scopes)
    finally:
        slot.release()
