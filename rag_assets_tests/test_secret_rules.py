"""The secret rule table (rag_assets/privacy/secrets/rules.toml): well-formed, shipped, and each
rule finds its own examples."""

from __future__ import annotations

import re
import shutil
import tomllib
from importlib import resources
from pathlib import Path

import pytest

import rag_assets.privacy.secrets as secrets_package
from rag_assets.privacy.secrets import SecretDetector
from rag_assets.privacy.secrets.checks import CHECKS, KINDS, SPANS
from rag_assets.privacy.secrets.engine import (
    PRIORITIES,
    RULES_FILE,
    SCANNERS,
    RuleTableError,
    digest_of,
    load_table,
    parse_table,
    rules_file_bytes,
)

REPO = Path(__file__).resolve().parents[1]
RAW = tomllib.loads(rules_file_bytes().decode("utf-8"))
TABLE = load_table()
DETECTOR = SecretDetector()


def test_rules_file_is_read_from_the_package() -> None:
    # Where importlib.resources finds it is the package directory, so an installed package
    # (wheel) reads its own copy, not the source tree's.
    shipped = resources.files("rag_assets.privacy.secrets").joinpath(RULES_FILE)
    assert shipped.is_file()
    assert Path(str(shipped)).parent == Path(secrets_package.__file__).parent
    assert rules_file_bytes() == shipped.read_bytes()


def test_rules_file_is_package_data_in_the_wheel() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    package_data = pyproject["tool"]["setuptools"]["package-data"]
    assert RULES_FILE in package_data["rag_assets.privacy.secrets"]


def test_every_entry_is_well_formed() -> None:
    ids = [entry["id"] for entry in RAW["rule"] + RAW["scanner"]]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for entry in RAW["rule"]:
        re.compile(entry["regex"])
        assert entry.get("check") is None or entry["check"] in CHECKS, entry["id"]
        assert entry.get("kind_by") is None or entry["kind_by"] in KINDS, entry["id"]
        assert entry.get("span") is None or entry["span"] in SPANS, entry["id"]
        assert entry.get("priority", "vendor") in PRIORITIES, entry["id"]
        assert entry.get("keywords") or entry.get("prefilter"), entry["id"]
        assert entry["kind"] and entry["description"] and entry["source"], entry["id"]
    for entry in RAW["scanner"]:
        assert entry["scanner"] in SCANNERS, entry["id"]
    assert len(TABLE.rules) == len(RAW["rule"]) and len(TABLE.scanners) == len(RAW["scanner"])


@pytest.mark.parametrize("rule", TABLE.rules, ids=lambda r: r.id)
def test_every_rule_finds_its_examples(rule) -> None:  # type: ignore[no-untyped-def]
    assert rule.examples, f"{rule.id} has no example"
    for example in rule.examples:
        spans = [(start, end) for start, end, *_ in rule.candidates(example)]
        assert spans, f"{rule.id} misses its example"
        # The detector (keywords, every rule, merging) redacts it too.
        findings = DETECTOR.find(example)
        assert all(any(f.start <= s and e <= f.end for f in findings) for s, e in spans), rule.id


@pytest.mark.parametrize("scanner", TABLE.scanners, ids=lambda s: s.id)
def test_every_scanner_finds_its_examples(scanner) -> None:  # type: ignore[no-untyped-def]
    assert scanner.examples
    for example in scanner.examples:
        assert list(scanner.candidates(example, example.lower())), f"{scanner.id} misses its example"
        assert DETECTOR.find(example)


def _one_rule(**changes: object) -> bytes:
    entry = {"id": "x", "kind": "x", "regex": "x_[0-9]{8}", "keywords": ["x_"], "description": "d", "source": "s"}
    entry.update(changes)
    lines = ["[[rule]]"] + [f"{key} = {_toml(value)}" for key, value in entry.items()]
    return "\n".join(lines).encode()


def _toml(value: object) -> str:
    if isinstance(value, str):
        return "'''" + value + "'''"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize(
    "changes",
    [
        {"check": "no_such_check"},
        {"kind_by": "no_such_kind"},
        {"span": "no_such_span"},
        {"regex": "x_[0-9"},
        {"priority": "urgent"},
        {"keywords": []},  # and no prefilter: it would never run
        {"keywords": ["X_"]},  # upper case, not case_sensitive: never found in the lowered text
        {"check": "not_fake", "check_args": {"no_such_arg": 1}},
    ],
)
def test_a_bad_entry_is_refused(changes: dict[str, object]) -> None:
    parse_table(_one_rule())  # the entry itself is fine
    with pytest.raises(RuleTableError):
        parse_table(_one_rule(**changes))


def test_duplicate_ids_are_refused() -> None:
    with pytest.raises(RuleTableError, match="duplicate"):
        parse_table(_one_rule() + b"\n\n" + _one_rule())


def test_a_table_built_elsewhere_runs_in_the_detector() -> None:
    table = parse_table(_one_rule(scope="text", check="not_fake", check_args={"skip": 2}))
    assert [(f.kind, f.rule) for f in SecretDetector(table).find("id x_48151623 here")] == [("x", "rule:x")]


def test_fingerprint_changes_with_the_rules_file(tmp_path: Path) -> None:
    package = Path(secrets_package.__file__).parent
    copy = tmp_path / "secrets"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert digest_of(copy) == digest_of(package)
    rules = copy / RULES_FILE
    rules.write_text(rules.read_text(encoding="utf-8") + "\n# a comment changes the Safe tier too\n", encoding="utf-8")
    assert digest_of(copy) != digest_of(package)
