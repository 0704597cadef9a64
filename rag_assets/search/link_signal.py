"""The link-graph signal in ranking: the notes the best hit links to, or that link to it, gain.

A question's best hit is usually the note about its subject; the notes it links to (and those
linking to it) are, in a vault, the ones its author thought belong with it. So each candidate
chunk of such a note has the odds of its calibrated relevance multiplied by
``SearchParams.link_boost`` (:func:`rag_assets.search.relevance.weighted`, as a collection's
priority weight works): a small nudge that reorders close calls and never lifts a chunk with
no relevance of its own. Site pages have no stored links, so public searches are unchanged.

Off by default (``link_boost`` 1.0): measured by ``bench/link_signal.py`` on 32 questions over
a fixture vault of 17 linked notes (``eval/vaults/link-signal``), hit@5 is 1.000 with and without
it (hashing and local embedders, hybrid and BM25); at 1.25 hit@1 gains two questions in the
hashing embedder's hybrid search and nothing elsewhere, and at 1.5 or more it loses questions
in every setting. So it stays a setting to measure on other vaults, not a default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rag_assets.search.relevance import weighted


def linked_notes(links_json: str | None, backlinks_json: str | None) -> frozenset[str]:
    """The ids of the notes a note links to (resolved to a note) and of those linking to it,
    from its stored ``links`` and ``backlinks`` (NULL: none)."""
    out = {link.get("to") for link in json.loads(links_json or "[]") if link.get("status") == "note"}
    back = {link.get("from") for link in json.loads(backlinks_json or "[]")}
    return frozenset(x for x in out | back if isinstance(x, str))


def boost_linked(
    relevance: Mapping[int, float],
    document_ids: Sequence[str],
    documents: Mapping[str, Mapping[str, Any]],
    factor: float,
) -> dict[int, float]:
    """``relevance`` (row -> calibrated relevance) with the chunks of the notes linked with the
    best hit's note boosted by ``factor`` on their odds; unchanged at factor 1 or without links."""
    if factor == 1.0 or not relevance:
        return dict(relevance)
    best = max(relevance, key=lambda row: (relevance[row], -row))
    best_doc = document_ids[best]
    linked = documents.get(best_doc, {}).get("linked", frozenset())
    if not linked:
        return dict(relevance)
    return {
        row: weighted(p, factor) if document_ids[row] in linked and document_ids[row] != best_doc else p
        for row, p in relevance.items()
    }
