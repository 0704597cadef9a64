"""Index: what a build writes and how readers trust it.

The SQLite stores, the public JSON index and manifest, publishing by generations, the
integrity and consistency checks, and change detection against the last publish.
"""
