"""Running a partitioned asset over every partition of its run, one partition at a time.

A build is one Dagster run over a range of partitions (``BackfillPolicy.single_run``),
so each asset step receives ``context.partition_keys`` and handles them in turn. Each
partition still gets its own materialisation with its own metadata in the UI.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import dagster as dg

from rag_assets.base.gc_passes import fewer_gc_passes
from rag_assets.defs.outcomes import failed_partitions_metadata
from rag_assets.defs.staged_records import StagedRecords

T = TypeVar("T")

# Every partitioned asset handles its run's whole range in one step; a backfill launched
# from the UI then is one run too, instead of one run per partition.
SINGLE_RUN = dg.BackfillPolicy.single_run()
# `backfill_policy` is a beta parameter of @dg.asset; its warning would be printed by every
# `rag` command that loads the definitions, to users who cannot act on it.
warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy`", category=dg.BetaWarning)


def for_each_partition(
    context: dg.AssetExecutionContext,
    kind: str,
    work: Callable[[str], tuple[T, dict[str, Any]]],
    describe: Callable[[T], str] | None = None,
    header: str = "",
    *,
    records_dir: Path,
    keep: Callable[[T], Any] | None = None,
) -> StagedRecords:
    """``{partition: value}`` of ``work(partition)`` over the run's partitions.

    ``work`` returns (value, metadata); the metadata (plus the partition's ``seconds``) goes
    to that partition's materialisation. The first failure stops the step with a
    ``dg.Failure`` naming the partition, so nothing of the run is published. ``describe``
    gives each partition's part of one summary line logged at the end, after ``header`` (e.g.
    the embedder chosen): one log event per step rather than per partition, as every event
    costs a disk sync in a persistent instance. A failure logs the line of the partitions done.

    Each value is pickled to a staged file under ``records_dir`` (the IO manager's base folder)
    as soon as it is made and not held: a :class:`~rag_assets.defs.staged_records.StagedRecords`,
    keeping ``keep(value)`` of each, so the step's memory is one partition's, not the run's.
    """
    # One partition (an edit's run): its record goes on to the next step in memory, not unpickled.
    hand_off = len(context.partition_keys) == 1
    staged = StagedRecords(records_dir.joinpath(*context.asset_key.path), keep, hand_off=hand_off)
    described: list[str] = []
    try:
        for key in context.partition_keys:
            started = time.perf_counter()
            try:
                with fewer_gc_passes():  # a run launched from the UI: see rag_assets/base/gc_passes.py
                    value, metadata = work(key)
            except Exception as error:
                why = f"{type(error).__name__}: {error}"
                raise dg.Failure(
                    description=f"{kind} {key}: {why}", metadata=failed_partitions_metadata({key: why})
                ) from error
            context.add_asset_metadata(
                {**metadata, "seconds": round(time.perf_counter() - started, 3)}, partition_key=key
            )
            if describe:
                described.append(f"[{key}] {describe(value)}")
            staged.add(key, value)
            del value  # on disk now: the next partition's record is made without it
    except BaseException:
        staged.discard()
        raise
    finally:
        parts = ([header] if header else []) + described
        if parts:
            context.log.info("; ".join(parts))
    return staged


def throttled(log: Callable[[str], None], interval: float = 2.0) -> Callable[[str], None]:
    """``log``, passing at most one progress line per ``interval`` seconds (failures always),
    the first one ``interval`` after this call: a fast embedder finishes a batch every few
    milliseconds, and each line is a stored event; a step done within ``interval`` needs no
    progress line beside its summary."""
    last = [time.monotonic()]

    def emit(message: str) -> None:
        now = time.monotonic()
        if "FAILED" in message or now - last[0] >= interval:
            last[0] = now
            log(message)

    return emit
