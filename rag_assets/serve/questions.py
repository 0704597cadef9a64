"""Questions on the Safe tier are sanitised before anything else sees them.

A Safe-tier question is text the user typed about sanitised notes, and it can hold what the
notes had redacted: a password pasted in, a hostname. Before it reaches the query embedder,
a reranker, the chat model (the question and a follow-up's rewrite), the ``search_log``,
the ``answer_log`` or a session's history, it goes through the same :class:`Sanitizer` the
build applies to Safe notes (secrets become ``[REDACTED:<kind>]``, the identity map's values
their placeholders), so the question matches the notes' placeholders too. The Private tier's
questions stay local and raw (its notes are raw); the Public tier's as they are.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from rag_assets.config import RagConfig

if TYPE_CHECKING:
    from rag_assets.privacy.sanitize import Sanitizer

SANITISED_TIERS = ("safe",)


def tier_sanitizer(cfg: RagConfig) -> Sanitizer:
    """The Safe tier's sanitiser, as the build makes it (the configured identity map; secret
    detection alone when there is none)."""
    from rag_assets.privacy.sanitize import Sanitizer  # the secret detector: only for a Safe-tier question

    path = cfg.identity_map_path
    return Sanitizer.from_file(path if path is not None and path.is_file() else None)


class TierQuestions:
    """``questions(tier, text)``: ``text`` as it may leave the caller for ``tier``. The sanitiser
    is made on first Safe-tier use and kept (a server answers many questions)."""

    def __init__(self, cfg: RagConfig) -> None:
        self.cfg = cfg
        self._sanitizer: Sanitizer | None = None
        self._lock = threading.Lock()

    def __call__(self, tier: str, text: str) -> str:
        if tier not in SANITISED_TIERS:
            return text
        return self.sanitizer().text(text)

    def sanitizer(self) -> Sanitizer:
        if self._sanitizer is None:
            with self._lock:
                if self._sanitizer is None:
                    self._sanitizer = tier_sanitizer(self.cfg)
        return self._sanitizer
