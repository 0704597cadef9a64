"""Privacy: what may leave the machine, and in what form.

Secret rules and the identity map, the Safe-tier sanitiser, the Private tier's local-only
rule and egress guard, the leak audit, and building note vaults into the tier stores.
"""
