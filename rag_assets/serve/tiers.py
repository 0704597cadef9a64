"""The tiers a server answers for: one search index, query embedder and reranker each, made on first use.

Shared by every route that searches (``/search``, ``/context``, ``/ask``, MCP): a tier's
matrix is loaded once and reloads itself when a build changes the store; its query embedder
is replaced when the store's model changes. ``check_tier`` is where every route passes before it
reads a tier: an unknown tier is a 400, the Private tier on a server that does not serve it a
403, and a tier the caller's scopes do not include a 401/403
(:func:`rag_assets.serve.access.check_tier_access`); ``question`` sanitises a Safe-tier
question before any of them sees it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from rag_assets.base.egress import PrivacyError
from rag_assets.config import TIERS, RagConfig
from rag_assets.config.masking import mask_url
from rag_assets.embed.base import Embedder
from rag_assets.embed.errors import EmbeddingError
from rag_assets.index.params import SearchError, SearchResult
from rag_assets.search.backends import open_index
from rag_assets.search.rerank.selection import rerank_stage
from rag_assets.search.rerank.stage import RerankStage
from rag_assets.search.retrieval import SearchIndex, tier_embedder
from rag_assets.serve.access import OWNER, check_tier_access
from rag_assets.serve.questions import TierQuestions

log = logging.getLogger("rag_assets.serve.tiers")


class BadRequest(ValueError):
    """A request the API cannot serve as asked; the message says what to do (HTTP 400)."""


class Refused(Exception):
    """A request the server will not serve (HTTP 403), e.g. the Private tier off loopback."""


class _ServedLog:
    """What a SearchIndex (SQLite or PostgreSQL) gets in a long-running process, put in front of its class.

    - Its search log is written by one background thread, so a search never waits for the
      store's write lock (held for seconds by a build) and concurrent searches do not queue
      on it.
    """

    def __init__(self, *args: Any, log_queue: queue.Queue[Callable[[], None]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._log_queue = log_queue

    def _log(self, result: SearchResult) -> None:
        if self._log_queue is None:
            super()._log(result)  # type: ignore[misc]  # a mixin: the SearchIndex after it in the MRO
        else:
            self._log_queue.put(lambda: super(_ServedLog, self)._log(result))  # type: ignore[misc]  # as above


class ServedIndex(_ServedLog, SearchIndex):
    """The SQLite form of a served index (``bench/search.py`` times it as ``rag serve`` runs it)."""


class _SearchLogWriter:
    """One daemon thread that writes search-log rows, in the order searches finished."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=10_000)
        self._thread = threading.Thread(target=self._run, name="rag-search-log", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            try:
                job()
            except Exception:  # a log row must never take the server down
                log.warning("could not write a search-log row", exc_info=True)

    def put(self, job: Callable[[], None]) -> None:
        try:
            self.queue.put_nowait(job)
        except queue.Full:  # the store is locked for long: drop rows rather than memory
            log.warning("search log backlog full; a search was not logged")

    def close(self, timeout: float = 5.0) -> None:
        self.queue.put(None)
        self._thread.join(timeout)


class Tiers:
    """The searchable tiers: one index and one query embedder each, made on first use."""

    def __init__(self, cfg: RagConfig, *, serve_private: bool = True, log_searches: bool = True) -> None:
        self.cfg = cfg
        self.serve_private = serve_private
        self._log_writer = _SearchLogWriter() if log_searches else None
        self._log_searches = log_searches
        self._indexes: dict[str, SearchIndex] = {}
        self._embedders: dict[str, tuple[tuple, Embedder]] = {}
        self._stages: dict[str, RerankStage] = {}
        self._lock = threading.Lock()
        self._questions = TierQuestions(cfg)

    def question(self, tier: str, text: str) -> str:
        """``text`` as it may be searched, embedded, sent and logged for ``tier``: sanitised on
        the Safe tier (:mod:`rag_assets.serve.questions`)."""
        return self._questions(tier, text)

    def check_tier(self, tier: str, who: Any) -> None:
        """Refuse what ``who`` (a request, its ASGI scope or AuthCredentials) may not read."""
        if tier not in TIERS:
            raise BadRequest(f"unknown tier {tier!r}; use one of {', '.join(TIERS)}")
        if tier == "private" and not self.serve_private:
            raise Refused(
                "the private tier is not served on a non-loopback address; query it on a server bound to "
                "127.0.0.1 (the default), or start the server with allow_private_remote"
            )
        check_tier_access(who, tier)

    def index(self, tier: str, who: Any) -> SearchIndex:
        """The tier's index, once ``who`` may read it (``check_tier``)."""
        self.check_tier(tier, who)
        index = self._indexes.get(tier)
        if index is None:
            with self._lock:
                index = self._indexes.get(tier)
                if index is None:
                    index = open_index(
                        self.cfg,
                        tier,
                        mixin=_ServedLog,
                        log_searches=self._log_searches,
                        log_queue=self._log_writer,
                        lexical="auto",
                    )
                    self._indexes[tier] = index
        if not index.exists():
            where = "in PostgreSQL" if self.cfg.store.postgres else f"at {index.path}"
            raise BadRequest(f"the {tier} tier has no store yet (expected {where}); build it with `rag build`")
        return index

    def embedder(self, tier: str, index: SearchIndex) -> Embedder:
        """The tier's query embedder, rebuilt when a rebuild changed the store's model."""
        data = index.loaded()
        key = (data.provider, data.model, data.dimension)
        cached = self._embedders.get(tier)
        if cached is not None and cached[0] == key:
            return cached[1]
        with self._lock:
            cached = self._embedders.get(tier)
            if cached is None or cached[0] != key:
                cached = (key, tier_embedder(self.cfg, tier, index))
                self._embedders[tier] = cached
            return cached[1]

    def query_embedder_status(self, tier: str) -> dict[str, Any]:
        """The embedder that embeds ``tier``'s queries (the one ``/search`` uses: the provider and
        model that built the store), for ``/status``: whether it is ready, and if not why."""
        out: dict[str, Any] = {"provider": None, "model": None, "dimension": None}
        try:
            index = self.index(tier, OWNER)  # /status strips a tier its caller may not read
            data = index.loaded()
            out.update(provider=data.provider, model=data.model, dimension=data.dimension)
            embedder = self.embedder(tier, index)
        except (BadRequest, EmbeddingError, PrivacyError, SearchError) as exc:
            return out | {"ready": False, "reason": mask_url(str(exc))}
        return out | {
            "provider": getattr(embedder, "provider", None) or data.provider,
            "model": embedder.model,
            "ready": True,
            "reason": f"the store's own model, {data.model}",
        }

    def rerank_stage(self, tier: str, requested: bool | None) -> RerankStage | None:
        """The tier's reranking stage, made once (a cross-encoder once for every tier);
        Refused when it would send Private-tier passages off the machine."""
        if requested is False or not self.cfg.reranker.enabled:
            return rerank_stage(self.cfg, tier, requested)  # None, or the error for rerank=true
        key = "local" if self.cfg.reranker.name == "cross_encoder" else tier
        stage = self._stages.get(key)
        if stage is None:
            with self._lock:
                stage = self._stages.get(key)
                if stage is None:
                    try:
                        stage = rerank_stage(self.cfg, tier, requested)
                    except PrivacyError as exc:
                        raise Refused(str(exc)) from None
                    if stage is not None:
                        self._stages[key] = stage
        return stage

    def preload(self) -> None:
        """Load the matrices of the stores that exist, so the first search is not the slow one."""
        for tier in TIERS:
            if tier == "private" and not self.serve_private:
                continue
            if not self.cfg.store.postgres and not self.cfg.store_path(tier).is_file():
                continue
            try:
                self.index(tier, OWNER).loaded()
            except Exception:
                log.warning("could not preload the %s tier", tier, exc_info=True)

    def loaded_summary(self) -> dict[str, Any]:
        out = {}
        for tier, index in list(self._indexes.items()):
            current = index._loaded
            if current is not None:
                out[tier] = {"chunksInMemory": int(len(current.rowids)), "model": current.model}
        return out

    def close(self) -> None:
        if self._log_writer is not None:
            self._log_writer.close()
        for stage in self._stages.values():
            stage.reranker.close()
