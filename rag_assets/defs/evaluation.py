"""Retrieval quality as an asset: the BEIR evaluation (SciFact by default) and a floor on it.

``retrieval_eval`` indexes the dataset's corpus into its own store under ``data/eval/`` (the
build's chunking and embedding steps, the shared embedding cache: a re-run with an unchanged
corpus and model only searches) and records nDCG@10, recall@10, recall@100 and MRR@10 of
bm25, vector and hybrid search as metadata, so the figures plot over time in the UI.
``hybrid_ndcg_floor`` fails when hybrid nDCG@10 falls under the configured floor.
"""

import dataclasses
import os
from pathlib import Path
from typing import Optional

import dagster as dg
from pydantic import Field

from rag_assets.config import RagConfig
from rag_assets.defs.resources import EmbedderResource, RagSettings
from rag_assets.evaluation.datasets import EvaluationError
from rag_assets.evaluation.metrics import METRICS
from rag_assets.evaluation.report import EvalReport, format_table
from rag_assets.evaluation.runner import run_evaluation

EVAL_GROUP = "evaluation"
DATASET_ENV = "RAG_EVAL_DATASET"
DEFAULT_DATASET = Path("shared") / "corpora" / "beir-scifact"  # beside the repository
REPO_ROOT = Path(__file__).resolve().parents[2]
# SciFact test, hybrid nDCG@10 with all-MiniLM-L6-v2 (bench/tune_fusion.py): 0.719 with RRF 0.5/0.5
# k=60, 0.735 with convex 0.5/0.5 and 200 candidates; BM25 alone 0.688, so 0.70 catches a hybrid
# that no longer beats its own lexical half. The hashing embedder (no model) stays under it.
DEFAULT_NDCG_FLOOR = 0.70
HOW_TO_POINT = (
    f"set {DATASET_ENV} (or the `dataset` field of the `evaluation` resource) to a BEIR dataset folder "
    "holding corpus.jsonl, queries.jsonl and qrels/<split>.tsv, e.g. BEIR's scifact"
)


def default_dataset_dir(cfg: Optional[RagConfig] = None) -> Path:
    """``$RAG_EVAL_DATASET``, else ``shared/corpora/beir-scifact`` beside the repository (the
    folder that holds rag.yaml, or this package's checkout)."""
    from_env = os.environ.get(DATASET_ENV)
    if from_env:
        return Path(from_env).expanduser()
    repo = cfg.config_path.parent if cfg is not None and cfg.config_path is not None else REPO_ROOT
    return (repo.parent / DEFAULT_DATASET).resolve()


def metric_key(mode: str, metric: str) -> str:
    """``hybrid``, ``ndcg@10`` -> ``hybrid_ndcg_at_10`` (the metadata key)."""
    return f"{mode}_{metric.replace('@', '_at_')}"


class EvalSettings(dg.ConfigurableResource):
    """Which BEIR dataset the retrieval evaluation runs on, with which embedder, and its floor."""

    dataset: str = Field(
        default="",
        description=f"BEIR dataset folder; empty: ${DATASET_ENV}, else shared/corpora/beir-scifact beside the repo.",
    )
    split: str = Field(default="test", description="The qrels split to score (qrels/<split>.tsv).")
    embedder: str = Field(default="", description="Embedder name (local, ollama, openai, hashing); empty: the configured one.")
    ndcg_floor: float = Field(
        default=DEFAULT_NDCG_FLOOR, description="hybrid_ndcg_floor fails when hybrid nDCG@10 is below this."
    )

    @classmethod
    def from_config(cls, cfg: RagConfig) -> "EvalSettings":
        return cls(dataset=str(default_dataset_dir(cfg)))

    def dataset_dir(self) -> Path:
        return Path(self.dataset).expanduser() if self.dataset else default_dataset_dir()


def _report_metadata(report: EvalReport) -> dict:
    info = report.info
    return {
        **{metric_key(mode, m): float(values[m]) for mode, values in report.metrics.items() for m in METRICS},
        "table": dg.MetadataValue.md(format_table(report.metrics, markdown=True)),
        "metrics": dg.MetadataValue.json(report.metrics),
        "dataset": info.dataset,
        "split": info.split,
        "queries": info.queries,
        "model": info.model,
        "provider": info.provider,
        "seconds": info.seconds,
        "index_seconds": info.index_seconds,
        "search_seconds": info.search_seconds,
        "store_rebuilt": info.rebuilt,
        "documents": info.documents,
        "chunks": info.chunks,
        "store_path": dg.MetadataValue.path(info.store_path),
        "search_params": dg.MetadataValue.json(info.params),
    }


@dg.asset(group_name=EVAL_GROUP, kinds={"sqlite"})
def retrieval_eval(
    context: dg.AssetExecutionContext, rag: RagSettings, embedder: EmbedderResource, evaluation: EvalSettings
) -> dg.MaterializeResult:
    """nDCG@10, recall@10/@100 and MRR@10 of bm25, vector and hybrid search on a BEIR dataset.

    The corpus goes through the build's chunking and embedding (with the shared embedding
    cache) into ``data/eval/<dataset>-<model>.db``, rebuilt only when the corpus or model changed.
    """
    cfg = dataclasses.replace(rag.to_config(), embedding=embedder.settings())
    dataset = evaluation.dataset_dir()
    if not dataset.is_dir():
        raise dg.Failure(description=f"no evaluation dataset at {dataset}: {HOW_TO_POINT}")
    try:
        report = run_evaluation(cfg, dataset, evaluation.split, evaluation.embedder or None, log=context.log.info)
    except EvaluationError as exc:
        raise dg.Failure(description=f"{exc}. To use another dataset, {HOW_TO_POINT}") from exc
    context.log.info("\n" + format_table(report.metrics))
    return dg.MaterializeResult(metadata=_report_metadata(report))


@dg.asset_check(
    asset=retrieval_eval,
    description="Hybrid nDCG@10 of the latest retrieval evaluation is at least the `evaluation` resource's ndcg_floor.",
)
def hybrid_ndcg_floor(context: dg.AssetCheckExecutionContext, evaluation: EvalSettings) -> dg.AssetCheckResult:
    event = context.instance.get_latest_materialization_event(retrieval_eval.key)
    materialization = event.asset_materialization if event is not None else None
    metadata = materialization.metadata if materialization is not None else {}
    entry = metadata.get(metric_key("hybrid", "ndcg@10"))
    if entry is None:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"floor": evaluation.ndcg_floor, "problem": "retrieval_eval has no hybrid nDCG@10 yet; materialize it"},
        )
    value = float(entry.value)
    described = {key: metadata[key].value for key in ("dataset", "split", "model") if key in metadata}
    return dg.AssetCheckResult(
        passed=value >= evaluation.ndcg_floor,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={"hybrid_ndcg_at_10": value, "floor": evaluation.ndcg_floor, "margin": round(value - evaluation.ndcg_floor, 6), **described},
    )


EVAL_ASSETS = [retrieval_eval]
EVAL_CHECKS = [hybrid_ndcg_floor]
