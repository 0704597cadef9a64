"""Page-level results: one result per document, its matching sections beneath it.

Three chunks of one page used to fill a top 5 and push other pages out. Grouping keeps the
ranking's order of first appearance (a page ranks by its best chunk) and lists, under each
page, its other chunks that made the ranking, best first.
"""

from __future__ import annotations

from collections.abc import Sequence


def group_pages(ranked: Sequence[int], document_of: Sequence[str], pages: int, sections: int) -> list[list[int]]:
    """Rows (best first) -> up to ``pages`` groups of up to ``sections`` rows of one document."""
    groups: dict[str, list[int]] = {}
    for row in ranked:
        doc = document_of[row]
        group = groups.get(doc)
        if group is None:
            if len(groups) >= pages:
                continue  # a page past the last shown one; keep filling the shown pages' sections
            groups[doc] = group = []
        if len(group) < sections:
            group.append(row)
    return list(groups.values())
