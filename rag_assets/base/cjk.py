"""Text without spaces (Chinese, Japanese, Korean) for lexical search.

FTS5's ``unicode61`` tokenizer turns a run of CJK characters into one token, so a
query for a word inside that run finds nothing. Chunks that contain CJK text are
therefore also indexed in a second FTS5 table as character unigrams and bigrams
(the standard n-gram approach for CJK retrieval); a CJK query word becomes a phrase
of its bigrams there (a substring match), a single character a unigram.
"""

from __future__ import annotations

import re

WORD = re.compile(r"\w+", re.UNICODE)
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def has_cjk(text: str) -> bool:
    return CJK.search(text) is not None


def bigrams(word: str) -> list[str]:
    return [word[i : i + 2] for i in range(len(word) - 1)]


def index_columns(text: str) -> tuple[str, str] | None:
    """(unigrams, bigrams) of the CJK words of a text, space-separated; None without CJK."""
    if not has_cjk(text):
        return None
    unigrams: list[str] = []
    pairs: list[str] = []
    for word in WORD.findall(text.lower()):
        if has_cjk(word):
            unigrams.extend(word)
            pairs.extend(bigrams(word))
    return " ".join(unigrams), " ".join(pairs)


def fts_query(text: str) -> str | None:
    """An FTS5 query for the CJK words of a query (OR between words), or None."""
    parts = []
    for word in WORD.findall(text.lower()):
        if not has_cjk(word):
            continue
        if len(word) == 1:
            parts.append(f'uni : "{word}"')
        else:
            parts.append('bi : "' + " ".join(bigrams(word)) + '"')
    return " OR ".join(parts) or None
