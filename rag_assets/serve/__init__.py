"""Serve: the ways people and programs reach the index.

The ``rag`` command line and the HTTP API of ``rag serve``.
"""
