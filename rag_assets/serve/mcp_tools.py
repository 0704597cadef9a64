"""The MCP server's tools, independent of the transport: their descriptions (written for a model
to read) and the blocking work behind each; their argument schemas are in ``mcp_schemas``.

A tool is a :class:`ToolSpec`: a name, a description, an input schema and a ``run(env, caller,
arguments)`` that returns a JSON-ready dict or raises :class:`ToolError` (or one of the search
errors, which :func:`call_tool` turns into ToolError). Arguments are checked against the schema
before ``run`` sees them, so the schema is the one statement of what is accepted.

Tiers: Public by default; Safe and Private as the caller's scopes allow (:func:`caller_scopes`:
everything over stdio and to a loopback client of a server bound to loopback; over HTTP
otherwise what the request's token grants, see :mod:`rag_assets.serve.access`), checked by
:func:`tier_index` through the same function as every HTTP route.

``related`` (:mod:`rag_assets.serve.mcp_related`) and ``ask`` (:mod:`rag_assets.serve.mcp_ask`) are ToolSpecs
of their own modules; ``ask`` is appended in :func:`build_tools`
when a chat model is configured. The pieces both build on (ToolSpec, Caller, ToolEnv, ToolError,
the tier gate) are in :mod:`rag_assets.serve.mcp_base` and re-exported here.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from jsonschema.exceptions import best_match

from rag_assets.base import cjk
from rag_assets.base.egress import PrivacyError
from rag_assets.config import TIERS, RagConfig
from rag_assets.embed.errors import EmbeddingError
from rag_assets.index.freshness import FRESH_HOURS, STALE_HOURS
from rag_assets.index.params import Hit, SearchError, SearchParams, SearchResult
from rag_assets.index.query import STOP_WORDS
from rag_assets.privacy.vaults import tier_card
from rag_assets.search import documents
from rag_assets.search.context import pack_context
from rag_assets.search.passages import citation_tag, cites_notes, heading_anchor, note_citation
from rag_assets.search.rerank.stage import search_reranked
from rag_assets.search.retrieval import SearchIndex
from rag_assets.serve.mcp_ask import ask_tool, chat_model_available
from rag_assets.serve.mcp_base import Caller, ToolEnv, ToolError, ToolSpec, caller_scopes, private_allowed, tier_index
from rag_assets.serve.mcp_related import RELATED
from rag_assets.serve.mcp_schemas import (
    COLLECTIONS_SCHEMA,
    CONTEXT_SCHEMA,
    DEFAULT_BUDGET,
    DOCUMENT_SCHEMA,
    SEARCH_SCHEMA,
)
from rag_assets.serve.tiers import BadRequest, Refused

log = logging.getLogger("rag_assets.serve.mcp")

SNIPPET_CHARS = 320
MAX_DOCUMENT_CHARS = 60_000  # a whole page beyond this is cut; one section can be asked for instead


# --------------------------------------------------------------------------- tools


def _search_params(args: dict[str, Any], index: SearchIndex, k: int, view: str) -> SearchParams:
    collections = tuple(args.get("collections") or ())
    if collections:
        known = documents.collection_names(index.path)
        unknown = [c for c in collections if c not in known]
        if unknown:
            raise ToolError(
                f"unknown collection(s) {', '.join(unknown)}; this tier holds {', '.join(known) or 'none'} "
                "(list_collections shows them)"
            )
    filters = tuple((key, _filter_value(value)) for key, value in (args.get("filters") or {}).items())
    params = SearchParams(
        k=k,
        view=view,
        collections=collections,
        tags=tuple(args.get("tags") or ()),
        filters=filters,
        min_score=float(args.get("min_relevance", 0.5)),
        candidates=max(200, k),
    )
    params.validate()
    return params


def _filter_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _run_search(env: ToolEnv, caller: Caller, args: dict[str, Any], k: int, view: str) -> tuple[str, str, SearchResult]:
    query = args["query"].strip()
    if not query:
        raise ToolError("query is empty; give a question or a few keywords")
    tier = args.get("tier", "public")
    index = tier_index(env, caller, tier)
    params = _search_params(args, index, k, view)
    query = env.tiers.question(tier, query)  # sanitised on the Safe tier before it is embedded or logged
    stage = env.tiers.rerank_stage(tier, None)
    return query, tier, search_reranked(index, query, env.tiers.embedder(tier, index), params, stage)


def _query_terms(query: str) -> list[str]:
    words = {w for w in cjk.WORD.findall(query.lower()) if len(w) > 1}
    return sorted(words - STOP_WORDS) or sorted(words)


def snippet(text: str, terms: list[str]) -> str:
    """About SNIPPET_CHARS of the chunk, around where most query terms occur (a chunk starts
    with the previous one's overlap, so its first words are often not what matched)."""
    flat = " ".join(text.split())
    if len(flat) <= SNIPPET_CHARS:
        return flat
    low = flat.lower()
    found = sorted(m.start() for t in terms for m in re.finditer(re.escape(t), low))
    start = 0
    if found:
        lead = SNIPPET_CHARS // 8  # a little text before the first match
        best = max(found, key=lambda p: sum(p <= q < p + SNIPPET_CHARS - lead for q in found))
        start = max(0, best - lead)
        if start:
            space = flat.find(" ", start)
            start = space + 1 if 0 <= space < best else best
    end = min(len(flat), start + SNIPPET_CHARS)
    if end < len(flat) and " " in flat[start:end]:
        end = flat.rindex(" ", start, end)
    return ("… " if start else "") + flat[start:end] + (" …" if end < len(flat) else "")


def _anchor(heading_path: list[str]) -> str | None:
    return heading_anchor(heading_path[-1]) if heading_path else None


def hit_json(hit: Hit, terms: list[str], notes: bool = False) -> dict[str, Any]:
    """A page-level hit for a model: where it is, how relevant, a snippet per matching section."""
    full = hit.to_json()
    return {
        "collection": full["collection"],
        "slug": full["slug"],
        "title": full["title"],
        "relevance": full["relevance"],
        "headingPath": full["headingPath"],
        "anchor": _anchor(full["headingPath"]),
        # A vault note (notes: the Safe and Private tiers) is cited as Obsidian links it.
        "citation": note_citation(hit.slug, hit.heading_path)
        if notes
        else citation_tag(hit.collection, hit.slug, hit.heading_path),
        "snippet": snippet(full["text"], terms),
        "sections": [
            {
                "headingPath": s["headingPath"],
                "anchor": _anchor(s["headingPath"]),
                "relevance": s["relevance"],
                "snippet": snippet(s["text"], terms),
            }
            for s in full["sections"]
        ],
    }


def run_search(env: ToolEnv, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    query, tier, result = _run_search(env, caller, args, args.get("k", 10), "pages")
    terms = _query_terms(query)
    out: dict[str, Any] = {
        "query": query,
        "tier": tier,
        "hits": [hit_json(h, terms, cites_notes(tier)) for h in result.hits],
        "minRelevance": result.params.min_score,
        "bestRelevance": round(result.best_relevance, 4),
        "model": result.model,
    }
    if not result.hits:
        out["message"] = _nothing_passed(result)
    return out


def run_get_context(env: ToolEnv, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    # The chunk view: packing merges a page's consecutive chunks itself (as /context does).
    query, tier, result = _run_search(env, caller, args, args.get("k", 20), "chunks")
    packed = pack_context(result.hits, args.get("budget", DEFAULT_BUDGET), notes=cites_notes(tier))
    out: dict[str, Any] = {
        "query": query,
        "tier": tier,
        "context": packed.text,
        "citations": packed.citations,
        "tokens": packed.tokens,
        "budget": packed.budget,
        "tokenizer": packed.tokenizer,
        "bestRelevance": round(result.best_relevance, 4),
    }
    if not result.hits:
        out["message"] = _nothing_passed(result)
    elif packed.message:  # hits, but the budget is under the best passage: the budget it needs
        out["message"] = packed.message
        out["neededBudget"] = packed.needed_budget
    return out


def _nothing_passed(result: SearchResult) -> str:
    return (
        f"No passage reaches the relevance threshold {result.params.min_score:g} (the closest scored "
        f"{result.best_relevance:.2f}): this index does not seem to answer that. Rephrase, search another tier "
        "or collection, or lower min_relevance to see the nearest anyway."
    )


def run_get_document(env: ToolEnv, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    tier = args.get("tier", "public")
    index = tier_index(env, caller, tier)
    page = documents.read_document(
        index.path, args["collection"].strip(), args["slug"].strip().strip("/"), args.get("anchor")
    )
    out = {"tier": tier, **page.to_json()}
    if len(page.markdown) > MAX_DOCUMENT_CHARS:
        out["markdown"] = page.markdown[:MAX_DOCUMENT_CHARS]
        out["truncated"] = True
        out["message"] = f"the page is longer than {MAX_DOCUMENT_CHARS} characters; ask for one section by its anchor"
    return out


def run_list_collections(env: ToolEnv, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    tiers = [args["tier"]] if "tier" in args else list(TIERS)
    out = []
    for tier in tiers:
        if tier == "private" and not private_allowed(caller, env.tiers.serve_private):
            if "tier" in args:
                tier_index(env, caller, tier)  # raises the explanation
            out.append({"tier": tier, "available": False, "reason": "served only to a client on this machine"})
            continue
        if tier not in caller_scopes(caller, env.tiers.serve_private) and tier != "public":
            if "tier" in args:
                tier_index(env, caller, tier)  # raises the explanation
            out.append({"tier": tier, "available": False, "reason": f"needs a token with scope {tier}"})
            continue
        card = tier_card(env.cfg, tier)
        entry: dict[str, Any] = {
            "tier": tier,
            "available": card.exists,
            "documents": card.documents,
            "chunks": card.chunks,
            "model": card.model,
            "builtAt": card.built_at,
            "freshness": card.freshness,
        }
        if card.exists:
            entry["collections"] = [c.to_json() for c in documents.list_collections(tier_index(env, caller, tier).path)]
        else:
            entry["reason"] = "not built yet (`rag build` builds it)"
        out.append(entry)
    return {
        "tiers": out,
        "freshness": f"Fresh: built under {FRESH_HOURS} h ago; Stale: {FRESH_HOURS}-{STALE_HOURS} h; Old: older",
    }


SEARCH = ToolSpec(
    "search",
    "Search the indexed Markdown knowledge base (hybrid: embeddings + BM25) and return the best matching "
    "pages, best first. Each hit has its collection and slug, title, a calibrated relevance (0-1; 0.5 and "
    "above means it likely answers the query), the heading path and anchor of its best section, a snippet, "
    "and its other matching sections. An empty hit list means nothing in the index answers the query. Use "
    "get_document with a hit's collection, slug and anchor to read the full text, or get_context for "
    "ready-to-quote passages.",
    SEARCH_SCHEMA,
    run_search,
)
GET_CONTEXT = ToolSpec(
    "get_context",
    "Search, then return the most relevant passages packed into at most `budget` tokens, each preceded by a "
    "citation tag like [collection:slug#heading-anchor]. Use it to ground an answer in the knowledge base "
    "and cite those tags; `citations` lists each passage's page and heading. An empty `context` comes with a "
    "`message` saying why (and `neededBudget` when the budget is smaller than the best passage).",
    CONTEXT_SCHEMA,
    run_get_context,
)
GET_DOCUMENT = ToolSpec(
    "get_document",
    "Read one page of the knowledge base as Markdown, with its metadata (title, tags, frontmatter, update "
    "time) and its sections' anchors. Give `anchor` to get only that section (its heading and everything "
    "under it). Collection and slug come from search hits or citation tags ([collection:slug#anchor]).",
    DOCUMENT_SCHEMA,
    run_get_document,
)
LIST_COLLECTIONS = ToolSpec(
    "list_collections",
    "List what the knowledge base holds: per tier (public, safe, private), its collections with document and "
    "chunk counts, when each was indexed and how fresh it is, and the embedding model. Use it to learn "
    "collection names for filtering, or to check whether the index is current.",
    COLLECTIONS_SCHEMA,
    run_list_collections,
)


def build_tools(cfg: RagConfig) -> list[ToolSpec]:
    """The tools this configuration serves, in the order tools/list shows them: ``ask``
    (:mod:`rag_assets.serve.mcp_ask`) last, and only when a chat model is configured."""
    tools = [SEARCH, GET_CONTEXT, GET_DOCUMENT, LIST_COLLECTIONS, RELATED]
    if chat_model_available(cfg):
        tools.append(ask_tool(cfg))
    return tools


# --------------------------------------------------------------------------- calling


def check_arguments(tool: ToolSpec, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """The arguments, validated against the tool's schema (ToolError naming the bad one)."""
    args = dict(arguments or {})
    error = best_match(tool.validator.iter_errors(args))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "arguments"
        raise ToolError(f"invalid {where}: {error.message} (see the {tool.name} tool's input schema)")
    return whole_integers(tool.input_schema, args)


def whole_integers(schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with the integer properties as ints: JSON Schema counts 5.0 as an integer, and
    a float k or budget would fail deep inside the search (a slice needs an int)."""
    properties = schema.get("properties", {})
    return {
        name: int(value) if isinstance(value, float) and properties.get(name, {}).get("type") == "integer" else value
        for name, value in args.items()
    }


def call_tool(env: ToolEnv, caller: Caller, tool: ToolSpec, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """Run one call (blocking). Every failure a caller can act on becomes a ToolError."""
    args = check_arguments(tool, arguments)
    try:
        return tool.run(env, caller, args)
    except ToolError:
        raise
    except (Refused, PrivacyError) as exc:
        raise ToolError(str(exc)) from None
    except EmbeddingError as exc:
        raise ToolError(f"cannot embed the query: {exc}; is the embedding service running?") from None
    except (BadRequest, SearchError, ValueError) as exc:
        raise ToolError(str(exc)) from None


__all__ = [
    "Caller",
    "ToolEnv",
    "ToolError",
    "ToolSpec",
    "build_tools",
    "call_tool",
    "caller_scopes",
    "check_arguments",
    "hit_json",
    "private_allowed",
    "tier_index",
]
