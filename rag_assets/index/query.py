"""User text as a lexical query: words, stop words dropped, quoted so FTS5 never reads syntax."""

from __future__ import annotations

from collections import Counter

from rag_assets.base import cjk

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


# Query term frequency. In a long query (at least LONG_QUERY_WORDS words once stop words
# are dropped: a pasted paragraph, not a question) a word said n times is searched
# min(n, MAX_REPEATS) times. FTS5's bm25() scores every OR'd phrase, so a repeated phrase
# weighs its term that many times, as bm25s and Lucene count query term frequency: a
# paragraph's recurring words are its topic. In a short query a repeat is mostly
# structure ("British female students ... British male students"), and counting it lost
# on SciFact's claims, so there every word counts once. Both chosen with
# bench/tune_bm25.py on train splits (see docs/search.md).
MAX_REPEATS = 3
LONG_QUERY_WORDS = 20
# Distinct words searched at most. FTS5 walks every OR'd phrase's doclist for every row any
# of them matches, and the in-memory BM25 gathers every term's postings, so a query of
# thousands of words had no bound. Past this many, the search keeps the words that weigh
# most (repeats times idf; rag_assets.search.bm25_terms.capped_words), in both FTS5 and the
# in-memory BM25, so both rank alike. Chosen with bench/long_query_speed.py on the long-query
# set's train split: the smallest cap whose nDCG@10 did not drop (64 lost 0.0006, 32 0.006);
# it caps 0.4% of those paragraph queries (see docs/search.md).
MAX_QUERY_TERMS = 128


def fts_match_query(text: str) -> str | None:
    """User text as a safe FTS5 query: quoted words joined with OR; None if nothing is left.

    Quotes, ``-``, ``:``, ``*``, ``AND``/``OR``/``NEAR``, parentheses and unbalanced input
    all end up as plain words inside double quotes, which FTS5 never parses as syntax. A
    repeated word is kept once, or in a long query up to :data:`MAX_REPEATS` times, in its
    places.
    """
    words = [w for w in cjk.WORD.findall(text.lower()) if not cjk.has_cjk(w)]
    kept = [w for w in words if w not in STOP_WORDS] or words
    most = MAX_REPEATS if len(kept) >= LONG_QUERY_WORDS else 1
    seen: Counter[str] = Counter()
    searched = []
    for word in kept:
        seen[word] += 1
        if seen[word] <= most:
            searched.append(word)
    return fts_match_of_words(searched)


def fts_match_of_words(words: list[str]) -> str | None:
    """Words (runs of ``\\w``, as :func:`fts_match_query` keeps them) as its FTS5 query."""
    return " OR ".join(f'"{w}"' for w in words) or None
