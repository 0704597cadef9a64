"""The suite's order (suite_order.py): whole modules, the costliest recorded first, each module's
tests in their written order; the costs read from a ``--durations`` report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import suite_order
from .conftest import REPO_ROOT

PLUGIN = ("-p", "rag_assets_tests.suite_order", "-W", "ignore::pytest.PytestAssertRewriteWarning")

DURATIONS = """
============================= slowest durations ==============================
56.02s call     rag_assets_tests/test_dagster_dev.py::test_dagster_dev_sensor[postgres]
4.50s setup    rag_assets_tests/test_search.py::test_a[x::y]
0.50s teardown rag_assets_tests/test_search.py::test_b
0.01s call     rag_assets_tests/test_search.py::test_b
(3 durations < 0.005s hidden.  Use -vv to show these durations.)
"""


def test_the_costs_are_each_modules_setup_call_and_teardown_summed() -> None:
    assert suite_order.costs_from_durations(DURATIONS.splitlines()) == {
        "rag_assets_tests/test_dagster_dev.py": 56.0,
        "rag_assets_tests/test_search.py": 5.0,
    }


def test_modules_run_costliest_first_whole_and_in_their_own_order(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module the costs do not name counts as a median one; equal costs keep the collected order."""
    for name in ("test_cheap", "test_dear", "test_new", "test_tie"):
        pytester.makepyfile(**{name: "def test_one(): pass\ndef test_two(): pass\n"})
    costs = pytester.path / "costs.json"
    costs.write_text(json.dumps({"test_cheap.py": 1.0, "test_dear.py": 50.0, "test_tie.py": 1.0, "gone.py": 9}))
    monkeypatch.setattr(suite_order, "COSTS_PATH", costs)
    result = pytester.runpytest(*PLUGIN, "--collect-only", "-q")
    ids = [line for line in result.outlines if "::" in line]
    # The median of 1, 50, 1 and 9 is 5: the new module goes between the dear one and the cheap ones.
    modules = ["test_dear.py", "test_new.py", "test_cheap.py", "test_tie.py"]
    assert ids == [f"{module}::{test}" for module in modules for test in ("test_one", "test_two")]


def test_without_a_costs_file_the_collected_order_stays(tmp_path: Path) -> None:
    assert suite_order.load_costs(tmp_path / "missing.json") == {}


def test_the_recorded_costs_name_modules_that_exist() -> None:
    costs = suite_order.load_costs()
    assert costs, f"{suite_order.COSTS_PATH} is missing or empty"
    assert [module for module in costs if not (REPO_ROOT / module).is_file()] == []
