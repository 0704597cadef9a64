"""User text as a lexical query: words, stop words dropped, quoted so FTS5 never reads syntax."""

from __future__ import annotations

from rag_assets.index import cjk

# English function words (Lucene's list plus NLTK's): they match nearly every chunk, so they
# cost BM25 time and add nothing to its ranking, or worse: the stemmer turns "up" into the
# stem of "UPS", so "set up vlans" would favour a chapter on batteries.
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with how what which who whom why when where do does did doing i me my myself we our "
    "ours you your yours he him his she her hers its itself them theirs am been being have has had having "
    "would should could can about above after again against all any because before below between both down "
    "during each few from further here more most nor off once only other out over own same so some than too "
    "under until up very were while just don now".split()
)


def fts_match_query(text: str) -> str | None:
    """User text as a safe FTS5 query: quoted words joined with OR; None if nothing is left.

    Quotes, ``-``, ``:``, ``*``, ``AND``/``OR``/``NEAR``, parentheses and unbalanced input
    all end up as plain words inside double quotes, which FTS5 never parses as syntax.
    """
    words = [w for w in cjk.WORD.findall(text.lower()) if not cjk.has_cjk(w)]
    kept = [w for w in words if w not in STOP_WORDS] or words
    unique = list(dict.fromkeys(kept))
    return " OR ".join(f'"{w}"' for w in unique) or None
