"""The identity map: replace identifying values in Safe-tier text with stable placeholders.

A map is a JSON file (``identity_map.json`` at the repository root by default)::

    {
      "version": 1,
      "salt": "any string; keys the {hash} of placeholders",
      "rules": [
        {"kind": "hostname", "literal": "pve01.home.arpa", "placeholder": "[HOST:hv-a]"},
        {"kind": "user", "literal": "jdoe", "placeholder": "[USER:a]", "word": true},
        {"kind": "ip", "regex": "(?<![\\\\d.])10(?:\\\\.\\\\d{1,3}){3}(?!\\\\.?\\\\d)",
         "placeholder": "[IP:{hash}]"}
      ]
    }

Each rule has a ``kind`` (free text, used for the per-kind counts and by leak audits),
exactly one of ``literal`` (plain text) or ``regex`` (Python syntax), and a ``placeholder``.
Optional fields: ``ignore_case`` (default true), ``word`` (default false: when true the
match may not be preceded or followed by a word character ``[A-Za-z0-9_]``) and ``comment``
(ignored). ``{hash}`` in a placeholder becomes the first 6 hex characters of
HMAC-SHA256(salt, matched value), the value lower-cased first for ``ignore_case`` rules, so
one value always gets the same placeholder and different values (almost surely) differ.

Literal rules are applied before regex rules. Each set is scanned in one pass over the
original text with one combined regex: the longest literal wins where several start at the
same place, and among regexes the first listed rule wins. Regexes only search the text
between literal matches, so a placeholder is never replaced again. A placeholder may not
itself match any rule; :meth:`IdentityMap.load` checks this, so applying a map is idempotent
and :meth:`IdentityMap.find` reports nothing in text the map has already been applied to.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HASH_FIELD = "{hash}"
HASH_LENGTH = 6
SUPPORTED_VERSION = 1

_TOP_LEVEL_KEYS = frozenset({"version", "salt", "rules", "comment", "description", "$comment"})
_RULE_KEYS = frozenset({"kind", "literal", "regex", "placeholder", "ignore_case", "word", "comment"})
# Backreferences would point at the wrong group once a rule sits inside the combined regex.
_BACKREFERENCE = re.compile(r"(?<!\\)(?:\\\\)*\\(?:[1-9]|g<)|\(\?P=")
# Sample {hash} values used to check that rendered placeholders match no rule.
_SAMPLE_HASHES = ("000000", "a1b2c3", "ffffff")
_WORD_BEFORE = r"(?<!\w)"
_WORD_AFTER = r"(?!\w)"


class IdentityMapError(ValueError):
    """The identity map cannot be used: missing, unreadable, not JSON, or a rule that is wrong.
    The message names the file (and the rule); the CLI reports it as a configuration error."""


@dataclass(frozen=True)
class IdentityRule:
    """One rule of the map, with its pattern compiled on its own (case and word options applied)."""

    kind: str
    pattern: re.Pattern[str]
    placeholder: str
    source: str = "regex"  # "literal" or "regex"
    value: str = ""  # the literal text or the regex source, as written in the map
    ignore_case: bool = True
    word: bool = False
    index: int = 0  # position in the map's "rules" list

    def render(self, matched: str, salt: bytes) -> str:
        """The placeholder for one matched value."""
        if HASH_FIELD not in self.placeholder:
            return self.placeholder
        key = matched.lower() if self.ignore_case else matched
        digest = hmac.new(salt, key.encode("utf-8"), hashlib.sha256).hexdigest()[:HASH_LENGTH]
        return self.placeholder.replace(HASH_FIELD, digest)


@dataclass(frozen=True)
class _Hit:
    rule: IdentityRule
    start: int
    end: int


class IdentityMap:
    """A loaded identity map. Immutable; build it with :meth:`load`, :meth:`from_dict` or :meth:`empty`."""

    def __init__(self, rules: tuple[IdentityRule, ...], salt: str = "", source: str = "<identity map>") -> None:
        self.rules: tuple[IdentityRule, ...] = rules
        self.salt: str = salt
        self.source: str = source
        self._salt_bytes = salt.encode("utf-8")
        literals = sorted(
            (r for r in rules if r.source == "literal"),
            key=lambda r: (-len(r.value), r.index),
        )
        regexes = [r for r in rules if r.source == "regex"]
        self._literal_re, self._literal_groups = _combine(literals, source, by_first_char=True)
        self._regex_re, self._regex_groups = _combine(regexes, source)

    # ------------------------------------------------------------------ construction

    @classmethod
    def empty(cls) -> IdentityMap:
        """A map without rules: :meth:`apply` returns the text unchanged."""
        return cls((), "", "<empty identity map>")

    @classmethod
    def load(cls, path: Path) -> IdentityMap:
        """Read and validate a map file; every problem is a ValueError naming the file (and rule)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise IdentityMapError(f"identity map {path}: file does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise IdentityMapError(f"identity map {path}: cannot read the file ({exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise IdentityMapError(
                f"identity map {path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from None
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Any, source: str = "<identity map>") -> IdentityMap:
        """Build a map from already-parsed JSON (same validation as :meth:`load`)."""
        where = f"identity map {source}"
        if not isinstance(data, dict):
            raise IdentityMapError(f"{where}: the top level must be a JSON object with a 'rules' list")
        unknown = sorted(set(data) - _TOP_LEVEL_KEYS)
        if unknown:
            raise IdentityMapError(f"{where}: unknown top-level key(s) {', '.join(map(repr, unknown))}")
        version = data.get("version", SUPPORTED_VERSION)
        if isinstance(version, bool) or version != SUPPORTED_VERSION:
            raise IdentityMapError(f"{where}: unsupported version {version!r} (this code reads version 1)")
        salt = data.get("salt", "")
        if not isinstance(salt, str):
            raise IdentityMapError(f"{where}: 'salt' must be a string")
        raw_rules = data.get("rules")
        if not isinstance(raw_rules, list):
            raise IdentityMapError(f"{where}: 'rules' must be a list of rule objects")
        rules = tuple(_parse_rule(raw, i, where) for i, raw in enumerate(raw_rules))
        identity_map = cls(rules, salt, source)
        identity_map._check_placeholders(where)
        return identity_map

    # ------------------------------------------------------------------ use

    def apply(self, text: str) -> tuple[str, dict[str, int]]:
        """The text with every identifying value replaced, and the number of replacements per kind."""
        hits = self._scan(text)
        if not hits:
            return text, {}
        counts: dict[str, int] = {}
        parts: list[str] = []
        pos = 0
        for hit in hits:
            parts.append(text[pos : hit.start])
            parts.append(hit.rule.render(text[hit.start : hit.end], self._salt_bytes))
            counts[hit.rule.kind] = counts.get(hit.rule.kind, 0) + 1
            pos = hit.end
        parts.append(text[pos:])
        return "".join(parts), counts

    def find(self, text: str) -> list[tuple[str, int, int]]:
        """(kind, start, end) of every identifying value present in the text, in text order."""
        return [(hit.rule.kind, hit.start, hit.end) for hit in self._scan(text)]

    def fingerprint(self) -> str:
        """SHA-256 of the normalised rules and salt: changes whenever the output of :meth:`apply` may."""
        normalised = {
            "version": SUPPORTED_VERSION,
            "salt": self.salt,
            "rules": [
                {
                    "kind": r.kind,
                    r.source: r.value,
                    "placeholder": r.placeholder,
                    "ignore_case": r.ignore_case,
                    "word": r.word,
                }
                for r in self.rules
            ],
        }
        blob = json.dumps(normalised, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def kinds(self) -> frozenset[str]:
        """The kinds the rules cover."""
        return frozenset(r.kind for r in self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __repr__(self) -> str:
        return f"IdentityMap({len(self.rules)} rules from {self.source})"

    # ------------------------------------------------------------------ internals

    def _scan(self, text: str) -> list[_Hit]:
        """Non-overlapping matches, literals first, then regexes outside the literal matches."""
        if not self.rules or not text:
            return []
        hits = list(_iter_hits(self._literal_re, self._literal_groups, text, 0, len(text)))
        if self._regex_re is None:
            return hits
        # Regexes only see the gaps between literal matches (each gap as if the text ended
        # there), so a literal's placeholder is never replaced or partly covered again.
        merged: list[_Hit] = []
        gap_start = 0
        for hit in hits:
            merged.extend(_iter_hits(self._regex_re, self._regex_groups, text, gap_start, hit.start))
            merged.append(hit)
            gap_start = hit.end
        merged.extend(_iter_hits(self._regex_re, self._regex_groups, text, gap_start, len(text)))
        return merged

    def _check_placeholders(self, where: str) -> None:
        """A rendered placeholder must not match any rule (else replacing would not be stable)."""
        for rule in self.rules:
            samples = (
                [rule.placeholder.replace(HASH_FIELD, h) for h in _SAMPLE_HASHES]
                if HASH_FIELD in rule.placeholder
                else [rule.placeholder]
            )
            for sample in samples:
                for context in (sample, f" {sample} "):
                    hits = self._scan(context)
                    if hits:
                        other = hits[0].rule
                        raise IdentityMapError(
                            f"{where}: rule {rule.index} ({rule.kind}): placeholder {rule.placeholder!r} "
                            f"is itself matched by rule {other.index} ({other.kind}, {other.source} "
                            f"{other.value!r}); choose a placeholder that no rule matches"
                        )


def _parse_rule(raw: Any, index: int, where: str) -> IdentityRule:
    at = f"{where}: rule {index}"
    if not isinstance(raw, dict):
        raise IdentityMapError(f"{at}: must be an object with kind, literal or regex, and placeholder")
    unknown = sorted(set(raw) - _RULE_KEYS)
    if unknown:
        raise IdentityMapError(f"{at}: unknown key(s) {', '.join(map(repr, unknown))}")
    kind = raw.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise IdentityMapError(f"{at}: missing or empty 'kind'")
    placeholder = raw.get("placeholder")
    if not isinstance(placeholder, str) or not placeholder:
        raise IdentityMapError(f"{at} ({kind}): missing or empty 'placeholder'")
    if "\n" in placeholder or "\r" in placeholder:
        raise IdentityMapError(f"{at} ({kind}): the placeholder may not contain a line break")
    has_literal, has_regex = "literal" in raw, "regex" in raw
    if has_literal == has_regex:
        raise IdentityMapError(f"{at} ({kind}): needs exactly one of 'literal' or 'regex'")
    options = {}
    for option, default in (("ignore_case", True), ("word", False)):
        value = raw.get(option, default)
        if not isinstance(value, bool):
            raise IdentityMapError(f"{at} ({kind}): '{option}' must be true or false")
        options[option] = value
    if "comment" in raw and not isinstance(raw["comment"], str):
        raise IdentityMapError(f"{at} ({kind}): 'comment' must be a string")
    source = "literal" if has_literal else "regex"
    value = raw[source]
    if not isinstance(value, str) or not value:
        raise IdentityMapError(f"{at} ({kind}): '{source}' must be a non-empty string")
    if source == "literal":
        body = re.escape(value)
    else:
        if _BACKREFERENCE.search(value):
            raise IdentityMapError(f"{at} ({kind}): regex {value!r} uses a backreference, which is not supported")
        try:
            re.compile(value)
        except re.error as exc:
            raise IdentityMapError(f"{at} ({kind}): invalid regex {value!r}: {exc}") from None
        body = value
    if options["word"]:
        body = f"{_WORD_BEFORE}(?:{body}){_WORD_AFTER}"
    scoped = f"(?{'i' if options['ignore_case'] else '-i'}:{body})"
    try:
        pattern = re.compile(scoped)
        # The combined regex wraps each rule in a named group; check that this works per rule
        # so an error names the rule instead of the whole map.
        re.compile(f"(?P<_r{index}>{scoped})")
    except re.error as exc:
        raise IdentityMapError(
            f"{at} ({kind}): regex {value!r} cannot be used inside the combined pattern: {exc} "
            "(global inline flags such as (?i) are not allowed; use the ignore_case field)"
        ) from None
    if pattern.fullmatch("") is not None:
        raise IdentityMapError(f"{at} ({kind}): regex {value!r} matches the empty string")
    return IdentityRule(
        kind=kind,
        pattern=pattern,
        placeholder=placeholder,
        source=source,
        value=value,
        ignore_case=options["ignore_case"],
        word=options["word"],
        index=index,
    )


def _combine(
    rules: list[IdentityRule], source: str, by_first_char: bool = False
) -> tuple[re.Pattern[str] | None, Mapping[int, IdentityRule]]:
    """One alternation of the rules' patterns, in the given order; group number -> rule.

    With ``by_first_char`` (literals only) the alternatives are grouped by their first
    character behind a one-character lookahead, so that at most text positions the engine
    rejects the whole alternation after one test instead of trying every literal.
    """
    if not rules:
        return None, {}
    if by_first_char:
        groups: dict[str, list[IdentityRule]] = {}
        for rule in rules:  # keeps the given (longest first) order inside each group
            groups.setdefault(rule.value[0].lower(), []).append(rule)
        alternatives = []
        for first, members in groups.items():
            inner = "|".join(f"(?P<_r{r.index}>{r.pattern.pattern})" for r in members)
            alternatives.append(f"(?=(?i:{re.escape(first)}))(?:{inner})")
    else:
        alternatives = [f"(?P<_r{r.index}>{r.pattern.pattern})" for r in rules]
    try:
        combined = re.compile("|".join(alternatives))
    except re.error as exc:  # pragma: no cover - each rule was checked on its own
        raise IdentityMapError(f"identity map {source}: the rules cannot be combined: {exc}") from None
    by_group = {combined.groupindex[f"_r{r.index}"]: r for r in rules}
    return combined, by_group


def _iter_hits(
    pattern: re.Pattern[str] | None,
    groups: Mapping[int, IdentityRule],
    text: str,
    pos: int,
    endpos: int,
) -> Iterator[_Hit]:
    """Non-empty matches of the combined pattern inside text[pos:endpos] (lookbehinds see before pos)."""
    if pattern is None:
        return
    while pos < endpos:
        m = pattern.search(text, pos, endpos)
        if m is None:
            return
        start, end = m.span()
        if end == start:
            pos = start + 1
            continue
        # lastindex is the outermost group that closed last: the rule's own wrapper group.
        rule = groups[m.lastindex] if m.lastindex is not None and m.lastindex in groups else _rule_of(m, groups)
        yield _Hit(rule, start, end)
        pos = end


def _rule_of(m: re.Match[str], groups: Mapping[int, IdentityRule]) -> IdentityRule:
    for number, rule in groups.items():  # pragma: no cover - lastindex always names the wrapper
        if m.start(number) != -1:
            return rule
    raise AssertionError("a match without a rule group")  # pragma: no cover
