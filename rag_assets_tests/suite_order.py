"""The suite's order: whole modules, the costliest first, so that two xdist workers end together.

`tasks.py test` runs the suite with ``--dist loadfile --no-loadscope-reorder``: each module goes
whole to one worker (its module- and session-scoped builds are made once, not once per worker as
``--dist load`` does), in the order collected. conftest.py imports :func:`pytest_collection_modifyitems`,
which orders the modules by the cost recorded in ``data/module_costs.json`` (CPU-bound seconds of
setup, call and teardown in a ``--durations=0`` run), largest first, each module's own tests in
their written order. Handing the largest jobs out first (longest processing time first) leaves
only small modules for the end, so no worker finishes minutes before the other. A module the file
does not name yet counts as a median one. The order changes when tests run, never what they assert.

Refresh the costs after a module's cost changes much (a whole run, every test's duration listed)::

    python -m pytest -n auto -m "not bench_smoke" --durations=0 --durations-min=0 | tee /tmp/durations.txt
    python -m rag_assets_tests.suite_order /tmp/durations.txt
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

COSTS_PATH = Path(__file__).with_name("data") / "module_costs.json"
# A line of pytest's --durations report: "12.34s call     rag_assets_tests/test_x.py::test_y[a]".
DURATION_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+([^\s:]+\.py)::")


def module_of(nodeid: str) -> str:
    """The module part of a test's node id (``rag_assets_tests/test_x.py``)."""
    return nodeid.split("::", 1)[0]


def load_costs(path: Path | None = None) -> dict[str, float]:
    """The recorded cost per module (``path``, by default data/module_costs.json), in seconds;
    none when the file is missing."""
    try:
        text = (path or COSTS_PATH).read_text(encoding="utf-8")
        return {str(k): float(v) for k, v in json.loads(text).items()}
    except FileNotFoundError:
        return {}


def costs_from_durations(lines: Iterable[str]) -> dict[str, float]:
    """Each module's summed setup, call and teardown seconds from a ``--durations=0`` report."""
    totals: dict[str, float] = defaultdict(float)
    for line in lines:
        match = DURATION_LINE.match(line)
        if match:
            totals[match.group(2)] += float(match.group(1))
    return {module: round(total, 1) for module, total in sorted(totals.items())}


def ordered(items: list[pytest.Item], costs: Mapping[str, float]) -> list[pytest.Item]:
    """``items`` grouped by module, the modules by recorded cost (largest first; an unknown one
    at the median, ties in collection order), each module's tests in collection order."""
    default = statistics.median(costs.values()) if costs else 0.0
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(module_of(item.nodeid), []).append(item)
    modules = sorted(by_module, key=lambda module: -costs.get(module, default))  # stable: ties keep their order
    return [item for module in modules for item in by_module[module]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the costliest modules first (see the module's docstring)."""
    items[:] = ordered(items, load_costs())


def main(argv: list[str]) -> int:
    """Write data/module_costs.json from the ``--durations=0`` report named by ``argv[0]``."""
    if len(argv) != 1:
        print(__doc__)
        return 2
    costs = costs_from_durations(Path(argv[0]).read_text(encoding="utf-8").splitlines())
    if not costs:
        print(f"no --durations lines in {argv[0]}", file=sys.stderr)
        return 1
    COSTS_PATH.write_text(json.dumps(costs, indent=1) + "\n", encoding="utf-8")
    print(f"{len(costs)} modules, {sum(costs.values()):.0f} s in all -> {COSTS_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
