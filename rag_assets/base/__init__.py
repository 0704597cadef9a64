"""Base: the low-level pieces several stages share, below every stage and above config only.

Atomic file writes (:mod:`.atomic`), file locks (:mod:`.file_lock`), the SQLite cache helper
(:mod:`.sqlite_cache`), CJK word splitting (:mod:`.cjk`), the HTTP retry policy
(:mod:`.http_retry`), the egress guard with the only HTTP client that may carry private
text (:mod:`.egress`), the BLAS thread limit of the code that searches many times (:mod:`.blas`), and fewer
garbage-collector passes while a build runs (:mod:`.gc_passes`). Nothing here imports a stage; the layers contract in pyproject.toml
(``lint-imports``) keeps it so.
"""
