"""Search: from a question to ranked, cited passages.

Hybrid retrieval over a store (vectors and BM25, fused), in-memory BM25, context packing
under a token budget, and the search log.
"""
