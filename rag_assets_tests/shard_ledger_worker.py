"""The child process of test_shards.test_concurrent_shard_runs_keep_every_ledger_entry.

A module of its own, importing only the config and the ledger: a ``spawn`` child imports the
module its target lives in, and the test module's imports (Dagster, the pipeline, pytest's
plugins) cost each of the four children about three CPU seconds, against half a second here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rag_assets.config import RagConfig
from rag_assets.index.freshness import record_indexed_partitions


def record_partitions(output: str, content: str, keys: list[str], shards: int) -> None:
    """One shard run's ledger updates, one partition at a time: each first as pending, then done."""
    cfg = dataclasses.replace(
        RagConfig(content_dir=Path(content), output_dir=Path(output)), collection_shards={"docs": shards}
    )
    for key in keys:
        record_indexed_partitions(cfg, {key: "pending"})
        record_indexed_partitions(cfg, {key: f"hash-of-{key}"})
