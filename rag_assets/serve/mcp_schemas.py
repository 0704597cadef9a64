"""The JSON schemas of the MCP tools' arguments (rag_assets.serve.mcp_tools): what each accepts,
with the bounds and a description per argument, for the model that calls them."""

from __future__ import annotations

from typing import Any

from rag_assets.config import TIERS
from rag_assets.serve.http_params import MAX_QUERY_CHARS

MAX_K = 50  # pages a model can use in one answer; more only fills its context
MAX_CONTEXT_K = 100
MIN_BUDGET, MAX_BUDGET, DEFAULT_BUDGET = 50, 20_000, 1500

_QUERY = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_QUERY_CHARS,
    "description": "What to look for: a question or keywords in plain words (no query syntax).",
}
_TIER = {
    "type": "string",
    "enum": list(TIERS),
    "default": "public",
    "description": (
        "Which index: public (published site content, the default), safe (note vaults with secrets and "
        "identifying values replaced) or private (every note, raw; only for a client on this machine)."
    ),
}
_COLLECTIONS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "uniqueItems": True,
    "description": "Only these collections (or vaults); names as list_collections gives them. Omit for all.",
}
_FILTERS = {
    "type": "object",
    "additionalProperties": {"type": ["string", "number", "boolean"]},
    "description": (
        'Frontmatter fields that must equal these values, e.g. {"status": "active"}; case-insensitive, '
        "and a list field matches when any element does."
    ),
}
_TAGS = {"type": "array", "items": {"type": "string", "minLength": 1}, "description": "Tags every page must carry."}
_MIN_RELEVANCE = {
    "type": "number",
    "minimum": 0,
    "maximum": 1,
    "default": 0.5,
    "description": (
        "Drop hits whose calibrated relevance (0-1, comparable across queries) is below this. 0.5 separates "
        "'answers it' from 'nothing here does'; lower it only to see near misses."
    ),
}


# What search and get_context share: which tier, which pages, how relevant.
_NARROWING = {
    "collections": _COLLECTIONS,
    "tier": _TIER,
    "filters": _FILTERS,
    "tags": _TAGS,
    "min_relevance": _MIN_RELEVANCE,
}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


SEARCH_SCHEMA = _schema(
    {
        "query": _QUERY,
        "k": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_K,
            "default": 10,
            "description": "How many pages to return, best first.",
        },
        **_NARROWING,
    },
    ["query"],
)
CONTEXT_SCHEMA = _schema(
    {
        "query": _QUERY,
        "budget": {
            "type": "integer",
            "minimum": MIN_BUDGET,
            "maximum": MAX_BUDGET,
            "default": DEFAULT_BUDGET,
            "description": "Most tokens the returned context may take.",
        },
        "k": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_CONTEXT_K,
            "default": 20,
            "description": "Search hits (chunks) to pack from, best first; the budget decides how many fit.",
        },
        **_NARROWING,
    },
    ["query"],
)
DOCUMENT_SCHEMA = _schema(
    {
        "collection": {"type": "string", "minLength": 1, "description": "The page's collection, as search returns it."},
        "slug": {
            "type": "string",
            "minLength": 1,
            "description": "The page's slug, as search returns it (e.g. guides/setup).",
        },
        "anchor": {
            "type": "string",
            "minLength": 1,
            "description": "Optional: return only this section (a heading anchor from search hits, citations or the page's sections).",
        },
        "tier": _TIER,
    },
    ["collection", "slug"],
)
COLLECTIONS_SCHEMA = _schema(
    {"tier": {**_TIER, "description": "Only this tier. Omit to list every tier this client may read."}},
    [],
)
ASK_SCHEMA = _schema(
    {
        "question": {**_QUERY, "description": "The question, in plain words, as a person would ask it."},
        "tier": _TIER,
        "collections": _COLLECTIONS,
    },
    ["question"],
)


def related_schema(max_k: int, default_k: int) -> dict[str, Any]:
    """The ``related`` tool's arguments (bounds from :mod:`rag_assets.search.related`)."""
    return _schema(
        {
            "note": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
                "description": "The note: collection/slug as search hits give them (e.g. homelab/Proxmox setup), a slug, or its title.",
            },
            "collection": {
                "type": "string",
                "minLength": 1,
                "description": "Optional: look the note up in this vault only.",
            },
            "k": {
                "type": "integer",
                "minimum": 0,
                "maximum": max_k,
                "default": default_k,
                "description": "How many nearest notes by vector to list.",
            },
            "tier": _TIER,
        },
        ["note"],
    )
