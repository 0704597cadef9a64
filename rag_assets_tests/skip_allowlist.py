"""No silent skips under CI (issue 29): with ``CI=true`` in the environment a skipped test is a
failure, unless it is on the short allow-list below, each entry with its reason.

conftest.py imports the two hooks, so the whole suite runs under them: a test that skips at set-up,
in its body or at collection (a module-level ``pytest.importorskip``) is reported as failed, with
the skip's own reason, when CI is true and the allow-list does not name it. Outside CI a skip stays
a skip. ``xfail`` is not a skip and is left alone. docs/development.md lists the entries too.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class AllowedSkip:
    """A test (``file::function``, every parametrisation) or a whole file (``file``) that may skip."""

    node: str
    reason: str


ALLOWED_SKIPS: tuple[AllowedSkip, ...] = (
    AllowedSkip(
        "rag_assets_tests/test_bench_smoke.py::test_the_bench_runs_at_a_tiny_size[bm25_reference]",
        "compares with bm25s and PyStemmer from a site-packages named by RAG_BENCH_BM25_REFERENCE_SITE, never a dependency",
    ),
    AllowedSkip(
        "rag_assets_tests/test_bench_smoke.py::test_the_bench_runs_at_a_tiny_size[long_query_speed]",
        "times bm25s and PyStemmer from a site-packages named by RAG_BENCH_BM25_REFERENCE_SITE, never a dependency",
    ),
    AllowedSkip(
        "rag_assets_tests/test_incremental.py::test_a_change_reverted_after_a_build_killed_before_publishing_is_not_published",
        "timing: on a very loaded machine the build can reach publish_index before the kill, and then the test proves nothing",
    ),
)


def under_ci() -> bool:
    """``CI=true`` (as GitHub Actions, GitLab and most CI services set it; ``1`` too)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1")


def allowed_skip(nodeid: str, allowlist: tuple[AllowedSkip, ...] | None = None) -> AllowedSkip | None:
    """The allow-list entry naming this test or its file, if any."""
    for entry in ALLOWED_SKIPS if allowlist is None else allowlist:
        if nodeid == entry.node or nodeid.startswith((entry.node + "::", entry.node + "[")):
            return entry
    return None


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason pytest recorded for a skip (its long form is ``(path, line, reason)``)."""
    longrepr = report.longrepr
    reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


def fail_unlisted_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    """Turn ``report``'s skip into a failure under CI unless the allow-list names the test."""
    if not (report.skipped and under_ci()) or hasattr(report, "wasxfail") or allowed_skip(report.nodeid):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI=true, and not on the allow-list (rag_assets_tests/skip_allowlist.py): {skip_reason(report)}"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test's set-up, call or teardown report, its skip made a failure under CI when not allowed."""
    report = yield
    fail_unlisted_skip(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A module skipped as a whole (``allow_module_level``, ``importorskip``) fails its collection under CI."""
    report = yield
    fail_unlisted_skip(report)
    return report
