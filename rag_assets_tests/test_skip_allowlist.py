"""The CI skip policy (skip_allowlist.py, issue 29): under CI=true a skip is a failure unless the
allow-list names the test; without CI a skip stays a skip. Each test runs a small suite of its
own through pytest's ``pytester``, with the policy loaded as a plugin (``-p``), as conftest.py
loads it for this suite.
"""

from __future__ import annotations

import ast

import pytest

from . import skip_allowlist
from .conftest import REPO_ROOT
from .skip_allowlist import AllowedSkip

# The module is imported already (this suite's conftest.py): no assertion rewriting to warn about.
PLUGIN = ("-p", "rag_assets_tests.skip_allowlist", "-W", "ignore::pytest.PytestAssertRewriteWarning")

SKIPPING = """
import pytest

@pytest.fixture
def missing_service():
    pytest.skip("no service here")

def test_skips_in_its_body():
    pytest.skip("no extra here")

@pytest.mark.skipif(True, reason="no corpus here")
def test_skipped_by_a_mark():
    pass

def test_skips_in_a_fixture(missing_service):
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_an_expected_failure():
    assert False

def test_passes():
    pass
"""


def test_under_ci_every_skip_fails_with_its_reason(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_policy=SKIPPING)
    result = pytester.runpytest(*PLUGIN)
    # A skip in the test's body fails it; one at set-up (a skipif mark, a fixture) errors it.
    result.assert_outcomes(passed=1, failed=1, errors=2, xfailed=1)
    result.stdout.fnmatch_lines(
        [
            "*skipped under CI=true, and not on the allow-list*: no extra here",
            "*skipped under CI=true, and not on the allow-list*: no corpus here",
            "*skipped under CI=true, and not on the allow-list*: no service here",
        ]
    )


def test_under_ci_a_module_skipped_as_a_whole_fails_its_collection(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(
        test_module_skip='import pytest\npytest.importorskip("no_such_extra_module")\n\ndef test_x():\n    pass\n'
    )
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*skipped under CI=true, and not on the allow-list*no_such_extra_module*"])


def test_under_ci_an_allow_listed_skip_stays_a_skip(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(
        skip_allowlist,
        "ALLOWED_SKIPS",
        (
            AllowedSkip("test_policy.py::test_skips_in_its_body", "a reason"),
            AllowedSkip("test_policy.py::test_skipped_by_a_mark", "a reason"),
            AllowedSkip("test_policy.py::test_skips_in_a_fixture", "a reason"),
            AllowedSkip("test_module_skip.py", "a whole file"),
        ),
    )
    pytester.makepyfile(
        test_policy=SKIPPING, test_module_skip='import pytest\npytest.skip("gone", allow_module_level=True)\n'
    )
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1, skipped=4, xfailed=1)


@pytest.mark.parametrize("value", [None, "false", ""])
def test_without_ci_a_skip_stays_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    pytester.makepyfile(test_policy=SKIPPING)
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1, skipped=3, xfailed=1)


def test_an_entry_matches_its_test_every_parametrisation_or_its_file_and_nothing_else() -> None:
    entries = (AllowedSkip("t.py::test_a", "r"), AllowedSkip("u.py", "r"))
    for nodeid in ("t.py::test_a", "t.py::test_a[http]", "u.py", "u.py::test_b", "u.py::C::test_c"):
        assert skip_allowlist.allowed_skip(nodeid, entries) is not None, nodeid
    for nodeid in ("t.py::test_ab", "t.py::test_b", "tt.py::test_a", "u.pyc", "v/u.py"):
        assert skip_allowlist.allowed_skip(nodeid, entries) is None, nodeid


def test_every_allow_list_entry_names_a_test_that_exists_and_says_why() -> None:
    """An entry left behind by a renamed or deleted test would allow nothing, silently."""
    assert len(skip_allowlist.ALLOWED_SKIPS) <= 12  # a short list: each entry is a debt
    for entry in skip_allowlist.ALLOWED_SKIPS:
        path, _, function = entry.node.partition("::")
        assert (REPO_ROOT / path).is_file(), entry.node
        assert len(entry.reason) > 20, entry.node
        if function:
            tree = ast.parse((REPO_ROOT / path).read_text(encoding="utf-8"))
            name = function.split("[", 1)[0]  # an entry may name one parametrisation (test[id])
            assert name in {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}, entry.node
