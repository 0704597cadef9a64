"""Which index a tier is searched through: the SQLite store, or the PostgreSQL store.

Every consumer of a tier store (``rag search``/``context``/``ask``, ``rag serve``, MCP,
``rag eval``, ``rag status``) opens it with :func:`open_index`, so the configuration's
``store.backend`` decides for all of them. Both classes share one interface
(:class:`~rag_assets.search.retrieval.SearchIndex`); ``index.path`` is the SQLite file the
search reads (the store itself, or the PostgreSQL store's local mirror), beside which the
search and answer logs are kept (:mod:`rag_assets.index.tier_logs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rag_assets.config import RagConfig
from rag_assets.search.retrieval import SearchIndex

BACKENDS = ("sqlite", "postgres")


def open_index(
    cfg: RagConfig,
    tier: str,
    *,
    backend: str | None = None,
    mixin: type | None = None,
    exact: bool = False,
    **kwargs: Any,
) -> SearchIndex:
    """The tier's search index for ``backend`` (default: the configured one).

    ``mixin``: a class put in front of the index class (``rag serve``'s background search
    log); ``exact``: PostgreSQL only, vector candidates by exact search instead of HNSW;
    other keyword arguments go to :class:`SearchIndex` (``log_searches``, ``lexical``, ``fields``).
    """
    backend = backend or cfg.store.backend
    if backend == "postgres":
        return open_postgres_index(
            cfg.store.url,
            tier,
            mirror_path(cfg.data_dir, tier),
            cfg.collection_weights,
            ef_search=cfg.store.ef_search,
            exact=exact,
            mixin=mixin,
            vector_search=cfg.store.vector_search,
            **kwargs,
        )
    if backend != "sqlite":
        raise ValueError(f"unknown store backend {backend!r}; use one of {', '.join(BACKENDS)}")
    return _with(mixin, SearchIndex)(cfg.store_path(tier), cfg.collection_weights, **kwargs)


def open_postgres_index(
    url: str | None, tier: str, mirror: Path, weights: Any = None, *, mixin: type | None = None, **kwargs: Any
) -> SearchIndex:
    """A :class:`~rag_assets.search.pg_index.PgSearchIndex` over the ``tier`` schema at ``url``."""
    from rag_assets.index.params import SearchError
    from rag_assets.search.pg_index import PgSearchIndex

    if not url:
        raise SearchError("the postgres backend needs a store URL: store.url in rag.yaml or $RAG_STORE_URL")
    return _with(mixin, PgSearchIndex)(mirror, weights, url=url, tier=tier, **kwargs)


def mirror_path(data_dir: Path, tier: str) -> Path:
    """Where a search process keeps its copy of a tier's PostgreSQL store (see pg_mirror)."""
    return data_dir / "postgres-mirror" / f"rag-store-{tier}.db"


def _with(mixin: type | None, base: type) -> type:
    return base if mixin is None else type(f"{mixin.__name__}{base.__name__}", (mixin, base), {})
