"""The rule engine: load rules.toml once, compile it, and run it over a text.

Every rule names literal *keywords*, one of which must occur in the text before its regex
runs (for ``scope = "token"`` rules: in the long runs of token characters, about 15% of a
Markdown text), or, when it has no literal to look for, a cheap literal-led *prefilter*
regex.  Most texts wake up two or three rules, so the per-call cost is mostly ``str in str``
scans at C speed.  Each match then becomes a candidate span that the rule's named check
(checks.py) keeps or drops.  The two scanners that are code rather than one regex (private-key
blocks, generic assignments) are listed in the same table and run after the rules.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from rag_assets.privacy.secrets import generic, pem, structured
from rag_assets.privacy.secrets.checks import (
    CHECKS,
    KINDS,
    SPANS,
    Candidate,
    KindOf,
    Span,
)
from rag_assets.privacy.secrets.context import lower_same_length

RULES_FILE = "rules.toml"
_PACKAGE = __package__ or "rag_assets.privacy.secrets"

# Specificity used when two findings overlap: the more specific kind names the merged span.
PRIORITIES = {"vendor": 40, "key_block": 35, "structure": 30, "email": 20, "generic": 10}
VENDOR = PRIORITIES["vendor"]

# Code that finds what one regex cannot: (text, lower-cased text) -> (start, end, kind).
ScannerFn = Callable[[str, str], Iterable[tuple[int, int, str]]]
SCANNERS: dict[str, ScannerFn] = {
    "private_key_blocks": pem.spans,
    "generic_assignments": generic.spans,
    "structured_fields": structured.spans,
}

# start, end, kind, rule label, priority: what the detector merges into findings.
Raw = tuple[int, int, str, str, int]

# "xoxp-1234-...####": a vendor token followed by a mask is a masked or truncated one in docs.
_MASKED_AFTER_RE = re.compile(r"[-_.]?(?:#{3}|\*{3}|\.{3}|\u2026|[xX]{4})")
# Runs of characters a token can be made of; every "token"-scope rule matches inside one.
_TOKEN_RUN_RE = re.compile(r"[A-Za-z0-9_\-.:/+=~]{16,}")


class RuleTableError(ValueError):
    """rules.toml names something unknown, repeats an id, or has a regex that does not compile."""


@dataclass(frozen=True)
class Rule:
    """One compiled [[rule]] of the table."""

    id: str
    kind: str
    pattern: re.Pattern[str]
    keywords: tuple[str, ...]
    scope: str  # "token" or "text": where the keywords are looked for
    case_sensitive: bool
    groups: tuple[int | str, ...]  # the first of these that took part holds the value
    priority: int
    check: Callable[[Candidate], bool] | None
    kind_by: KindOf | None
    span: Span | None
    prefilter: re.Pattern[str] | None
    examples: tuple[str, ...]

    def candidates(self, text: str) -> Iterator[Raw]:
        """Every match that passes the rule's check, as a raw finding."""
        for m in self.pattern.finditer(text):
            found = self.span(m, text) if self.span is not None else self._group_span(m)
            if found is None or found[1] <= found[0]:
                continue
            start, end = found
            candidate = Candidate(text[start:end], start, end, m, text)
            if self.check is not None and not self.check(candidate):
                continue
            if self.priority == VENDOR and _MASKED_AFTER_RE.match(text, end):
                continue
            kind = self.kind_by(candidate, self.kind) if self.kind_by is not None else self.kind
            yield start, end, kind, f"rule:{self.id}", self.priority

    def _group_span(self, m: re.Match[str]) -> tuple[int, int] | None:
        for group in self.groups:
            if m.group(group) is not None:
                return m.span(group)
        return None


@dataclass(frozen=True)
class Scanner:
    """One [[scanner]] of the table: detection written as code (SCANNERS)."""

    id: str
    kind: str
    run: ScannerFn
    priority: int
    examples: tuple[str, ...]

    def candidates(self, text: str, low: str) -> Iterator[Raw]:
        for start, end, kind in self.run(text, low):
            yield start, end, kind or self.kind, f"rule:{self.id}", self.priority


class RuleTable:
    """The compiled table, with its keywords indexed so a text wakes up only the rules it can match."""

    def __init__(self, rules: tuple[Rule, ...], scanners: tuple[Scanner, ...]) -> None:
        self.rules = rules
        self.scanners = scanners
        self._keywords = _keyword_index(rules)
        self._prefiltered = tuple((i, r.prefilter) for i, r in enumerate(rules) if r.prefilter is not None)

    def candidates(self, text: str) -> list[Raw]:
        """Raw findings of every rule, then of every scanner (overlapping; the detector merges them)."""
        low = lower_same_length(text)
        raw: list[Raw] = []
        for i in sorted(self._active(text, low)):
            raw.extend(self.rules[i].candidates(text))
        for scanner in self.scanners:
            raw.extend(scanner.candidates(text, low))
        return raw

    def _active(self, text: str, low: str) -> set[int]:
        runs = "\n".join(_TOKEN_RUN_RE.findall(text))
        haystacks = {("token", True): runs, ("token", False): runs.lower(), ("text", True): text, ("text", False): low}
        active = {i for i, prefilter in self._prefiltered if prefilter.search(text)}
        for key, keywords in self._keywords.items():
            haystack = haystacks[key]
            for keyword, rule_ids in keywords:
                if keyword in haystack:
                    active.update(rule_ids)
        return active


def _keyword_index(rules: tuple[Rule, ...]) -> dict[tuple[str, bool], tuple[tuple[str, frozenset[int]], ...]]:
    """(scope, case-sensitive) -> ((keyword, ids of the rules it wakes up), ...)."""
    index: dict[tuple[str, bool], dict[str, set[int]]] = {}
    for i, rule in enumerate(rules):
        for keyword in rule.keywords:
            index.setdefault((rule.scope, rule.case_sensitive), {}).setdefault(keyword, set()).add(i)
    return {key: tuple((k, frozenset(ids)) for k, ids in by_keyword.items()) for key, by_keyword in index.items()}


# --------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------


@functools.cache
def load_table() -> RuleTable:
    """The table shipped in the package, compiled once per process."""
    return parse_table(rules_file_bytes())


def rules_file_bytes() -> bytes:
    return resources.files(_PACKAGE).joinpath(RULES_FILE).read_bytes()


def parse_table(data: bytes) -> RuleTable:
    """Compile a rules file; RuleTableError names the entry at fault."""
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RuleTableError(f"{RULES_FILE}: {exc}") from exc
    rules = tuple(_compile_rule(entry) for entry in table.get("rule", []))
    scanners = tuple(_compile_scanner(entry) for entry in table.get("scanner", []))
    ids = [r.id for r in rules] + [s.id for s in scanners]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise RuleTableError(f"{RULES_FILE}: duplicate ids {duplicates}")
    return RuleTable(rules, scanners)


def _compile_rule(entry: dict[str, Any]) -> Rule:
    rule_id = _required(entry, "id", "rule")
    where = f"{RULES_FILE}: rule {rule_id!r}"
    keywords = tuple(entry.get("keywords", ()))
    case_sensitive = bool(entry.get("case_sensitive", False))
    if not case_sensitive and any(k != k.lower() for k in keywords):
        raise RuleTableError(f"{where}: keywords are matched in lower case unless case_sensitive")
    prefilter = _compile_regex(entry["prefilter"], where) if "prefilter" in entry else None
    if not keywords and prefilter is None:
        raise RuleTableError(f"{where}: needs keywords or a prefilter, or it never runs")
    scope = entry.get("scope", "token")
    if scope not in ("token", "text"):
        raise RuleTableError(f"{where}: scope must be 'token' or 'text'")
    group = entry.get("group", 0)
    return Rule(
        id=rule_id,
        kind=_required(entry, "kind", where),
        pattern=_compile_regex(_required(entry, "regex", where), where),
        keywords=keywords,
        scope=scope,
        case_sensitive=case_sensitive,
        groups=tuple(group) if isinstance(group, list) else (group,),
        priority=_priority(entry, where),
        check=_bind_check(entry, where),
        kind_by=_lookup(KINDS, entry.get("kind_by"), "kind_by", where),
        span=_lookup(SPANS, entry.get("span"), "span", where),
        prefilter=prefilter,
        examples=tuple(entry.get("examples", ())),
    )


def _compile_scanner(entry: dict[str, Any]) -> Scanner:
    scanner_id = _required(entry, "id", "scanner")
    where = f"{RULES_FILE}: scanner {scanner_id!r}"
    run = _lookup(SCANNERS, _required(entry, "scanner", where), "scanner", where)
    assert run is not None
    return Scanner(
        scanner_id, _required(entry, "kind", where), run, _priority(entry, where), tuple(entry.get("examples", ()))
    )


def _required(entry: dict[str, Any], key: str, where: str) -> Any:
    if key not in entry:
        raise RuleTableError(f"{where}: missing {key!r}")
    return entry[key]


def _compile_regex(source: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(source)
    except re.error as exc:
        raise RuleTableError(f"{where}: regex does not compile: {exc}") from exc


def _priority(entry: dict[str, Any], where: str) -> int:
    name = entry.get("priority", "vendor")
    if name not in PRIORITIES:
        raise RuleTableError(f"{where}: unknown priority {name!r}; known: {sorted(PRIORITIES)}")
    return PRIORITIES[name]


def _lookup(registry: dict[str, Any], name: str | None, field: str, where: str) -> Any:
    if name is None:
        return None
    if name not in registry:
        raise RuleTableError(f"{where}: unknown {field} {name!r}; known: {sorted(registry)}")
    return registry[name]


def _bind_check(entry: dict[str, Any], where: str) -> Callable[[Candidate], bool] | None:
    """The named check with the rule's ``check_args`` bound (validated against its signature now)."""
    check = _lookup(CHECKS, entry.get("check"), "check", where)
    args = entry.get("check_args", {})
    if check is None:
        if args:
            raise RuleTableError(f"{where}: check_args without a check")
        return None
    try:
        inspect.signature(check).bind(None, **args)
    except TypeError as exc:
        raise RuleTableError(f"{where}: check_args do not fit {entry['check']!r}: {exc}") from exc
    return functools.partial(check, **args) if args else check


# --------------------------------------------------------------------------------------
# Fingerprint
# --------------------------------------------------------------------------------------


@functools.cache  # the package cannot change under a running process; the sensor asks every tick
def source_digest() -> str:
    """SHA-256 of the rules file and of every module of the detector (its checks are code too)."""
    return digest_of(resources.files(_PACKAGE))


def digest_of(folder: Traversable) -> str:
    """SHA-256 over the names and contents of the ``.py`` and ``.toml`` files in ``folder``."""
    digest = hashlib.sha256()
    files = sorted((p for p in folder.iterdir() if p.name.endswith((".py", ".toml"))), key=lambda p: p.name)
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()
