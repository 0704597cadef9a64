"""Where the per-collection records live between assets, written so a kill cannot tear them."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field
from upath import UPath

from rag_assets.base.atomic import atomic_open
from rag_assets.defs.staged_records import StagedRecords, load_pickle
from rag_assets.index.record_facts import facts_path, read_facts, write_facts
from rag_assets.records import EmbeddedCollection, RecordFacts

# Input metadata: hand the partitions over as a LazyRecords mapping keeping at most this many
# chunks' records (the value; the input's type is then Any: a dict annotation would make
# Dagster check for a dict).
LAZY = "lazy_records"


class AtomicPickleIOManager(dg.UPathIOManager):
    """One pickle per (asset, partition) under ``base_dir/<asset>/<partition>``.

    Built on Dagster's public ``UPathIOManager`` with three changes:

    - each record is written to a temporary file and renamed: a write in place, killed
      half-way, left a truncated record that every later publish failed to load;
    - a run over a range of partitions hands over ``{partition: record}`` and each record
      goes to its own file (the stock manager refuses multi-partition outputs); records a step
      staged as it made them (rag_assets.defs.staged_records) are renamed into place;
    - partitioned inputs always arrive as ``{partition: record}``, also for one partition
      (the stock manager then passes the bare record), so assets handle one shape.

    A partition missing on disk fails the load, unless the input's metadata says
    ``allow_missing_partitions`` (Dagster's own switch): then it is left out of the dict.
    """

    def __init__(self, base_dir: str) -> None:
        self.base_dir = UPath(base_dir)
        super().__init__(base_path=self.base_dir)

    def dump_to_path(self, context: dg.OutputContext | None, obj: Any, path: UPath) -> None:
        # Pickled straight into the file: a large partition's pickle is hundreds of megabytes.
        target = Path(str(path))
        # Facts of an earlier record must not outlive it (a kill between the two writes).
        facts_path(target).unlink(missing_ok=True)
        with atomic_open(target) as handle:
            pickle.dump(obj, handle, pickle.HIGHEST_PROTOCOL)
        if isinstance(obj, EmbeddedCollection):
            write_facts(obj, target)

    def load_from_path(self, context: dg.InputContext | None, path: UPath) -> Any:
        return load_pickle(Path(str(path)))

    def partition_path(self, context: dg.InputContext | dg.OutputContext, partition: str) -> UPath:
        return self.get_path_for_partition(context, self.base_dir.joinpath(*context.asset_key.path), partition)

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        if not context.has_asset_partitions:
            super().handle_output(context, obj)
            return
        if not isinstance(obj, Mapping) or set(obj) != set(context.asset_partition_keys):
            raise TypeError(
                f"{context.asset_key.to_user_string()} must return {{partition: record}} for exactly the "
                f"partitions of the run ({', '.join(context.asset_partition_keys)})"
            )
        if isinstance(obj, StagedRecords):
            try:
                for key in context.asset_partition_keys:
                    self.commit_staged(obj, key, Path(str(self.partition_path(context, key))))
            finally:
                obj.discard()  # what a failure left staged (nothing once all are in place)
            return
        for key in context.asset_partition_keys:
            self.dump_to_path(context, obj[key], self.partition_path(context, key))

    def commit_staged(self, records: StagedRecords, key: str, target: Path) -> None:
        """A record the step pickled already (see StagedRecords): renamed into place, with its
        facts written after it, as dump_to_path does."""
        facts_path(target).unlink(missing_ok=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        records.commit(key, target)
        facts = records.facts(key)
        if facts is not None:
            write_facts(facts, target)

    def load_partitions(self, context: dg.InputContext) -> Mapping[str, Any]:
        metadata = context.definition_metadata or {}
        if LAZY not in metadata:
            loaded = super().load_partitions(context)
            if len(context.asset_partition_keys) == 1:
                # The stock manager returns the bare record (or None when allowed to be missing).
                return {} if loaded is None else {context.asset_partition_keys[0]: loaded}
            return loaded
        allow_missing = bool(metadata.get("allow_missing_partitions", False))
        paths = {}
        for key in context.asset_partition_keys:
            path = self.partition_path(context, key)
            if path.exists():
                paths[key] = path
            elif allow_missing:
                context.log.warning(self.get_missing_partition_log_message(key))
            else:
                raise FileNotFoundError(f"no record of partition {key} at {path}")
        return LazyRecords(self, paths, keep_chunks=int(metadata[LAZY]))


class LazyRecords(Mapping[str, Any]):
    """``{partition: record}`` whose records are unpickled when looked up. Records are kept for
    the next lookup while the kept ones hold at most ``keep_chunks`` chunks in all (0: none is
    kept, as a step that looks each partition up once needs); beyond, a record is not kept, so
    the caller holds it for as long as it needs it (the publish step: one collection at a time,
    see rag_assets.records.RecordSequence)."""

    def __init__(self, manager: AtomicPickleIOManager, paths: dict[str, UPath], keep_chunks: int = 0) -> None:
        self._manager = manager
        self._paths = paths
        self._keep_chunks = keep_chunks
        self._kept: dict[str, Any] = {}
        self._kept_chunks = 0

    def __getitem__(self, key: str) -> Any:
        if key in self._kept:
            return self._kept[key]
        record = self._manager.load_from_path(None, self._paths[key])
        chunks = len(getattr(record, "chunks", ()))
        if self._keep_chunks and self._kept_chunks + chunks <= self._keep_chunks:
            self._kept[key] = record
            self._kept_chunks += chunks
        return record

    def facts(self, key: str) -> RecordFacts | None:
        """The partition's record's facts, read without unpickling it (None: load the record)."""
        return read_facts(Path(str(self._paths[key])))

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)


def load_record(base_dir: Path, asset: str, partition: str) -> Any:
    """One partition's record as the IO manager stored it, for a reader outside the run."""
    return AtomicPickleIOManager(base_dir=str(base_dir)).load_from_path(None, UPath(base_dir) / asset / partition)


class AtomicFilesystemIOManager(dg.ConfigurableIOManagerFactory):
    """Pickled intermediate records (parsed, chunked, embedded collections) under ``base_dir``."""

    base_dir: str = Field(description="Folder for the records; rag.yaml puts it in <output>/data/intermediate.")

    def create_io_manager(self, context: dg.InitResourceContext) -> AtomicPickleIOManager:
        return AtomicPickleIOManager(base_dir=self.base_dir)
