"""Index: what a build writes and how readers trust it.

The SQLite stores, the public JSON index and manifest, publishing by generations, the
integrity and consistency checks, and change detection against the last publish; and what
the store and the browser's BM25 file share with search (parameters, query text, postings,
field weights, profiles); and each tier's log file beside its store (search, answer and
admin logs).
"""
