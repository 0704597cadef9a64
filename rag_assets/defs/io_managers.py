"""Where the per-collection records live between assets, written so a kill cannot tear them."""

import gc
import pickle
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.storage.fs_io_manager import PickledObjectFilesystemIOManager
from pydantic import Field

from rag_assets.index.atomic import atomic_write_bytes


class _AtomicPickleIOManager(PickledObjectFilesystemIOManager):
    """Dagster's filesystem pickle IO manager, but each record is written to a temporary
    file and renamed: the stock one writes in place, and a build killed mid-write left a
    truncated record that every later publish failed to load."""

    def dump_to_path(self, context: dg.OutputContext, obj: Any, path: Any) -> None:
        atomic_write_bytes(Path(str(path)), pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))

    def load_from_path(self, context: dg.InputContext, path: Any) -> Any:
        # Unpickling tens of thousands of chunk records triggers the cyclic garbage collector
        # over and over although they hold no cycles; pausing it makes loads ~3x faster.
        payload = Path(str(path)).read_bytes()
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return pickle.loads(payload)
        finally:
            if was_enabled:
                gc.enable()


class AtomicFilesystemIOManager(dg.ConfigurableIOManagerFactory):
    """Pickled intermediate records (parsed, chunked, embedded collections) under ``base_dir``."""

    base_dir: str = Field(description="Folder for the records; rag.yaml puts it in <output>/data/intermediate.")

    def create_io_manager(self, context: dg.InitResourceContext) -> _AtomicPickleIOManager:
        return _AtomicPickleIOManager(base_dir=self.base_dir)


class _EveryCollectionLoader(_AtomicPickleIOManager):
    """Loads the fan-in input of publishing: every collection's record as one dict.

    Unlike the stock loader it always returns a dict (also for a single collection), and a
    collection not indexed yet (a folder added since the last build) is left out with a
    warning instead of failing the publish.
    """

    def load_partitions(self, context: dg.InputContext) -> dict[str, Any]:
        records: dict[str, Any] = {}
        paths = self._get_paths_for_partitions(context)
        for key in context.asset_partition_keys:
            path = paths[key]
            try:
                records[key] = self.load_from_path(context, path)
            except FileNotFoundError:
                context.log.warning(f"collection {key!r} has not been indexed yet; it is left out of this publish")
        return records


class EveryCollectionInputManager(dg.ConfigurableIOManagerFactory):
    """Input manager for the publish step (see ``_EveryCollectionLoader``)."""

    base_dir: str = Field(description="The folder the intermediate records are written to.")

    def create_io_manager(self, context: dg.InitResourceContext) -> _EveryCollectionLoader:
        return _EveryCollectionLoader(base_dir=self.base_dir)
