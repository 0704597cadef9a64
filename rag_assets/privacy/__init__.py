"""Privacy: what may leave the machine, and in what form.

Secret rules and the identity map, the Safe-tier sanitiser, the Private tier's local-only
rule, the leak audit, and building note vaults into the tier stores. The egress client that
enforces the local-only rule is :mod:`rag_assets.base.egress`, below the stages that send.
"""
