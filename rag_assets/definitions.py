"""Dagster entry point: the code location that ``dagster dev`` loads (workspace.yaml).

``defs`` is lazy (``@dg.definitions``): importing this module reads no configuration; Dagster
calls ``defs`` when it loads the code location, and only then is ``rag.yaml`` read, from
``$RAG_CONFIG`` or else ``./rag.yaml`` (as for `rag`). The CLI and the tests never go through
here: they build the definitions from the configuration they loaded
(:func:`rag_assets.defs.assembly.build_definitions`).
"""

from __future__ import annotations

import dagster as dg

from rag_assets.config import load_config
from rag_assets.defs.assembly import build_definitions


@dg.definitions
def defs() -> dg.Definitions:
    """The project's definitions for the configuration Dagster's process finds ($RAG_CONFIG or ./rag.yaml)."""
    return build_definitions(load_config())
