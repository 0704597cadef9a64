"""rag-assets: keep a retrieval (RAG) index of Markdown content fresh, as Dagster assets.

The core is laid out by stage (config, ingest, embed, index, privacy, search, serve,
evaluation) and imports no Dagster; ``defs/`` is the thin Dagster layer over it.
"""
