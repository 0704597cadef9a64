"""Ingest: from folders of Markdown to chunks.

Walking collections and vaults inside their boundaries, hashing, parsing frontmatter and
Markdown into documents, heading-aware chunking, and the cache of parsed documents.
"""
