"""Reranking: an optional stage that re-scores the best fused candidates with a better judge.

Off unless ``reranker:`` in rag.yaml names one. Providers, behind one interface
(:class:`~rag_assets.search.rerank.base.Reranker`: ``rerank(query, passages) -> scores``):

- ``chat``: an OpenAI-compatible chat model grades each passage 0-10 (:mod:`.chat`);
- ``http``: the common ``/rerank`` API of Cohere, Jina and self-hosted rerankers (:mod:`.http`);
- ``cross_encoder``: a local sentence-transformers CrossEncoder folder (:mod:`.cross_encoder`).

:func:`~rag_assets.search.rerank.selection.select_reranker` picks one for a tier (the
Private tier only a local one); :func:`~rag_assets.search.rerank.stage.search_reranked`
applies it to a search and degrades to the fused order, with the reason, when it fails.
Submodules are imported where used, so importing this package loads no provider.
"""
