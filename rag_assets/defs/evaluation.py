"""Retrieval quality as an asset: the BEIR evaluation (SciFact by default), the configured
question sets over the built index, and a floor on each.

``retrieval_eval`` first scores the question files of ``evaluation.questions`` in rag.yaml (by
default the shipped sample set when the content is the sample content) against the public
store already built: hit@1, hit@5, hit@10 and MRR@10 of bm25, vector and hybrid search, as
``questions_<mode>_<metric>`` metadata. Then it indexes the BEIR dataset's corpus into its own
store under ``data/eval/`` (the build's chunking and embedding steps, the shared embedding
cache: a re-run with an unchanged corpus and model only searches) and records nDCG@10,
recall@10, recall@100 and MRR@10 per mode, so the figures plot over time in the UI. Without the
dataset it still scores the questions, and says so.

``hybrid_ndcg_floor`` fails when hybrid nDCG@10 falls under the `evaluation` resource's floor;
``questions_hit_at_5_floor`` when hybrid hit@5 of the questions falls under
``evaluation.hit_at_5_floor`` (rag.yaml).
"""

import os
from pathlib import Path

import dagster as dg
from pydantic import Field

from rag_assets.config import RagConfig
from rag_assets.config.settings import REPO_ROOT
from rag_assets.defs.resources import RagSettings
from rag_assets.evaluation.datasets import EvaluationError
from rag_assets.evaluation.metrics import METRICS, QUESTION_METRICS
from rag_assets.evaluation.question_eval import run_question_evaluation
from rag_assets.evaluation.report import EvalReport, QuestionReport, format_table
from rag_assets.evaluation.runner import run_evaluation

EVAL_GROUP = "evaluation"
DATASET_ENV = "RAG_EVAL_DATASET"
DEFAULT_DATASET = Path("shared") / "corpora" / "beir-scifact"  # beside the repository
# SciFact test, hybrid nDCG@10 with all-MiniLM-L6-v2 (bench/tune_fusion.py): 0.719 with RRF 0.5/0.5
# k=60, 0.735 with convex 0.5/0.5 and 200 candidates; BM25 alone 0.688, so 0.70 catches a hybrid
# that no longer beats its own lexical half. The hashing embedder (no model) stays under it.
DEFAULT_NDCG_FLOOR = 0.70
HOW_TO_POINT = (
    f"set {DATASET_ENV} (or the `dataset` field of the `evaluation` resource) to a BEIR dataset folder "
    "holding corpus.jsonl, queries.jsonl and qrels/<split>.tsv, e.g. BEIR's scifact"
)


def default_dataset_dir(cfg: RagConfig | None = None) -> Path:
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
    embedder: str = Field(
        default="", description="Embedder name (local, ollama, openai, hashing); empty: the configured one."
    )
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


def question_key(mode: str, metric: str) -> str:
    """``hybrid``, ``hit@5`` -> ``questions_hybrid_hit_at_5`` (the metadata key)."""
    return f"questions_{metric_key(mode, metric)}"


HIT_AT_5_KEY = question_key("hybrid", "hit@5")


def _question_metadata(report: QuestionReport) -> dict:
    info = report.info
    metadata = {
        **{
            question_key(mode, m): float(values[m]) for mode, values in report.metrics.items() for m in QUESTION_METRICS
        },
        "questions_table": dg.MetadataValue.md(format_table(report.metrics, markdown=True, columns=QUESTION_METRICS)),
        "questions_files": dg.MetadataValue.json(info.files),
        "questions_count": info.questions,
        "questions_expected_pages": info.pages,
        "questions_unknown_pages": dg.MetadataValue.json([str(u) for u in info.unknown_pages]),
        "questions_hybrid_misses": dg.MetadataValue.json(info.misses),
        "questions_model": info.model,
        "questions_seconds": info.seconds,
        "questions_store_path": dg.MetadataValue.path(info.store_path),
    }
    if info.per_file:
        metadata["questions_per_file"] = dg.MetadataValue.json(info.per_file)
    return metadata


def _score_questions(context: dg.AssetExecutionContext, cfg: RagConfig) -> dict:
    """The question sets' metadata ({} when none is configured); dg.Failure on a bad file or no index."""
    files = cfg.evaluation.questions
    if not files:
        context.log.info("no question sets configured (evaluation.questions in rag.yaml)")
        return {}
    try:
        report = run_question_evaluation(cfg, files, log=context.log.info)
    except EvaluationError as exc:
        raise dg.Failure(description=f"question sets ({', '.join(map(str, files))}): {exc}") from exc
    context.log.info("\n" + format_table(report.metrics, columns=QUESTION_METRICS))
    return _question_metadata(report)


@dg.asset(group_name=EVAL_GROUP, kinds={"sqlite"})
def retrieval_eval(
    context: dg.AssetExecutionContext, rag: RagSettings, evaluation: EvalSettings
) -> dg.MaterializeResult:
    """Hit@1/5/10 and MRR@10 of the configured question sets over the built index, then nDCG@10,
    recall@10/@100 and MRR@10 on a BEIR dataset, for bm25, vector and hybrid search.

    The questions search the public store already built (`rag build` first). The BEIR corpus
    goes through the build's chunking and embedding (with the shared embedding cache) into
    ``data/eval/<dataset>-<model>.db``, rebuilt only when the corpus or model changed.
    """
    cfg = rag.config
    metadata = _score_questions(context, cfg)
    dataset = evaluation.dataset_dir()
    if not dataset.is_dir():
        if not metadata:
            raise dg.Failure(description=f"no evaluation dataset at {dataset}: {HOW_TO_POINT}")
        context.log.warning(f"no evaluation dataset at {dataset}: only the question sets were scored")
        return dg.MaterializeResult(metadata={**metadata, "beir_skipped": f"no evaluation dataset at {dataset}"})
    try:
        report = run_evaluation(cfg, dataset, evaluation.split, evaluation.embedder or None, log=context.log.info)
    except EvaluationError as exc:
        raise dg.Failure(description=f"{exc}. To use another dataset, {HOW_TO_POINT}") from exc
    context.log.info("\n" + format_table(report.metrics))
    return dg.MaterializeResult(metadata={**metadata, **_report_metadata(report)})


def _latest_metadata(context: dg.AssetCheckExecutionContext) -> dict:
    event = context.instance.get_latest_materialization_event(retrieval_eval.key)
    materialization = event.asset_materialization if event is not None else None
    return dict(materialization.metadata) if materialization is not None else {}


@dg.asset_check(
    asset=retrieval_eval,
    description="Hybrid nDCG@10 of the latest retrieval evaluation is at least the `evaluation` resource's ndcg_floor.",
)
def hybrid_ndcg_floor(context: dg.AssetCheckExecutionContext, evaluation: EvalSettings) -> dg.AssetCheckResult:
    metadata = _latest_metadata(context)
    entry = metadata.get(metric_key("hybrid", "ndcg@10"))
    if entry is None:
        skipped = metadata.get("beir_skipped")
        problem = (
            f"{skipped.value}: {HOW_TO_POINT}"
            if skipped
            else "retrieval_eval has no hybrid nDCG@10 yet; materialize it"
        )
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"floor": evaluation.ndcg_floor, "problem": problem},
        )
    value = float(entry.value)
    described = {key: metadata[key].value for key in ("dataset", "split", "model") if key in metadata}
    return dg.AssetCheckResult(
        passed=value >= evaluation.ndcg_floor,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "hybrid_ndcg_at_10": value,
            "floor": evaluation.ndcg_floor,
            "margin": round(value - evaluation.ndcg_floor, 6),
            **described,
        },
    )


@dg.asset_check(
    asset=retrieval_eval,
    description="Hybrid hit@5 of the configured question sets is at least evaluation.hit_at_5_floor (rag.yaml).",
)
def questions_hit_at_5_floor(context: dg.AssetCheckExecutionContext, rag: RagSettings) -> dg.AssetCheckResult:
    settings = rag.config.evaluation
    floor = settings.hit_at_5_floor
    metadata = _latest_metadata(context)
    entry = metadata.get(HIT_AT_5_KEY)
    if entry is None:
        if not settings.questions:
            # Nothing to hold to a floor: say so rather than fail a site that has no question set.
            return dg.AssetCheckResult(
                passed=True,
                metadata={"floor": floor, "questions": "none configured (evaluation.questions in rag.yaml)"},
            )
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={"floor": floor, "problem": "retrieval_eval has no question figures yet; materialize it"},
        )
    value = float(entry.value)
    described = {key: metadata[key].value for key in ("questions_count", "questions_model") if key in metadata}
    return dg.AssetCheckResult(
        passed=value >= floor,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={HIT_AT_5_KEY: value, "floor": floor, "margin": round(value - floor, 6), **described},
    )


EVAL_ASSETS = [retrieval_eval]
EVAL_CHECKS = [hybrid_ndcg_floor, questions_hit_at_5_floor]
