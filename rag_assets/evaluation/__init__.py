"""Evaluation: retrieval quality measured on public benchmarks.

BEIR datasets, metrics (nDCG, recall, MRR) and the evaluation runner behind ``rag eval``.
"""
