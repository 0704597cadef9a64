"""What a run did, read from Dagster's results as typed records: outcomes for the CLI.

A build (defs/runner.py) and a distributed build (defs/distributed.py) both learn what
happened from the run's result object alone, through Dagster's public result API: the step
failures (``get_step_failure_events``), the materialisations with their partition
(``get_asset_materialization_events``) and the asset checks (``get_asset_check_evaluations``).
Metadata values are read as the typed values the assets wrote; the partitions a failed step
names travel as one JSON metadata value (:data:`FAILED_PARTITIONS`), never as text to split.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from rag_assets.defs.jobs import COLLECTION_ASSETS
from rag_assets.defs.staged_records import StagedRecords
from rag_assets.records import SkippedFile

# Metadata key of a step failure's JSON value {partition: its error}; the assets that handle
# a range of partitions set it on the dg.Failure they raise (defs/ranges.py, defs/tiers.py).
FAILED_PARTITIONS = "failed_partitions"

# execute_in_process gives the first, execute_job (the distributed runs) the second.
RunResult = dg.ExecuteInProcessResult | dg.JobExecutionResult


def failed_partitions_metadata(errors: dict[str, str]) -> dict[str, dg.MetadataValue]:
    """The metadata of a ``dg.Failure`` that names the failed partitions, each with its error."""
    return {FAILED_PARTITIONS: dg.MetadataValue.json(dict(errors))}


@dataclass
class CollectionOutcome:
    collection: str  # the partition: a collection, or one shard of one (docs~0)
    success: bool
    seconds: float
    metadata: dict[str, dict[str, Any]]  # asset -> metadata values
    skipped: list[SkippedFile] = field(default_factory=list)
    error: str | None = None


@dataclass
class VaultOutcome:
    vault: str
    success: bool
    seconds: float
    metadata: dict[str, dict[str, Any]]  # asset -> metadata values (counts only, never note text)
    error: str | None = None


@dataclass
class BuildOutcome:
    collections: list[CollectionOutcome]
    publish_metadata: dict[str, dict[str, Any]]
    failed_checks: list[str]  # checks of severity ERROR: the build failed
    error: str | None
    seconds: float
    warnings: list[str] = field(default_factory=list)  # checks of severity WARN
    vaults: list[VaultOutcome] = field(default_factory=list)
    tier_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return (
            self.error is None
            and all(c.success for c in self.collections)
            and all(v.success for v in self.vaults)
            and not self.failed_checks
        )


@dataclass(frozen=True)
class StepFailure:
    """One failed step: what the user is told, and the partitions it names with their errors."""

    step_key: str
    message: str  # a dg.Failure's description (it names the partition), else the root cause
    partitions: dict[str, str] | None  # {partition: its error}, when the step names them


def step_failures(result: RunResult) -> list[StepFailure]:
    """The run's failed steps, in order."""
    failures = []
    for event in result.get_step_failure_events():
        data = event.step_failure_data
        user = data.user_failure_data
        named = user.metadata.get(FAILED_PARTITIONS) if user is not None else None
        # failure_metadata writes a JSON object; anything else names no partitions
        partitions = (
            dict(named.value) if isinstance(named, dg.JsonMetadataValue) and isinstance(named.value, Mapping) else None
        )
        if user is not None and user.description:
            message = user.description
        else:
            error = data.error
            while error is not None and error.cause is not None:
                error = error.cause
            message = f"step {event.step_key}: {error.message.strip() if error else 'unknown error'}"
        failures.append(StepFailure(str(event.step_key), message, partitions))
    return failures


def failure_message(result: RunResult) -> str:
    """The user-facing error of a failed run, without the traceback: its steps' messages."""
    return "; ".join(f.message for f in step_failures(result)) or "the run failed (see the Dagster logs)"


def failed_partitions(result: RunResult) -> dict[str, str] | None:
    """{partition: its error} of every partition a failed run names, or None if it names none."""
    named: dict[str, str] | None = None
    for failure in step_failures(result):
        if failure.partitions is not None:
            named = {**(named or {}), **failure.partitions}
    return named


def check_outcomes(result: RunResult) -> tuple[list[str], list[str]]:
    """(failed ERROR checks, failed WARN checks) of a run, one line each."""
    failed = [c for c in result.get_asset_check_evaluations() if not c.passed]
    errors = [describe_check(c) for c in failed if c.severity == dg.AssetCheckSeverity.ERROR]
    return errors, [describe_check(c) for c in failed if c.severity != dg.AssetCheckSeverity.ERROR]


def describe_check(evaluation: dg.AssetCheckEvaluation) -> str:
    """A check result in one line: its problems, or its short metadata values."""
    values = plain_values(evaluation.metadata)
    if values.get("problems"):
        detail = str(values["problems"]).replace("\n", " ")
    else:
        detail = ", ".join(f"{k}={v}" for k, v in values.items() if len(str(v)) <= 80 and "\n" not in str(v))
    return f"{evaluation.check_name}: {detail}"


def plain_values(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """{key: the plain value} of typed metadata (a JSON value's data, a number, a text)."""
    return {k: v.value if isinstance(v, dg.MetadataValue) else v for k, v in metadata.items()}


def produced(result: RunResult, node: str) -> bool:
    """Whether ``node`` produced its output in this run."""
    return any(e.is_successful_output and e.node_name == node for e in result.all_node_events)


def materializations(result: RunResult) -> Iterator[tuple[str, str | None, dict[str, Any]]]:
    """(asset, partition or None, its metadata's plain values) of each materialisation of a run."""
    for event in result.get_asset_materialization_events():
        key = event.asset_key
        assert key is not None  # a materialisation always has its asset's key
        yield key.to_user_string(), event.partition, plain_values(event.materialization.metadata)


def partition_metadata(result: RunResult) -> dict[str, dict[str, dict[str, Any]]]:
    """Partition -> asset name -> {metadata key: plain value} for a run's partitioned materialisations."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for asset, partition, values in materializations(result):
        if partition is not None:
            out.setdefault(partition, {})[asset] = values
    return out


def unpartitioned_metadata(result: RunResult) -> dict[str, dict[str, Any]]:
    """Asset name -> {metadata key: plain value} for a run's unpartitioned materialisations."""
    return {asset: values for asset, partition, values in materializations(result) if partition is None}


def skipped_files(result: RunResult) -> dict[str, list[SkippedFile]]:
    """The files each partition's parse skipped, as the parse step kept them in its output
    (rag_assets.defs.staged_records.StagedRecords.kept), without unpickling its records."""
    if not produced(result, "parsed_documents"):
        return {}
    parsed: StagedRecords = result.output_for_node("parsed_documents")
    return {key: list(parsed.kept(key) or []) for key in parsed}


def collection_outcomes(
    result: RunResult, keys: Sequence[str], skipped: Mapping[str, list[SkippedFile]], t0: float
) -> list[CollectionOutcome]:
    """Each collection of a run over ``keys``: built, failed, or (stopped by another's failure) left out.

    ``skipped``: the files each partition's parse skipped ({partition: [SkippedFile]})."""
    by_partition = partition_metadata(result)
    named = failed_partitions(result)
    error = failure_message(result) if not result.success else ""
    outcomes: list[CollectionOutcome] = []
    for key in keys:
        metadata = by_partition.get(key, {})
        done = set(COLLECTION_ASSETS) <= set(metadata)
        if not done and named is not None and key not in named:
            continue  # stopped by another collection's failure: neither built nor failed
        outcomes.append(
            CollectionOutcome(
                collection=key,
                success=done,
                # A range runs in one step per asset: a partition's time is the sum of its shares.
                seconds=sum(m.get("seconds", 0.0) for m in metadata.values()) if done else time.perf_counter() - t0,
                metadata=metadata,
                skipped=list(skipped.get(key, [])),
                error=None if done else error,
            )
        )
    return outcomes
