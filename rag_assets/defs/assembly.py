"""All of the project's Dagster definitions for one configuration, built by a function of it.

The collection partitions come from the content folder named in ``rag.yaml``, so the
definitions depend on the configuration: every entry point (the code location in
rag_assets/definitions.py, `rag build`, the Celery and Kubernetes jobs, the tests) loads its
configuration once and hands it to :func:`build_definitions`.
"""

from __future__ import annotations

import contextvars

import dagster as dg

from rag_assets.config import RagConfig
from rag_assets.defs.checks import (
    embedding_service,
    index_matches_content,
    index_recent,
    outputs_consistent,
)
from rag_assets.defs.content import build_content_assets
from rag_assets.defs.embeddings import build_embedding_assets
from rag_assets.defs.evaluation import EVAL_ASSETS, EVAL_CHECKS, EvalSettings
from rag_assets.defs.io_managers import AtomicFilesystemIOManager
from rag_assets.defs.jobs import ALL_JOBS
from rag_assets.defs.partitions import collection_partitions
from rag_assets.defs.publish import publish
from rag_assets.defs.resources import RagSettings
from rag_assets.defs.schedules import (
    build_nightly_schedule,
    build_nightly_vault_schedules,
)
from rag_assets.defs.sensors import build_change_sensor, build_vault_sensor
from rag_assets.defs.tiers import TIER_ASSETS, TIER_CHECKS
from rag_assets.planning import chunking_code_version, settings_code_version


def build_definitions(cfg: RagConfig) -> dg.Definitions:
    """All assets, checks, jobs and resources for one configuration."""
    partitions = collection_partitions
    return dg.Definitions(
        assets=[
            *build_content_assets(partitions, chunking_code_version(cfg)),
            *build_embedding_assets(partitions, settings_code_version(cfg)),
            publish,
            *TIER_ASSETS,
            *EVAL_ASSETS,
        ],
        asset_checks=[
            outputs_consistent,
            embedding_service,
            index_matches_content,
            index_recent,
            *TIER_CHECKS,
            *EVAL_CHECKS,
        ],
        jobs=ALL_JOBS,
        sensors=[build_change_sensor(cfg), build_vault_sensor(cfg)],
        schedules=[build_nightly_schedule(cfg), *build_nightly_vault_schedules(cfg)],
        resources={
            "rag": RagSettings.from_config(cfg),
            "evaluation": EvalSettings.from_config(cfg),
            # Intermediate records live beside the outputs, so a CLI build and `dagster dev`
            # (possibly with different DAGSTER_HOMEs) share them.
            "io_manager": AtomicFilesystemIOManager(base_dir=str(cfg.intermediate_dir)),
        },
    )


def loaded_definitions(cfg: RagConfig) -> dg.Definitions:
    """:func:`build_definitions`, with its repository resolved now, outside the caller's context
    variables, for the code that executes jobs (``rag build``, the admin console's ingest).

    While Dagster resolves definitions it looks up the "current" definitions-state storage, a
    context variable that entering an instance (``with instance:``) sets and leaving it does
    not reset: after that instance is disposed and collected, resolving definitions in the same
    thread fails with "Attempted to resolve undefined DagsterInstance weakref". The project keeps
    no definitions state, so the repository is resolved in an empty context, where there is no
    current storage; the resolved repository is cached on the Definitions object.
    """
    defs = build_definitions(cfg)
    contextvars.Context().run(defs.get_repository_def)
    return defs
