"""The identity map: loading, validation, stable placeholders and the sample vaults."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from rag_assets.privacy.identity import IdentityMap, IdentityRule

from .conftest import REPO_ROOT

MAP_PATH = REPO_ROOT / "identity_map.json"
VAULTS = REPO_ROOT / "content" / "vaults"
SAFE_VAULT = VAULTS / "homelab-notes"
PLANTED = Path(__file__).parent / "data" / "planted_secrets.json"
EXPECTED_KINDS = {"hostname", "domain", "ip", "user", "person", "home_path", "email"}


@pytest.fixture(scope="module")
def real_map() -> IdentityMap:
    return IdentityMap.load(MAP_PATH)


@pytest.fixture(scope="module")
def planted() -> list[dict[str, str]]:
    return json.loads(PLANTED.read_text(encoding="utf-8"))


def write_map(tmp_path: Path, data: object, name: str = "map.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def small_map(tmp_path: Path, rules: list[dict], salt: str = "s") -> IdentityMap:
    return IdentityMap.load(write_map(tmp_path, {"version": 1, "salt": salt, "rules": rules}))


IP_RULE = {"kind": "ip", "regex": r"(?<![\w.])10(?:\.\d{1,3}){3}(?!\.?\d)", "placeholder": "[IP:{hash}]"}


# ---------------------------------------------------------------- the real map


def test_real_map_loads_with_all_kinds(real_map: IdentityMap) -> None:
    assert len(real_map.rules) >= 20
    assert all(isinstance(r, IdentityRule) for r in real_map.rules)
    assert EXPECTED_KINDS <= real_map.kinds()
    sources = {r.source for r in real_map.rules}
    assert sources == {"literal", "regex"}


def test_real_map_covers_home_paths_on_every_os(real_map: IdentityMap) -> None:
    text = "/home/alice/x /Users/bob/y C:\\Users\\carol\\z C:\\\\Users\\\\dave\\\\w"
    out, counts = real_map.apply(text)
    for name in ("alice", "bob", "carol", "dave"):
        assert name not in out
    assert counts == {"home_path": 4}


def test_real_map_covers_private_ranges(real_map: IdentityMap) -> None:
    text = "10.1.2.3 172.20.0.7 192.168.77.8 100.100.1.1 fd12:3456:789a::1 8.8.8.8 127.0.0.1 172.32.0.1"
    out, counts = real_map.apply(text)
    assert counts == {"ip": 5}
    assert "8.8.8.8" in out and "127.0.0.1" in out and "172.32.0.1" in out
    assert "fd12" not in out


def test_real_map_internal_domains(real_map: IdentityMap) -> None:
    text = "unknown.home.arpa printer.lan x.lan.example-home.net example-home.net bob@example-home.net"
    out, counts = real_map.apply(text)
    assert "home.arpa" not in out and ".lan" not in out and "example-home" not in out
    assert counts == {"domain": 4, "email": 1}
    # The special-use zone name alone is not identifying; nor are public names.
    assert real_map.apply("the home.arpa zone, see example.com")[1] == {}


# ---------------------------------------------------------------- placeholders


def test_same_value_same_placeholder_across_instances(tmp_path: Path) -> None:
    first = small_map(tmp_path, [IP_RULE])
    second = IdentityMap.load(tmp_path / "map.json")
    a, _ = first.apply("host 10.0.0.5 and 10.0.0.5 again")
    b, _ = second.apply("elsewhere: 10.0.0.5")
    tokens = re.findall(r"\[IP:[0-9a-f]{6}\]", a)
    assert len(tokens) == 2 and tokens[0] == tokens[1]
    assert b == f"elsewhere: {tokens[0]}"


def test_real_map_placeholders_are_stable(real_map: IdentityMap) -> None:
    again = IdentityMap.load(MAP_PATH)
    text = "nas at 192.168.10.20, db at 10.20.0.21, mystery.home.arpa"
    assert real_map.apply(text) == again.apply(text)


def test_different_values_differ(tmp_path: Path) -> None:
    m = small_map(tmp_path, [IP_RULE])
    values = [f"10.0.{i}.{j}" for i in range(4) for j in range(1, 60)]
    out, counts = m.apply(" ".join(values))
    tokens = out.split()
    assert counts == {"ip": len(values)}
    assert len(set(tokens)) == len(values)


def test_salt_changes_the_hash(tmp_path: Path) -> None:
    a = small_map(tmp_path, [IP_RULE], salt="one").apply("10.0.0.1")[0]
    b = small_map(tmp_path, [IP_RULE], salt="two").apply("10.0.0.1")[0]
    assert a != b


def test_word_boundaries(tmp_path: Path) -> None:
    m = small_map(
        tmp_path,
        [
            {"kind": "user", "literal": "jdoe", "placeholder": "[USER:a]", "word": True},
            {"kind": "project", "literal": "tank", "placeholder": "[P]"},
        ],
    )
    out, counts = m.apply("jdoe jdoe@x jdoes xjdoe jdoe_2 jdoe-lab /home/jdoe/ tanks")
    assert out == "[USER:a] [USER:a]@x jdoes xjdoe jdoe_2 [USER:a]-lab /home/[USER:a]/ [P]s"
    assert counts == {"user": 4, "project": 1}


def test_case_insensitive_by_default(tmp_path: Path) -> None:
    m = small_map(
        tmp_path,
        [
            {"kind": "hostname", "literal": "pve01.home.arpa", "placeholder": "[HOST:a]"},
            {"kind": "name", "literal": "Bob", "placeholder": "[N]", "ignore_case": False, "word": True},
            {"kind": "h", "regex": r"srv\d+", "placeholder": "[S:{hash}]", "word": True},
        ],
    )
    out, _ = m.apply("PVE01.Home.Arpa pve01.home.arpa Bob bob SRV7 srv7")
    parts = out.split()
    assert parts[:2] == ["[HOST:a]", "[HOST:a]"]
    assert parts[2:4] == ["[N]", "bob"]
    assert parts[4] == parts[5]  # hashed case-insensitively


def test_longest_literal_wins(tmp_path: Path) -> None:
    m = small_map(
        tmp_path,
        [
            {"kind": "user", "literal": "jdoe", "placeholder": "[USER:a]", "word": True},
            {"kind": "home_path", "literal": "/home/jdoe", "placeholder": "[HOME:a]"},
            {"kind": "email", "literal": "jdoe@example.org", "placeholder": "[EMAIL:a]"},
        ],
    )
    out, counts = m.apply("/home/jdoe/x jdoe@example.org jdoe")
    assert out == "[HOME:a]/x [EMAIL:a] [USER:a]"
    assert counts == {"home_path": 1, "email": 1, "user": 1}


def test_literals_before_regexes_and_no_rereplacement(tmp_path: Path) -> None:
    m = small_map(
        tmp_path,
        [
            {"kind": "domain", "regex": r"(?:[\w-]+\.)+home\.arpa", "placeholder": "[HOST:{hash}]"},
            {"kind": "hostname", "literal": "pve01.home.arpa", "placeholder": "[HOST:hv-a]"},
            {"kind": "user", "literal": "jdoe", "placeholder": "[USER:a]", "word": True},
        ],
    )
    text = "pve01.home.arpa other.home.arpa jdoe.home.arpa"
    out, counts = m.apply(text)
    assert out.startswith("[HOST:hv-a] [HOST:")
    # The regex match overlapping the 'jdoe' literal is dropped, not applied on top of it.
    assert out.endswith(" [USER:a].home.arpa")
    assert counts == {"hostname": 1, "domain": 1, "user": 1}
    # Idempotent: a second application changes nothing.
    assert m.apply(out)[0] == out


def test_adversarial_text_stays_fast(real_map: IdentityMap) -> None:
    # Long runs that make naive patterns (or retry loops) quadratic.
    samples = [
        "a" * 60_000 + "@pg01.home.arpa",
        "a." * 40_000 + "b",
        "1." * 40_000,
        "fd12:" * 15_000,
        "a@" * 40_000,
    ]
    # Against prose of the same lengths, timed here (about 1.2x on a loaded 2-core machine):
    # a quadratic pattern costs hundreds of times the prose. Measured twice when over, since
    # another process may have had the CPU.
    prose = "The backup job on the storage box copies the photos to the second disk every night. " * 1000
    baseline = min(seconds_to_apply(real_map, [prose[: len(t)] for t in samples]) for _ in range(2))
    took = seconds_to_apply(real_map, samples)
    if took > ADVERSARIAL_RATIO * baseline:
        took = min(took, seconds_to_apply(real_map, samples))
    assert took <= ADVERSARIAL_RATIO * baseline, f"{took:.2f} s against {baseline:.2f} s of prose"


ADVERSARIAL_RATIO = 10


def seconds_to_apply(identity: IdentityMap, texts: list[str]) -> float:
    started = time.perf_counter()
    for text in texts:
        identity.apply(text)
    return time.perf_counter() - started


def test_find_reports_spans_and_nothing_after_apply(real_map: IdentityMap) -> None:
    text = "ssh jdoe@pve01.home.arpa from 192.168.10.5"
    found = real_map.find(text)
    assert [k for k, _, _ in found] == ["user", "hostname", "ip"]
    assert [text[s:e] for _, s, e in found] == ["jdoe", "pve01.home.arpa", "192.168.10.5"]
    out, _ = real_map.apply(text)
    assert real_map.find(out) == []


def test_empty_map() -> None:
    m = IdentityMap.empty()
    assert m.rules == ()
    assert m.apply("pve01 10.0.0.1") == ("pve01 10.0.0.1", {})
    assert m.find("pve01") == []
    assert m.fingerprint() == IdentityMap.empty().fingerprint()


# ---------------------------------------------------------------- fingerprint


def test_fingerprint_tracks_rule_changes(tmp_path: Path) -> None:
    rules = [
        {"kind": "user", "literal": "jdoe", "placeholder": "[USER:a]", "word": True},
        IP_RULE,
    ]
    base = small_map(tmp_path, rules).fingerprint()
    assert small_map(tmp_path, rules).fingerprint() == base
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    commented = [dict(rules[0], comment="only a comment"), IP_RULE]
    assert small_map(tmp_path, commented).fingerprint() == base
    changes = [
        [dict(rules[0], placeholder="[USER:b]"), IP_RULE],
        [dict(rules[0], literal="jdoe2"), IP_RULE],
        [dict(rules[0], word=False), IP_RULE],
        [dict(rules[0], ignore_case=False), IP_RULE],
        [dict(rules[0], kind="person"), IP_RULE],
        [rules[0]],
        [IP_RULE, rules[0]],
    ]
    prints = {small_map(tmp_path, r).fingerprint() for r in changes}
    assert base not in prints and len(prints) == len(changes)
    assert small_map(tmp_path, rules, salt="other").fingerprint() != base


# ---------------------------------------------------------------- bad files


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", r"invalid JSON at line 1"),
        ("[]", r"top level must be a JSON object"),
        ({"rules": "x"}, r"'rules' must be a list"),
        ({"version": 2, "rules": []}, r"unsupported version 2"),
        ({"version": True, "rules": []}, r"unsupported version True"),
        ({"salt": 3, "rules": []}, r"'salt' must be a string"),
        ({"rulez": []}, r"unknown top-level key\(s\) 'rulez'"),
        ({"rules": [IP_RULE, "x"]}, r"rule 1: must be an object"),
        ({"rules": [{"literal": "a", "placeholder": "[A]"}]}, r"rule 0: missing or empty 'kind'"),
        ({"rules": [{"kind": "k", "literal": "a"}]}, r"rule 0 \(k\): missing or empty 'placeholder'"),
        ({"rules": [{"kind": "k", "placeholder": "[A]"}]}, r"rule 0 \(k\): needs exactly one of 'literal' or 'regex'"),
        (
            {"rules": [{"kind": "k", "literal": "a", "regex": "a", "placeholder": "[A]"}]},
            r"needs exactly one of 'literal' or 'regex'",
        ),
        ({"rules": [{"kind": "k", "literal": "", "placeholder": "[A]"}]}, r"'literal' must be a non-empty string"),
        (
            {"rules": [IP_RULE, {"kind": "k", "regex": "(unclosed", "placeholder": "[A]"}]},
            r"rule 1 \(k\): invalid regex '\(unclosed'",
        ),
        (
            {"rules": [{"kind": "k", "regex": "a*", "placeholder": "[A]"}]},
            r"rule 0 \(k\): regex 'a\*' matches the empty string",
        ),
        ({"rules": [{"kind": "k", "regex": r"(a)\1", "placeholder": "[A]"}]}, r"rule 0 \(k\): .*backreference"),
        ({"rules": [{"kind": "k", "regex": "(?i)abc", "placeholder": "[A]"}]}, r"rule 0 \(k\): .*ignore_case"),
        (
            {"rules": [{"kind": "k", "literal": "a", "placeholder": "[A]", "word": "yes"}]},
            r"'word' must be true or false",
        ),
        (
            {"rules": [{"kind": "k", "literal": "a", "placeholder": "[A]", "regexp": "x"}]},
            r"rule 0: unknown key\(s\) 'regexp'",
        ),
    ],
)
def test_bad_files_raise_clear_errors(tmp_path: Path, content: object, expected: str) -> None:
    path = write_map(tmp_path, content)
    with pytest.raises(ValueError, match=expected) as info:
        IdentityMap.load(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        IdentityMap.load(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        # The placeholder contains the literal it replaces.
        (
            [{"kind": "hostname", "literal": "pve01", "placeholder": "[HOST:pve01]", "word": True}],
            r"rule 0 \(hostname\)",
        ),
        # Another rule's regex matches the rendered placeholder.
        (
            [
                {"kind": "user", "literal": "jdoe", "placeholder": "[USER:10.0.0.1]"},
                IP_RULE,
            ],
            r"rule 0 \(user\): placeholder '\[USER:10\.0\.0\.1\]' is itself matched by rule 1 \(ip",
        ),
        # A hashed placeholder matched by a regex for hex strings.
        (
            [{"kind": "id", "regex": r"\b[0-9a-f]{6}\b", "placeholder": "<{hash}>"}],
            r"rule 0 \(id\): placeholder '<\{hash\}>' is itself matched by rule 0",
        ),
    ],
)
def test_placeholder_matching_a_rule_is_rejected(tmp_path: Path, rules: list[dict], expected: str) -> None:
    path = write_map(tmp_path, {"rules": rules})
    with pytest.raises(ValueError, match=expected) as info:
        IdentityMap.load(path)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------- the sample vaults


def safe_notes() -> list[Path]:
    notes = sorted(SAFE_VAULT.rglob("*.md"))
    assert len(notes) >= 8
    return notes


def mapped_literals(identity_map: IdentityMap, kinds: set[str]) -> list[str]:
    return [r.value for r in identity_map.rules if r.source == "literal" and r.kind in kinds]


def test_safe_vault_notes_keep_no_mapped_literal(real_map: IdentityMap) -> None:
    literals = mapped_literals(real_map, {"hostname", "user", "person", "email", "home_path"})
    assert literals
    seen: set[str] = set()
    for note in safe_notes():
        text = note.read_text(encoding="utf-8")
        out, counts = real_map.apply(text)
        assert counts, f"{note}: nothing replaced"
        assert real_map.find(out) == [], note
        lowered = out.lower()
        for literal in literals:
            if literal.lower() in text.lower():
                seen.add(literal)
            assert literal.lower() not in lowered, f"{note}: {literal!r} survived"
        for zone in ("example-home.net", "/home/jdoe", "/users/jdoe", "c:\\users\\jdoe"):
            assert zone not in lowered, f"{note}: {zone!r} survived"
        # Host names in home.arpa are gone; the zone itself may stay (`Host *.home.arpa`, `%h.home.arpa`).
        assert not re.search(r"(?<![%\w-])[\w-]+\.home\.arpa", out), note
    # The sample vault really exercises the map.
    assert len(seen) >= 20


def test_planted_identity_values_are_replaced(real_map: IdentityMap, planted: list[dict[str, str]]) -> None:
    identities = [e for e in planted if e["kind"] == "identity" and e["vault"] == "homelab-notes"]
    assert len(identities) >= 30
    for entry in identities:
        body = (VAULTS / entry["vault"] / entry["file"]).read_text(encoding="utf-8")
        assert real_map.find(entry["text"]), entry
        assert entry["text"] not in real_map.apply(body)[0], entry


def test_not_secrets_survive_the_identity_map(real_map: IdentityMap, planted: list[dict[str, str]]) -> None:
    not_secrets = [e for e in planted if e["kind"] == "not_secret"]
    assert not_secrets
    for entry in not_secrets:
        assert real_map.find(entry["text"]) == [], entry
        body = (VAULTS / entry["vault"] / entry["file"]).read_text(encoding="utf-8")
        assert entry["text"] in real_map.apply(body)[0], entry


# ---------------------------------------------------------------- planted data file


def test_planted_entries_are_exact_substrings(planted: list[dict[str, str]]) -> None:
    for entry in planted:
        assert entry["vault"] in {"homelab-notes", "personal"}, entry
        value = entry["secret"] if "secret" in entry else entry["text"]
        assert ("secret" in entry) != (entry["kind"] in {"not_secret", "identity"}), entry
        assert value and value in (VAULTS / entry["vault"] / entry["file"]).read_text(encoding="utf-8"), entry


def test_planted_secrets_cover_the_required_kinds(planted: list[dict[str, str]]) -> None:
    safe_kinds = {e["kind"] for e in planted if "secret" in e and e["vault"] == "homelab-notes"}
    assert {
        "aws_access_key_id",
        "aws_secret_access_key",
        "github_token",
        "postgres_uri_password",
        "basic_auth_password",
        "bearer_token",
        "env_api_key",
        "env_db_password",
        "yaml_password",
        "slack_webhook",
        "openrouter_key",
        "private_key",
        "jwt",
        "prose_password",
    } <= safe_kinds
    assert any("secret" in e and e["vault"] == "personal" for e in planted)
    secrets = {e["secret"]: e for e in planted if "secret" in e}
    shapes = {
        "aws_access_key_id": r"AKIA[A-Z2-7]{16}",
        "github_token": r"ghp_[A-Za-z0-9]{36}",
        "openrouter_key": r"sk-or-v1-[0-9a-f]{64}",
        "slack_webhook": r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+",
        "jwt": r"eyJ[\w-]+\.[\w-]+\.[\w-]+",
    }
    for value, entry in secrets.items():
        if entry["kind"] in shapes:
            assert re.fullmatch(shapes[entry["kind"]], value), entry
    assert "AKIAIOSFODNN7EXAMPLE" not in secrets


def test_vault_notes_have_frontmatter() -> None:
    import yaml

    notes = sorted(VAULTS.rglob("*.md"))
    assert len(notes) >= 14
    for note in notes:
        text = note.read_text(encoding="utf-8")
        assert text.startswith("---\n"), note
        frontmatter = yaml.safe_load(text.split("---\n", 2)[1])
        assert {"title", "tags", "date"} <= set(frontmatter), note
        assert frontmatter.get("status", "active") in {"active", "archived"}, note
        assert "\n## " in text, note
        assert 150 <= len(text.split()) <= 700, note
