"""The BEIR evaluation: metrics on hand-computed cases, a tiny dataset end to end (hashing
embedder, real SQLite), the Dagster asset and its floor check, and the dataset errors."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.defs.evaluation import (
    DATASET_ENV,
    EVAL_ASSETS,
    EVAL_CHECKS,
    EvalSettings,
    default_dataset_dir,
    hybrid_ndcg_floor,
    metric_key,
    questions_hit_at_5_floor,
    retrieval_eval,
)
from rag_assets.defs.resources import RagSettings
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.evaluation.datasets import CorpusDoc, EvaluationError, load_beir
from rag_assets.evaluation.eval_store import eval_store_path, slugs_for
from rag_assets.evaluation.metrics import (
    METRICS,
    mrr_at,
    ndcg_at,
    recall_at,
    score_rankings,
    without_self_hit,
)
from rag_assets.evaluation.report import format_table
from rag_assets.evaluation.runner import (
    EVAL_MODES,
    Evaluator,
    run_evaluation,
    select_eval_embedder,
)
from rag_assets.index import store
from rag_assets.index.params import SearchParams
from rag_assets.search.search_log import read_log

from .conftest import instance_for_test

# ---------------------------------------------------------------------------- metrics


def test_ndcg_with_graded_relevance():
    qrels = {"b": 2, "d": 1, "z": 1, "n": 0}  # z is never retrieved, n is judged not relevant
    ranked = ["a", "b", "c", "d", "n"]
    dcg = 2 / math.log2(3) + 1 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at(ranked, qrels, 10) == pytest.approx(dcg / idcg)
    assert ndcg_at(ranked, qrels, 10) == pytest.approx(0.540586, abs=1e-6)
    # The cut applies to the ranking and to the ideal ranking.
    assert ndcg_at(ranked, qrels, 2) == pytest.approx((2 / math.log2(3)) / (2 + 1 / math.log2(3)))
    assert ndcg_at(["b", "d", "z"], qrels, 10) == pytest.approx(1.0)
    assert ndcg_at(["d", "b"], qrels, 10) < ndcg_at(["b", "d"], qrels, 10)  # the grade matters
    assert ndcg_at([], qrels, 10) == 0.0
    assert ndcg_at(["a"], {"a": 0}, 10) == 0.0  # nothing relevant: 0, not a division by zero


def test_recall_and_mrr():
    qrels = {"b": 2, "d": 1, "z": 1, "n": 0}
    ranked = ["a", "b", "c", "d", "n"]
    assert recall_at(ranked, qrels, 10) == pytest.approx(2 / 3)
    assert recall_at(ranked, qrels, 2) == pytest.approx(1 / 3)
    assert recall_at(ranked, qrels, 1) == 0.0
    assert mrr_at(ranked, qrels, 10) == pytest.approx(1 / 2)
    assert mrr_at(["n", "a", "c", "z"], qrels, 10) == pytest.approx(1 / 4)  # rel 0 is not relevant
    assert mrr_at(["a"] * 10 + ["b"], qrels, 10) == 0.0  # past the cut


def test_score_rankings_averages_and_reads_recall100_from_the_deep_run():
    qrels = {"q1": {"x": 1}, "q2": {"y": 1, "w": 1}}
    shallow = {"q1": ["x"], "q2": ["a", "y"]}
    deep = {"q1": ["x"], "q2": ["a", "y"] + [f"f{i}" for i in range(50)] + ["w"]}
    scores = score_rankings(shallow, deep, qrels)
    assert set(scores) == set(METRICS)
    assert scores["mrr@10"] == pytest.approx((1 + 1 / 2) / 2)
    assert scores["recall@10"] == pytest.approx((1 + 1 / 2) / 2)
    assert scores["recall@100"] == pytest.approx(1.0)
    q2_ndcg = (1 / math.log2(3)) / (1 + 1 / math.log2(3))
    assert scores["ndcg@10"] == pytest.approx((1 + q2_ndcg) / 2)


def test_a_hit_on_the_querys_own_id_is_dropped_before_scoring():
    # ArguAna/Quora style: the query "a" is also a corpus document and retrieves itself first.
    qrels = {"a": {"b": 1}}
    ranking = {"a": ["a", "b", "c"]}
    assert without_self_hit(ranking["a"], "a") == ["b", "c"]
    scores = score_rankings(ranking, ranking, qrels)
    assert scores["mrr@10"] == pytest.approx(1.0) and scores["ndcg@10"] == pytest.approx(1.0)
    # Without the rule "b" would be second.
    assert mrr_at(ranking["a"], qrels["a"], 10) == pytest.approx(0.5)
    assert ndcg_at(ranking["a"], qrels["a"], 10) == pytest.approx(1 / math.log2(3))
    # The self-hit no longer takes a place in the cut: "b" at rank 11 counts once "a" goes.
    deep = {"a": ["a", *(f"f{i}" for i in range(9)), "b"]}
    assert score_rankings(deep, deep, qrels)["recall@10"] == pytest.approx(1.0)
    assert recall_at(deep["a"], qrels["a"], 10) == 0.0
    # A query whose ID is no corpus ID (SciFact) scores as before.
    assert score_rankings({"q": ["a", "b"]}, {"q": ["a", "b"]}, {"q": {"b": 1}})["mrr@10"] == pytest.approx(0.5)


def test_slugs_are_safe_and_unique():
    slugs = slugs_for(
        [CorpusDoc("a/b", "", "x"), CorpusDoc("a b", "", "y"), CorpusDoc("123", "", "z"), CorpusDoc("//", "", "w")]
    )
    assert slugs == {"a/b": "a-b", "a b": "a-b-2", "123": "123", "//": "doc"}


# ---------------------------------------------------------------------------- a tiny dataset

CORPUS = {
    "D1": ("Volcanoes", "Basaltic lava flows from shield volcanoes cool into columnar basalt."),
    "D2": ("Honeybees", "Honeybee colonies communicate the location of nectar through the waggle dance."),
    "D3": ("Tides", "Ocean tides are driven by the gravitational pull of the moon and the sun."),
    "D4": ("Glaciers", "Alpine glaciers carve U-shaped valleys as the ice slowly grinds the bedrock."),
    "D5": ("Photosynthesis", "Chloroplasts convert sunlight, water and carbon dioxide into glucose and oxygen."),
    "D6": ("Penicillin", "Fleming noticed mould killing staphylococcus bacteria, which led to penicillin."),
    "med/7:x": ("Coral reefs", "Coral bleaching happens when warm water makes polyps expel their symbiotic algae."),
    "D8": ("Telescopes", "Reflecting telescopes gather starlight with a curved primary mirror."),
    "D9": ("Pollination", "Honeybee workers pollinate crops while they collect nectar and pollen from flowers."),
    "D10": ("Sourdough", "Wild yeast and lactobacilli leaven sourdough bread and give it a sour taste."),
}
QUERIES = {
    "q1": "waggle dance of honeybee colonies",
    "q2": "why does coral bleaching happen",
    "q3": "moon gravitational pull and ocean tides",
    "q4": "curved mirror of a reflecting telescope",
    "q5": "sourdough yeast",  # judged in train only: skipped on test
}
TEST_QRELS = [("q1", "D2", 2), ("q1", "D9", 1), ("q2", "med/7:x", 1), ("q3", "D3", 1), ("q4", "D8", 1), ("q4", "D1", 0)]


def write_beir(root: Path, corpus=CORPUS, queries=QUERIES, qrels=TEST_QRELS) -> Path:
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    with (root / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for doc_id, (title, text) in corpus.items():
            f.write(json.dumps({"_id": doc_id, "title": title, "text": text, "metadata": {}}) + "\n")
    with (root / "queries.jsonl").open("w", encoding="utf-8") as f:
        for qid, text in queries.items():
            f.write(json.dumps({"_id": qid, "text": text, "metadata": {}}) + "\n")
    rows = ["query-id\tcorpus-id\tscore", *(f"{q}\t{d}\t{s}" for q, d, s in qrels)]
    (root / "qrels" / "test.tsv").write_text("\r\n".join(rows) + "\r\n", encoding="utf-8")  # CRLF, as BEIR ships
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq5\tD10\t1\n", encoding="utf-8")
    return root


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_beir(tmp_path / "tiny-beir")


@pytest.fixture
def cfg(make_config, tmp_path: Path):
    (tmp_path / "content").mkdir(exist_ok=True)
    return make_config(tmp_path / "content")


def test_load_beir_reads_the_three_files(tiny: Path):
    data = load_beir(tiny, "test")
    assert data.name == "tiny-beir" and len(data.corpus) == 10 and len(data.queries) == 5
    assert data.qrels["q1"] == {"D2": 2, "D9": 1} and data.qrels["q4"] == {"D8": 1, "D1": 0}
    assert data.judged_queries() == ["q1", "q2", "q3", "q4"]
    assert load_beir(tiny, "train").judged_queries() == ["q5"]


def test_queries_that_are_corpus_documents_do_not_score_their_own_hit(tmp_path: Path, cfg):
    # The query D2 is the text of the corpus document D2; its relevant document is D9, the
    # other honeybee page.  BM25 ranks D2 itself first, D9 second: BEIR ignores the self-hit.
    title, text = CORPUS["D2"]
    root = write_beir(tmp_path / "self-hits", queries={"D2": f"{title} {text}"}, qrels=[("D2", "D9", 1)])
    report = run_evaluation(cfg, root, "test", "hashing")
    assert report.metrics["bm25"]["mrr@10"] == pytest.approx(1.0)
    evaluator = Evaluator(
        Path(report.info.store_path), load_beir(root, "test"), select_eval_embedder(cfg, "hashing")[0]
    )
    try:
        ranked = evaluator.ranking("D2", SearchParams(mode="bm25", k=20, min_score=0.0, view="chunks"))
    finally:
        evaluator.close()
    assert ranked[:2] == ["D2", "D9"]  # so without the rule MRR@10 would be 0.5
    assert mrr_at(ranked, {"D9": 1}, 10) == pytest.approx(0.5)


def test_end_to_end_with_the_hashing_embedder(tiny: Path, cfg):
    logged: list[str] = []
    report = run_evaluation(cfg, tiny, "test", "hashing", log=logged.append)
    assert set(report.metrics) == {"bm25", "vector", "hybrid"}
    assert all(set(values) == set(METRICS) for values in report.metrics.values())
    assert all(0.0 <= v <= 1.0 for values in report.metrics.values() for v in values.values())
    json.dumps(report.to_json())  # JSON-ready

    # Every query has a distinctive word in its relevant document, so BM25 puts it first.
    bm25 = report.metrics["bm25"]
    assert bm25["mrr@10"] == pytest.approx(1.0)
    # Both documents judged for q1 hold "honeybee", so BM25 finds every relevant document.
    assert bm25["recall@100"] == pytest.approx(1.0)
    # The vector and hybrid lists hold every chunk at depth: nothing can be missed at 100.
    assert report.metrics["vector"]["recall@100"] == pytest.approx(1.0)
    assert report.metrics["hybrid"]["recall@100"] == pytest.approx(1.0)
    assert report.metrics["hybrid"]["mrr@10"] == pytest.approx(1.0)

    info = report.info
    assert (info.dataset, info.split, info.queries, info.skipped_queries) == ("tiny-beir", "test", 4, 0)
    assert info.model == "rag-assets/feature-hash-v1" and info.provider == "hashing"
    assert info.rebuilt and info.documents == 10 and info.chunks == 10
    assert Path(info.store_path) == eval_store_path(cfg, "tiny-beir", info.model)
    assert Path(info.store_path).parent == cfg.data_dir / "eval"
    assert any("building the eval store" in line for line in logged)

    # The store is a regular store: one collection named after the dataset, slugs made safe,
    # the corpus hash recorded in `sources`, and no search was logged into it.
    summary = store.summarise(Path(info.store_path))
    assert summary.per_collection == {"tiny-beir": {"documents": 10, "chunks": 10}}
    with sqlite3.connect(info.store_path) as conn:
        ids = {r[0] for r in conn.execute("SELECT id FROM documents")}
        assert "tiny-beir/med-7-x" in ids
    assert read_log(Path(info.store_path))[2] == 0
    assert set(store.read_sources(Path(info.store_path))) == {"tiny-beir"}

    # Unchanged corpus and model: the store is reused and the figures are identical.
    again = run_evaluation(cfg, tiny, "test", "hashing")
    assert not again.info.rebuilt
    assert again.metrics == report.metrics

    # A changed corpus rebuilds the store.
    changed = dict(CORPUS, D11=("Comets", "Comets grow tails of gas and dust near the sun."))
    write_beir(tiny, corpus=changed)
    rebuilt = run_evaluation(cfg, tiny, "test", "hashing")
    assert rebuilt.info.rebuilt and rebuilt.info.documents == 11


def test_the_searches_run_with_one_blas_thread(tiny: Path, cfg, monkeypatch):
    """`rag eval` searches query after query: a BLAS thread pool only spins between the small
    matrix products and halves nothing but the CPU left (rag_assets.base.blas). The limit holds
    while the queries are searched, and the caller's setting is back afterwards."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)

    def blas_threads_now() -> int:
        return max(info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas")

    seen: list[int] = []

    class Watching(HashingEmbedder):
        def embed_query(self, text: str):
            seen.append(blas_threads_now())
            return super().embed_query(text)

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        assert blas_threads_now() == 2, "the control: BLAS runs 2 threads before the evaluation"
        report = run_evaluation(cfg, tiny, "test", embedder=Watching(), provider="hashing")
        after = blas_threads_now()
    assert report.info.queries == 4 and seen  # every query was embedded once (QueryMemo), inside the limit
    assert set(seen) == {1}
    assert after == 2


def test_graded_ndcg_end_to_end(tiny: Path, cfg):
    """q1 alone: D2 (grade 2) and D9 (grade 1) both hold "honeybee"; BM25 ranks D2 first
    (three query words), so bm25 nDCG@10 is exactly 1.0 when D9 follows, which it must
    since no other document shares a query word."""
    write_beir(tiny, qrels=[("q1", "D2", 2), ("q1", "D9", 1)])
    report = run_evaluation(cfg, tiny, "test", "hashing")
    assert report.info.queries == 1
    assert report.metrics["bm25"] == pytest.approx({"ndcg@10": 1.0, "recall@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0})


def test_format_table(tiny: Path, cfg):
    metrics = {m: {"ndcg@10": 0.5, "recall@10": 0.25, "recall@100": 1.0, "mrr@10": 0.125} for m in EVAL_MODES}
    text = format_table(metrics)
    lines = text.splitlines()
    assert lines[0].split() == ["mode", *METRICS]
    assert lines[2].split() == ["bm25", "0.5000", "0.2500", "1.0000", "0.1250"]
    md = format_table(metrics, markdown=True)
    assert md.splitlines()[0] == "| mode | ndcg@10 | recall@10 | recall@100 | mrr@10 |"
    assert "| hybrid | 0.5000 | 0.2500 | 1.0000 | 0.1250 |" in md


def test_search_params_shape_the_hybrid_figures(tiny: Path, cfg):
    rrf = run_evaluation(cfg, tiny, "test", "hashing", params=SearchParams(fusion="rrf"))
    bm25_only = run_evaluation(
        cfg, tiny, "test", "hashing", params=SearchParams(fusion="convex", vector_weight=0.0, bm25_weight=1.0)
    )
    # Convex fusion with all the weight on BM25 ranks like BM25.
    assert bm25_only.metrics["hybrid"]["mrr@10"] == pytest.approx(bm25_only.metrics["bm25"]["mrr@10"])
    assert rrf.metrics["bm25"] == bm25_only.metrics["bm25"]  # single-list modes ignore fusion
    assert rrf.info.params["fusion"] == "rrf" and bm25_only.info.params["fusion"] == "convex"


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "missing, named",
    [("corpus.jsonl", "corpus.jsonl"), ("queries.jsonl", "queries.jsonl"), ("qrels/test.tsv", "test.tsv")],
)
def test_missing_files_are_named(tiny: Path, missing: str, named: str):
    (tiny / missing).unlink()
    with pytest.raises(EvaluationError, match=named.replace(".", r"\.")):
        load_beir(tiny, "test")


def test_unknown_split_lists_the_present_ones(tiny: Path):
    with pytest.raises(EvaluationError, match=r"dev\.tsv is missing.*splits present: test, train"):
        load_beir(tiny, "dev")


def test_missing_folder_and_malformed_lines(tmp_path: Path, tiny: Path):
    with pytest.raises(EvaluationError, match="no dataset folder"):
        load_beir(tmp_path / "nowhere")
    (tiny / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{"title": "no id"}\n', encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"corpus\.jsonl:2: every line needs the fields _id, text"):
        load_beir(tiny)
    (tiny / "corpus.jsonl").write_text("{not json\n", encoding="utf-8")
    with pytest.raises(EvaluationError, match=r"corpus\.jsonl:1: not valid JSON"):
        load_beir(tiny)


def test_a_split_without_judged_queries_fails(tiny: Path, cfg):
    write_beir(tiny, qrels=[("q4", "D1", 0), ("nope", "D1", 1)])
    with pytest.raises(EvaluationError, match="no query of qrels/test.tsv has a relevant document"):
        run_evaluation(cfg, tiny, "test", "hashing")


# ---------------------------------------------------------------------------- Dagster


def resources(cfg, dataset: Path | str, floor: float, **eval_fields):
    return {
        "rag": RagSettings.from_config(cfg),
        "evaluation": EvalSettings(dataset=str(dataset), ndcg_floor=floor, **eval_fields),
    }


def _check_evaluation(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == 1
    return evaluations[0]


def test_asset_records_the_figures_and_the_floor_check_passes(tiny: Path, cfg):
    assert EVAL_ASSETS == [retrieval_eval] and EVAL_CHECKS == [hybrid_ndcg_floor, questions_hit_at_5_floor]
    with instance_for_test() as instance:
        result = dg.materialize(
            [retrieval_eval, hybrid_ndcg_floor], instance=instance, resources=resources(cfg, tiny, 0.5)
        )
        assert result.success
        [mat] = result.asset_materializations_for_node("retrieval_eval")
        meta = {k: v.value for k, v in mat.metadata.items()}
        for mode in EVAL_MODES:
            for metric in METRICS:
                assert 0.0 <= meta[metric_key(mode, metric)] <= 1.0
        assert meta["hybrid_mrr_at_10"] == pytest.approx(1.0)
        assert meta["dataset"] == "tiny-beir" and meta["split"] == "test" and meta["queries"] == 4
        assert meta["model"] == "rag-assets/feature-hash-v1" and meta["seconds"] > 0
        assert "| hybrid |" in meta["table"]
        assert set(meta["metrics"]) == set(EVAL_MODES)
        check = _check_evaluation(result)
        assert check.passed and check.severity == dg.AssetCheckSeverity.ERROR
        assert check.metadata["hybrid_ndcg_at_10"].value == pytest.approx(meta["hybrid_ndcg_at_10"])


def test_floor_check_fails_under_the_floor(tiny: Path, cfg):
    with instance_for_test() as instance:
        result = dg.materialize(
            [retrieval_eval, hybrid_ndcg_floor],
            instance=instance,
            resources=resources(cfg, tiny, 1.01),
            raise_on_error=False,
        )
        check = _check_evaluation(result)
        assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
        assert check.metadata["floor"].value == pytest.approx(1.01)
        assert check.metadata["margin"].value < 0


def test_floor_check_without_a_materialization_fails(tiny: Path, cfg):
    with instance_for_test() as instance:
        result = dg.materialize(
            [retrieval_eval, hybrid_ndcg_floor],
            instance=instance,
            resources=resources(cfg, tiny, 0.1),
            selection=dg.AssetSelection.checks(hybrid_ndcg_floor),
            raise_on_error=False,
        )
        check = _check_evaluation(result)
        assert not check.passed and "materialize it" in check.metadata["problem"].value


def test_asset_fails_clearly_without_a_dataset(tmp_path: Path, cfg):
    with instance_for_test() as instance:
        result = dg.materialize(
            [retrieval_eval],
            instance=instance,
            resources=resources(cfg, tmp_path / "absent", 0.5),
            raise_on_error=False,
        )
    assert not result.success
    failure = result.failure_data_for_node("retrieval_eval")
    text = str(failure.user_failure_data.description if failure.user_failure_data else failure.error)
    assert "no evaluation dataset at" in text and DATASET_ENV in text and "corpus.jsonl" in text


def test_asset_fails_clearly_on_a_missing_file(tiny: Path, cfg):
    (tiny / "queries.jsonl").unlink()
    with instance_for_test() as instance:
        result = dg.materialize(
            [retrieval_eval], instance=instance, resources=resources(cfg, tiny, 0.5), raise_on_error=False
        )
    failure = result.failure_data_for_node("retrieval_eval")
    text = str(failure.user_failure_data.description if failure.user_failure_data else failure.error)
    assert "queries.jsonl is missing" in text and DATASET_ENV in text


def test_default_dataset_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cfg):
    monkeypatch.setenv(DATASET_ENV, str(tmp_path / "elsewhere"))
    assert default_dataset_dir() == tmp_path / "elsewhere"
    assert EvalSettings().dataset_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv(DATASET_ENV)
    repo = Path(__file__).resolve().parents[1]
    assert default_dataset_dir() == (repo.parent / "shared" / "corpora" / "beir-scifact").resolve()
    assert EvalSettings.from_config(cfg).dataset == str(default_dataset_dir())
    assert EvalSettings(dataset="/x/y").dataset_dir() == Path("/x/y")
