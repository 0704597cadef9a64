"""The MCP tool ``related``: a note's links, backlinks and nearest notes by vector, with reasons.

The tier is opened through :func:`rag_assets.serve.mcp_base.tier_index`, the gate every tool
and HTTP route passes (the Private tier only to this machine, Safe with its scope), as for
``get_document``; on the Safe tier the note's name is sanitised first, as a query is.
"""

from __future__ import annotations

from typing import Any

from rag_assets.search.related import DEFAULT_SIMILAR, MAX_SIMILAR, related_notes
from rag_assets.serve.mcp_base import Caller, ToolEnv, ToolSpec, tier_index
from rag_assets.serve.mcp_schemas import related_schema


def run_related(env: ToolEnv, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
    """The tool's blocking work: open the tier (checked), find the note, list its neighbours."""
    tier = args.get("tier", "public")
    index = tier_index(env, caller, tier)
    note = env.tiers.question(tier, args["note"].strip())
    related = related_notes(index, note, collection=args.get("collection"), k=args.get("k", DEFAULT_SIMILAR))
    return {"tier": tier, **related.to_json()}


RELATED = ToolSpec(
    "related",
    "List a note's neighbours: the notes it links to and the notes linking to it (Obsidian wikilinks, embeds "
    "and Markdown links, resolved within the note's own vault), and the notes nearest to it by vector, each "
    "with the reason it is listed. `unresolved` lists its links that name no note. Name the note by "
    "collection/slug (as search hits give them), a slug, or its title; read one with get_document.",
    related_schema(MAX_SIMILAR, DEFAULT_SIMILAR),
    run_related,
)
