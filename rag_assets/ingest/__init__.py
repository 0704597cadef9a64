"""Ingest: from folders of Markdown to chunks.

Walking collections and vaults inside their boundaries, hashing, parsing frontmatter and
Markdown into documents (vault notes with Obsidian's syntax read), heading-aware chunking, and the cache of parsed documents.
"""
