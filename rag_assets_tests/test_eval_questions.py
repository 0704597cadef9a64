"""`rag eval --questions`: question files read and refused line by line, the evaluation end to
end over real builds (the sample content and a tiny tree whose answers are known by
construction), the CLI's modes and errors, the rag.yaml section, and the `retrieval_eval`
asset with its questions_hit_at_5_floor check in real Dagster runs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.config import ConfigError, EvaluationConfig, load_config
from rag_assets.config.settings import SAMPLE_QUESTIONS
from rag_assets.defs.evaluation import (
    HIT_AT_5_KEY,
    EvalSettings,
    hybrid_ndcg_floor,
    question_key,
    questions_hit_at_5_floor,
    retrieval_eval,
)
from rag_assets.defs.resources import RagSettings
from rag_assets.defs.runner import run_build
from rag_assets.evaluation.datasets import EvaluationError
from rag_assets.evaluation.metrics import QUESTION_METRICS, hit_at, score_questions
from rag_assets.evaluation.question_eval import run_question_evaluation
from rag_assets.evaluation.questions import load_questions
from rag_assets.evaluation.runner import EVAL_MODES
from rag_assets.serve.cli import main

from .conftest import SAMPLE_CONTENT, build_files_once, copy_built, instance_for_test
from .test_evaluation import write_beir

MODES = set(EVAL_MODES)

# Six pages with no word in common: a question made of one page's words can only find that page.
TINY_PAGES = {
    "notes/volcano.md": "Basaltic lava flows from shield volcanoes cool into columnar basalt.",
    "notes/bees.md": "Honeybee colonies communicate nectar locations through the waggle dance.",
    "notes/tides.md": "Ocean tides follow the gravitational pull of the moon.",
    "notes/glacier.md": "Alpine glaciers carve valleys as ice grinds bedrock.",
    "notes/bread.md": "Wild yeast and lactobacilli leaven sourdough bread.",
    "notes/telescope.md": "Reflecting telescopes gather starlight with a curved primary mirror.",
}
TINY_QUESTIONS = [
    ("columnar basalt from lava", "notes/volcano"),
    ("waggle dance of honeybee colonies", "notes/bees"),
    ("moon pull on ocean tides", "notes/tides"),
    ("glaciers carve valleys", "notes/glacier"),
    ("sourdough yeast", "notes/bread"),
    ("curved mirror telescopes", "notes/telescope"),
]


def write_questions(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def build(cfg) -> None:
    with instance_for_test() as instance:
        assert run_build(cfg, instance, vaults=[]).success


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The sample content built once (hashing embedder); its config names the shipped question set."""
    out = tmp_path_factory.mktemp("questions") / "out"
    cfg = load_config(
        None, content_dir=SAMPLE_CONTENT, output_dir=out, embedder="hashing", private_embedder="hashing", environ={}
    )
    build(cfg)
    return cfg


@pytest.fixture(scope="module")
def tiny_build(tmp_path_factory):
    """TINY_PAGES built once, copied for each test by ``tiny``."""
    return build_files_once(tmp_path_factory, "tiny", TINY_PAGES)


@pytest.fixture
def tiny(tiny_build, make_config, tmp_path):
    """The tiny tree and its store, the test's own copy (tests search, materialize and log into it)."""
    return copy_built(tiny_build, tmp_path, make_config)


def shifted(rows: list[dict]) -> list[dict]:
    """Each question expecting the pages of the next question that shares none of its own."""
    n = len(rows)
    out = []
    for i, row in enumerate(rows):
        others = (rows[(i + d) % n]["expect"] for d in range(1, n))
        out.append({"q": row["q"], "expect": next(e for e in others if not set(e) & set(row["expect"]))})
    return out


def eval_json(capsys, *args: str) -> dict:
    assert main(["eval", *args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def assert_sane(figures: dict) -> None:
    assert set(figures) == MODES | {"info"}
    for mode in MODES:
        values = figures[mode]
        assert list(values) == list(QUESTION_METRICS)
        assert all(0.0 <= v <= 1.0 for v in values.values())
        assert values["hit@1"] <= values["hit@5"] <= values["hit@10"]
        assert values["hit@1"] <= values["mrr@10"] <= values["hit@10"]


# ---------------------------------------------------------------------------- metrics


def test_hit_at_k_and_the_mean_over_questions():
    qrels = {"a": {"x": 1}, "b": {"y": 1, "z": 1}, "c": {"w": 1}}
    rankings = {"a": ["x", "p"], "b": ["p", "q", "r", "s", "t", "z"], "c": ["p"]}
    assert hit_at(rankings["b"], qrels["b"], 5) == 0.0 and hit_at(rankings["b"], qrels["b"], 6) == 1.0
    scores = score_questions(rankings, qrels)
    assert scores == pytest.approx({"hit@1": 1 / 3, "hit@5": 1 / 3, "hit@10": 2 / 3, "mrr@10": (1 + 1 / 6) / 3})
    assert score_questions({}, {}) == dict.fromkeys(QUESTION_METRICS, 0.0)


# ---------------------------------------------------------------------------- reading the files


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", r"q\.jsonl:2: not valid JSON"),
        ('["q", "expect"]', r"q\.jsonl:2: each line must be a JSON object"),
        ('{"expect": ["a/b"]}', r'q\.jsonl:2: "q" must be the question'),
        ('{"q": "  ", "expect": ["a/b"]}', r'q\.jsonl:2: "q" must be the question'),
        ('{"q": "x"}', r'q\.jsonl:2: "expect" must be a list of one or more pages'),
        ('{"q": "x", "expect": []}', r'q\.jsonl:2: "expect" must be a list of one or more pages'),
        ('{"q": "x", "expect": "a/b"}', r'q\.jsonl:2: "expect" must be a list'),
        ('{"q": "x", "expect": ["vlans"]}', r"q\.jsonl:2: the expected page 'vlans' is not collection/slug"),
        ('{"q": "x", "expect": ["/docs/vlans/"]}', r"is not collection/slug"),
        ('{"q": "x", "expect": [3]}', r"the expected page 3 must be text"),
        ('{"q": "x", "expect": ["a/b"], "expected": ["a/c"]}', r"q\.jsonl:2: unknown field\(s\) expected"),
    ],
)
def test_a_malformed_line_is_named_with_its_line_number(tmp_path, line, message):
    path = write_questions(tmp_path / "q.jsonl", [{"q": "fine", "expect": ["a/b"]}, line])
    with pytest.raises(EvaluationError, match=message):
        load_questions([path])


def test_files_are_read_in_order_blank_lines_skipped_pages_once(tmp_path):
    first = write_questions(tmp_path / "one.jsonl", [{"q": " two   spaces ", "expect": ["a/b", "a/b", "c/d/e"]}, ""])
    second = write_questions(tmp_path / "two.jsonl", ["", {"q": "next", "expect": ["x/y"]}])
    questions = load_questions([first, second, first])  # a file given twice counts once
    assert [(q.text, q.expect, q.line) for q in questions] == [
        ("two spaces", ("a/b", "c/d/e"), 1),
        ("next", ("x/y",), 2),
    ]
    assert questions[1].key == f"{second}:2"
    with pytest.raises(EvaluationError, match="holds no questions"):
        load_questions([write_questions(tmp_path / "empty.jsonl", ["", "  "])])
    with pytest.raises(EvaluationError, match="no question file at"):
        load_questions([tmp_path / "absent.jsonl"])


# ---------------------------------------------------------------------------- end to end


def test_the_sample_question_set_through_the_cli(sample, capsys):
    figures = eval_json(capsys, "--questions", str(SAMPLE_QUESTIONS), "--output-dir", str(sample.output_dir))
    assert_sane(figures)
    info = figures["info"]
    assert info["questions"] == 30 and info["unknown_pages"] == [] and info["documents"] == 30
    assert info["model"] == "rag-assets/feature-hash-v1" and info["store_path"] == str(sample.public_store_path)
    # Each question names pages that answer it, so BM25 alone finds most of them at once.
    assert figures["bm25"]["hit@10"] >= 0.8 and figures["hybrid"]["hit@10"] >= 0.8
    assert len(info["misses"]) == round(30 * (1 - figures["hybrid"]["hit@10"]))

    # The same questions, each expecting the pages of a question about something else: the
    # figures collapse (they measure the expected pages, not just that something was found).
    rows = [json.loads(line) for line in SAMPLE_QUESTIONS.read_text().splitlines()]
    bad = eval_json(
        capsys,
        "--questions",
        str(write_questions(sample.output_dir / "wrong.jsonl", shifted(rows))),
        "--output-dir",
        str(sample.output_dir),
    )
    assert_sane(bad)
    for mode in MODES:
        assert bad[mode]["hit@1"] <= 0.1 < figures[mode]["hit@1"]
        assert bad[mode]["mrr@10"] < figures[mode]["mrr@10"] / 2


def test_answers_known_by_construction_score_1_and_wrong_ones_0(tiny, tmp_path):
    right = write_questions(tmp_path / "right.jsonl", [{"q": q, "expect": [page]} for q, page in TINY_QUESTIONS])
    report = run_question_evaluation(tiny, [right])
    # Only a question's own page shares a word with it.
    assert report.metrics["bm25"] == dict.fromkeys(QUESTION_METRICS, 1.0)
    assert report.metrics["hybrid"]["hit@1"] == 1.0
    # Each question expecting the next one's page: BM25 never returns a page without a query word.
    shifted = [{"q": q, "expect": [TINY_QUESTIONS[(i + 1) % 6][1]]} for i, (q, _) in enumerate(TINY_QUESTIONS)]
    wrong = run_question_evaluation(tiny, [write_questions(tmp_path / "wrong.jsonl", shifted)])
    assert wrong.metrics["bm25"] == dict.fromkeys(QUESTION_METRICS, 0.0)
    # Hybrid ranks every page (no relevance floor; six pages fill any top 10), never the wrong one first.
    assert wrong.metrics["hybrid"]["hit@1"] == 0.0 and wrong.metrics["hybrid"]["hit@10"] == 1.0
    # Two files: each one's figures, and the pooled ones over both.
    both = run_question_evaluation(tiny, [right, tmp_path / "wrong.jsonl"])
    assert both.info.questions == 12 and both.metrics["bm25"]["hit@1"] == 0.5
    assert both.info.per_file[str(right)]["bm25"]["hit@1"] == 1.0
    assert both.info.per_file[str(tmp_path / "wrong.jsonl")]["bm25"]["hit@1"] == 0.0


def test_searching_the_questions_logs_nothing(tiny, tmp_path):
    from rag_assets.search.search_log import read_log

    path = write_questions(tmp_path / "q.jsonl", [{"q": q, "expect": [p]} for q, p in TINY_QUESTIONS])
    before = read_log(tiny.public_store_path)[2]  # other tests searched this store
    run_question_evaluation(tiny, [path])
    assert read_log(tiny.public_store_path)[2] == before


def test_unknown_expected_pages_are_listed_and_count_as_misses(tiny, tmp_path, capsys):
    path = write_questions(
        tmp_path / "q.jsonl",
        [
            {"q": "sourdough yeast", "expect": ["notes/bread"]},
            {"q": "waggle dance", "expect": ["notes/bee", "notes/gone"]},
        ],
    )
    figures = eval_json(capsys, "--questions", str(path), "--output-dir", str(tiny.output_dir))
    assert figures["info"]["unknown_pages"] == [
        {"source": str(path), "line": 2, "page": "notes/bee"},
        {"source": str(path), "line": 2, "page": "notes/gone"},
    ]
    assert figures["bm25"]["hit@1"] == 0.5
    assert main(["eval", "--questions", str(path), "--output-dir", str(tiny.output_dir)]) == 0
    captured = capsys.readouterr()
    assert f"{path}:2: notes/bee is not in the index" in captured.err
    assert "2 expected page(s) not in the index" in captured.out and "hit@5" in captured.out


# ---------------------------------------------------------------------------- CLI errors and help


def test_cli_errors_exit_2_with_a_message(tiny, tmp_path, capsys):
    good = write_questions(tmp_path / "q.jsonl", [{"q": "sourdough yeast", "expect": ["notes/bread"]}])
    out = ["--output-dir", str(tiny.output_dir)]
    cases = [
        (
            ["--questions", str(good), "--dataset", str(tmp_path)],
            "--dataset and --questions are two different evaluations; choose one",
        ),
        ([], "give --dataset DIR"),
        (["--questions", str(good), "--embedder", "hashing"], "--embedder applies to --dataset"),
        (["--questions", str(good), "--output-dir", str(tmp_path / "nothing")], "run `rag build` first"),
        (
            ["--questions", str(write_questions(tmp_path / "bad.jsonl", [{"q": "x", "expect": ["a/b"]}, "{oops"]))],
            "bad.jsonl:2: not valid JSON",
        ),
        (
            [
                "--questions",
                str(write_questions(tmp_path / "other.jsonl", [{"q": "vlan plan", "expect": ["docs/vlans"]}])),
            ],
            "none of the 1 expected pages of",
        ),
    ]
    for args, message in cases:
        assert main(["eval", *out, *args]) == 2, args
        assert message in capsys.readouterr().err, args


def test_help_explains_both_modes(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["eval", "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for part in ("--dataset DIR", "--questions FILE", "choose one", "run `rag build` first", "hit@5", "nDCG@10"):
        assert part in text, part


# ---------------------------------------------------------------------------- rag.yaml


def test_the_evaluation_section(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    config = site / "rag.yaml"
    config.write_text("evaluation:\n  questions: [qs/a.jsonl]\n  hit_at_5_floor: 0.8\n")
    assert load_config(config, environ={}).evaluation == EvaluationConfig((site / "qs" / "a.jsonl",), 0.8)
    # The sample content gets the shipped set unless the file says otherwise; other content none.
    assert load_config(None, content_dir=SAMPLE_CONTENT, environ={}).evaluation.questions == (SAMPLE_QUESTIONS,)
    assert load_config(None, content_dir=tmp_path, environ={}).evaluation.questions == ()
    config.write_text(f"content_dir: {SAMPLE_CONTENT}\nevaluation: {{questions: []}}\n")
    assert load_config(config, environ={}).evaluation.questions == ()
    config.write_text("evaluation:\n  hit_at_5_floor: 1.5\n  questions: [a.jsonl, '']\n")
    with pytest.raises(ConfigError) as raised:
        load_config(config, environ={})
    assert "line 2: evaluation.hit_at_5_floor must be less than or equal to 1" in str(raised.value)
    assert "line 3: evaluation.questions[1] must not be empty" in str(raised.value)


# ---------------------------------------------------------------------------- Dagster


def resources(cfg, dataset: Path):
    return {
        "rag": RagSettings.from_config(cfg),
        "evaluation": EvalSettings(dataset=str(dataset), ndcg_floor=0.0),
    }


def materialize(cfg, dataset: Path) -> dg.ExecuteInProcessResult:
    with instance_for_test() as instance:
        return dg.materialize(
            [retrieval_eval, hybrid_ndcg_floor, questions_hit_at_5_floor],
            instance=instance,
            resources=resources(cfg, dataset),
            raise_on_error=False,
        )


def checks_of(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {c.check_name: c for c in result.get_asset_check_evaluations()}


def test_the_asset_scores_the_sample_set_by_default_and_the_floor_holds(sample, tmp_path):
    assert sample.evaluation.questions == (SAMPLE_QUESTIONS,)
    result = materialize(sample, write_beir(tmp_path / "tiny-beir"))
    assert result.success
    [mat] = result.asset_materializations_for_node("retrieval_eval")
    meta = {k: v.value for k, v in mat.metadata.items()}
    for mode in EVAL_MODES:
        for metric in QUESTION_METRICS:
            assert 0.0 <= meta[question_key(mode, metric)] <= 1.0
    assert meta["questions_count"] == 30 and meta["questions_files"] == [str(SAMPLE_QUESTIONS)]
    assert "| hybrid |" in meta["questions_table"] and "hit@5" in meta["questions_table"]
    assert meta["dataset"] == "tiny-beir" and "hybrid_ndcg_at_10" in meta  # the BEIR figures too
    check = checks_of(result)["questions_hit_at_5_floor"]
    assert check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata[HIT_AT_5_KEY].value == pytest.approx(meta[HIT_AT_5_KEY])
    assert check.metadata["floor"].value == sample.evaluation.hit_at_5_floor

    # A floor above the figure fails the check.
    strict = dataclasses.replace(sample, evaluation=EvaluationConfig(sample.evaluation.questions, 0.99))
    check = checks_of(materialize(strict, write_beir(tmp_path / "tiny-beir")))["questions_hit_at_5_floor"]
    assert not check.passed and check.metadata["margin"].value < 0


def test_a_set_whose_pages_are_wrong_fails_the_check(sample, tmp_path):
    rows = [json.loads(line) for line in SAMPLE_QUESTIONS.read_text().splitlines()]
    path = write_questions(tmp_path / "wrong.jsonl", shifted(rows))
    cfg = dataclasses.replace(sample, evaluation=EvaluationConfig((path,), sample.evaluation.hit_at_5_floor))
    check = checks_of(materialize(cfg, write_beir(tmp_path / "tiny-beir")))["questions_hit_at_5_floor"]
    assert not check.passed and check.metadata[HIT_AT_5_KEY].value < sample.evaluation.hit_at_5_floor


def test_without_question_sets_the_check_passes_and_says_so(tiny, tmp_path):
    assert tiny.evaluation.questions == ()
    result = materialize(tiny, write_beir(tmp_path / "tiny-beir"))
    assert result.success
    [mat] = result.asset_materializations_for_node("retrieval_eval")
    assert not any(key.startswith("questions_") for key in mat.metadata)
    check = checks_of(result)["questions_hit_at_5_floor"]
    assert check.passed and "none configured" in check.metadata["questions"].value


def test_questions_without_a_beir_dataset_still_materialize(tiny, tmp_path):
    path = write_questions(tmp_path / "q.jsonl", [{"q": q, "expect": [p]} for q, p in TINY_QUESTIONS])
    cfg = dataclasses.replace(tiny, evaluation=EvaluationConfig((path,), 0.5))
    result = materialize(cfg, tmp_path / "no-beir")
    [mat] = result.asset_materializations_for_node("retrieval_eval")
    assert mat.metadata[HIT_AT_5_KEY].value == 1.0 and "no evaluation dataset" in mat.metadata["beir_skipped"].value
    checks = checks_of(result)
    assert checks["questions_hit_at_5_floor"].passed
    assert not checks["hybrid_ndcg_floor"].passed
    assert "no evaluation dataset" in checks["hybrid_ndcg_floor"].metadata["problem"].value


def test_the_asset_fails_clearly_on_a_bad_file_or_a_missing_index(tiny, tmp_path):
    bad = write_questions(tmp_path / "bad.jsonl", ['{"q": "x", "expect": "notes/bread"}'])
    for cfg, message in (
        (dataclasses.replace(tiny, evaluation=EvaluationConfig((bad,), 0.5)), "bad.jsonl:1"),
        (
            dataclasses.replace(
                tiny, output_dir=tmp_path / "unbuilt", evaluation=EvaluationConfig((bad.with_name("x"),), 0.5)
            ),
            "no question file at",
        ),
    ):
        result = materialize(cfg, write_beir(tmp_path / "tiny-beir"))
        assert not result.success
        failure = result.failure_data_for_node("retrieval_eval")
        assert message in str(failure.user_failure_data.description), message
    good = write_questions(tmp_path / "good.jsonl", [{"q": "sourdough yeast", "expect": ["notes/bread"]}])
    unbuilt = dataclasses.replace(tiny, output_dir=tmp_path / "unbuilt", evaluation=EvaluationConfig((good,), 0.5))
    failure = materialize(unbuilt, write_beir(tmp_path / "tiny-beir")).failure_data_for_node("retrieval_eval")
    assert "run `rag build` first" in str(failure.user_failure_data.description)
