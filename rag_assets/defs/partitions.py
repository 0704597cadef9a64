"""One partition per content collection, so each collection rebuilds on its own."""

from __future__ import annotations

from typing import Sequence

import dagster as dg


def collection_partitions(collections: Sequence[str]) -> dg.StaticPartitionsDefinition:
    """Static partitions from the collections discovered in the config at load time."""
    return dg.StaticPartitionsDefinition(list(collections))
