"""Safe-tier secrets named by structure (issue 23, finding 1): frontmatter keys, table headers
and row labels, definition terms, line labels. A real build of a Safe vault holding them in
every shape must leave no raw value in any output file, in MCP's ``get_document`` or in the
audit; the same shapes without a secret (keyboard shortcuts, a tokenizer's vocabulary, a
password policy) must come through unchanged.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.index import tier_logs
from rag_assets.privacy.audit import audit_store
from rag_assets.privacy.identity import IdentityMap
from rag_assets.privacy.sanitize import Sanitizer, SanitizeTally
from rag_assets.privacy.secrets import SecretDetector
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .conftest import instance_for_test
from .live_server import ServerThread
from .test_mcp import call, http_session, run

FRONTMATTER_NOTE = """---
title: NAS credentials
password: FmPassw0rdZeta71
aws_secret_access_key: Rk2Lm9Qx7Vb3Nw8Zp4Ty6Hc1Jd5Fg0Sa2Ue7Wo3i
api_token: FmS3cretValue884
password_policy: strict
db:
  host: db-main
  password: Db9xPassQ7wLm2
  pin: 48213907
passwords:
  - Lst7Pw0rdAlpha
  - Lst8Pw0rdBravo
api_keys: [Kq3Vd8Lm2Xr7Tn5Wz1Hy4B]
accounts:
  - user: admin
    password: AccPw0rd55Kx
wifi:
  passphrase: "correct horse battery staple"
---
# NAS credentials

The NAS sits in the rack under the router.
"""

TABLE_NOTE = """---
title: Service accounts
---
# Service accounts

| service | user | password |
|---|---|---|
| nas | admin | N4sP@ssw0rd!2024 |
| router | root | `Rt8Qw3Zx6Lp1` |

| Service | Token |
| --- | --- |
| ci | Tk4Bn8Qm2Wx6Zr9Lp3Vc |

| name | Secret |
|:-----|:------:|
| webhook | Sc7Hy2Nm5Qa9Xk3Wd6Rb |

| integration | API key |
| --- | --- |
| weather | Ak2Wn8Rt5Yq3Lm7Zp4Xd |

| Field | Value |
| --- | --- |
| User | backup |
| Password | Rl9Kd3Mx7Vq2 |

## Shortcuts

| Key | Action |
| --- | --- |
| Ctrl+Shift+P | Open the command palette |
| Cmd+K Cmd+S | Keyboard shortcuts editor |

## Tokenizer

| token | id |
| --- | --- |
| hello | 31373 |
| ##ing | 278 |
| [CLS] | 101 |
"""

DEFINITION_NOTE = """---
title: Wifi
---
# Wifi

Guest network password
: Gw5Lp8Qz2Rk7

Admin token

: Ad3Tk9Vm6Xq2Wn8Lz4Pr
: Ad4Tk9Vm6Xq2Wn8Lz4Ps

Channel
: 36
"""

PROSE_NOTE = """---
title: Router
---
# Router

- Password — Pr7Dash9Wq2Lx
- Backup password – Pr8Dash3Zm5Kt
- NAS password → Pr9Arrow4Jv6Nc
- Root password (nas): Pr1Paren8Hs3Qd
- Password for the printer: Pr2Multi6Bx9Fe
- Password policy — strict, 12 characters at least
- Key — Ctrl+Alt+Delete

Password: must be 12 characters long.
"""

# Obsidian's Dataview inline fields: "key:: value" on its own line, or [key:: value] and
# (key:: value) inside a sentence; a Haskell type signature has the same "::" and stays.
DATAVIEW_NOTE = """---
title: Dataview fields
---
# Dataview fields

password:: Dv1Field7Qk3Wz
Root password (nas):: Dv2Label8Rm4Xt
The admin login is [api_token:: Dv3Brack9Sn5Yu] since May, and (secret:: Dv4Paren2Tp6Zv) too.

status:: active
`checkPassword :: Text -> Bool` is the type of the check.
"""

# HTML tables, which Obsidian renders as it does Markdown ones: a header row, a row label, a
# value in <code>; a shortcut table and a settings table's description stay.
HTML_NOTE = """---
title: HTML tables
---
# HTML tables

<table>
  <tr><th>Service</th><th>User</th><th>Password</th></tr>
  <tr><td>nas</td><td>admin</td><td><code>Ht1Head5Qm8Zx</code></td></tr>
</table>

<table><tr><td>API key</td><td> Ht2RowLbl6Wn9Lp3Vc </td></tr></table>

<table><tr><th>Key</th><th>Action</th></tr><tr><td>Ctrl+Shift+P</td><td>Open the palette</td></tr></table>
<table><tr><th>Setting</th><th>Description</th></tr><tr><td>password</td><td>The password used to connect</td></tr></table>
"""

NOTES = {
    "creds.md": FRONTMATTER_NOTE,
    "accounts.md": TABLE_NOTE,
    "wifi.md": DEFINITION_NOTE,
    "router.md": PROSE_NOTE,
    "fields.md": DATAVIEW_NOTE,
    "html.md": HTML_NOTE,
}

SECRETS = [
    # frontmatter: flat, nested, lists, a list of mappings, an int, a quoted phrase
    "FmPassw0rdZeta71",
    "Rk2Lm9Qx7Vb3Nw8Zp4Ty6Hc1Jd5Fg0Sa2Ue7Wo3i",
    "FmS3cretValue884",
    "Db9xPassQ7wLm2",
    "48213907",
    "Lst7Pw0rdAlpha",
    "Lst8Pw0rdBravo",
    "Kq3Vd8Lm2Xr7Tn5Wz1Hy4B",
    "AccPw0rd55Kx",
    "correct horse battery staple",
    # tables: password, token, secret and API key headers, a row label
    "N4sP@ssw0rd!2024",
    "Rt8Qw3Zx6Lp1",
    "Tk4Bn8Qm2Wx6Zr9Lp3Vc",
    "Sc7Hy2Nm5Qa9Xk3Wd6Rb",
    "Ak2Wn8Rt5Yq3Lm7Zp4Xd",
    "Rl9Kd3Mx7Vq2",
    # definition lists
    "Gw5Lp8Qz2Rk7",
    "Ad3Tk9Vm6Xq2Wn8Lz4Pr",
    "Ad4Tk9Vm6Xq2Wn8Lz4Ps",
    # labelled lines
    "Pr7Dash9Wq2Lx",
    "Pr8Dash3Zm5Kt",
    "Pr9Arrow4Jv6Nc",
    "Pr1Paren8Hs3Qd",
    "Pr2Multi6Bx9Fe",
    # Dataview inline fields
    "Dv1Field7Qk3Wz",
    "Dv2Label8Rm4Xt",
    "Dv3Brack9Sn5Yu",
    "Dv4Paren2Tp6Zv",
    # HTML tables
    "Ht1Head5Qm8Zx",
    "Ht2RowLbl6Wn9Lp3Vc",
]

KEPT_IN_TEXT = [
    "| Ctrl+Shift+P | Open the command palette |",
    "| Cmd+K Cmd+S |",
    "| hello | 31373 |",
    "| ##ing | 278 |",
    "| [CLS] | 101 |",
    "| User | backup |",
    "Password policy — strict, 12 characters at least",
    "Key — Ctrl+Alt+Delete",
    "Password: must be 12 characters long.",
    ": 36",
    "status:: active",
    "`checkPassword :: Text -> Bool`",
    "<td>Ctrl+Shift+P</td><td>Open the palette</td>",
    "<td>password</td><td>The password used to connect</td>",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A Safe vault with the notes above and a rag.yaml, built; the config's path."""
    root = tmp_path_factory.mktemp("structured")
    (root / "content" / "posts").mkdir(parents=True)
    (root / "content" / "posts" / "hello.md").write_text("# Hello\n\nA public post.\n", encoding="utf-8")
    for name, text in NOTES.items():
        path = root / "vault" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    config = root / "rag.yaml"
    config.write_text(
        "content_dir: content\noutput_dir: out\nembedder: {name: hashing}\nidentity_map: null\n"
        "private_tier: {embedder: hashing}\nllm: {name: none}\nvaults:\n  - {name: notes, path: vault, tier: safe}\n",
        encoding="utf-8",
    )
    cfg = load_config(config, environ={})
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
    assert outcome.success, outcome.error or outcome.failed_checks
    return config


def test_no_structured_secret_reaches_any_output_file(site):
    out = site.parent / "out"
    safe = out / "data" / "rag-store-blog.db"
    assert safe.is_file()
    files = [p for p in out.rglob("*") if p.is_file() and p.name not in ("rag-store.db", "rag-store.db-wal")]
    assert any(p.name == "rag-store-blog.db" for p in files)
    leaks = []
    for path in files:
        data = path.read_bytes()
        leaks += [(path.name, s[:4]) for s in SECRETS if s.encode() in data or s.lower().encode() in data]
    assert not leaks, f"raw values in output files: {leaks}"
    # The Private store keeps them on purpose: the notes did hold them.
    private = b"".join(p.read_bytes() for p in out.rglob("rag-store.db*"))
    assert all(s.encode() in private for s in SECRETS)


def test_the_same_shapes_without_a_secret_are_kept(site):
    safe = site.parent / "out" / "data" / "rag-store-blog.db"
    with closing(sqlite3.connect(safe)) as conn:
        text = "\n".join(t for (t,) in conn.execute("SELECT text FROM chunks"))
        fronts = {slug: json.loads(f) for slug, f in conn.execute("SELECT slug, frontmatter FROM documents")}
    missing = [k for k in KEPT_IN_TEXT if k not in text]
    assert not missing, f"redacted although not secret: {missing}"
    creds = fronts["creds"]
    assert (
        creds["password_policy"] == "strict"
        and creds["db"]["host"] == "db-main"
        and creds["accounts"][0]["user"] == "admin"
    )
    assert creds["password"] == "[REDACTED:generic_password]" and creds["db"]["pin"] == "[REDACTED:generic_password]"
    assert creds["passwords"] == ["[REDACTED:generic_password]"] * 2


def test_get_document_over_mcp_returns_no_secret(site):
    cfg = load_config(site, environ={})

    async def body(session):
        pages = []
        for slug in ("creds", "accounts", "wifi", "router"):
            pages.append(await call(session, "get_document", collection="notes", slug=slug, tier="safe"))
        return pages

    with ServerThread(create_app(cfg)) as server:
        pages = run(lambda: http_session(server.url), body)
    dump = json.dumps(pages, ensure_ascii=False)
    assert "NAS credentials" in dump and "[REDACTED:generic_password]" in dump
    assert pages[0]["frontmatter"]["db"]["host"] == "db-main"
    assert [s[:4] for s in SECRETS if s in dump] == []


@pytest.mark.parametrize(
    ("frontmatter", "kept"),
    [
        ({"password": "FmPassw0rdZeta71"}, {}),
        ({"db": {"password": "Db9xPassQ7wLm2", "port": 5432}}, {"db": {"port": 5432}}),
        ({"credentials": {"nas": "Cr3dNasQ8xLm2Wv7Zt5Rk"}}, {}),
        ({"api_tokens": ["Tk4Bn8Qm2Wx6Zr9Lp3Vc", "Tk5Bn8Qm2Wx6Zr9Lp3Vd"]}, {}),
        (
            {
                "keys": {"save": "Ctrl+S"},
                "tokens": {"max": 4096},
                "password": {"policy": "strict", "value": "Pv8Lm3Qx7Zr2"},
            },
            {"keys": {"save": "Ctrl+S"}, "tokens": {"max": 4096}, "password": {"policy": "strict"}},
        ),
    ],
)
def test_frontmatter_values_are_read_with_their_key_path(frontmatter, kept):
    sanitizer = Sanitizer(IdentityMap.empty())
    out = sanitizer.value(frontmatter, SanitizeTally())
    dump = json.dumps(out)
    for secret in _leaves(frontmatter):
        if secret not in _leaves(kept):
            assert str(secret) not in dump
    for value in _leaves(kept):
        assert json.dumps(value) in dump


def _leaves(value):
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


# ------------------------------------------------------------------------------------ audit


def _github_token(n: int) -> str:
    return "ghp_" + f"R8xk2LmQ9vTz4WcYp7NbHd3FsJ6gKe1Ao{n:03d}"


def test_audit_scans_every_field_of_the_store(site, tmp_path, capsys):
    """A secret planted directly in each text field of a built Safe store is found, field by field."""
    out = tmp_path / "out"
    shutil.copytree(site.parent / "out", out)
    config = tmp_path / "rag.yaml"
    config.write_text(
        f"content_dir: {site.parent / 'content'}\noutput_dir: {out}\nembedder: {{name: hashing}}\nidentity_map: null\n"
        f"private_tier: {{embedder: hashing}}\nvaults:\n  - {{name: notes, path: {site.parent / 'vault'}, tier: safe}}\n",
        encoding="utf-8",
    )
    assert rag(["audit", "--config", str(config)]) == 0
    capsys.readouterr()

    path = out / "data" / "rag-store-blog.db"
    planted: dict[tuple[str, str], str] = {}  # (item, field) -> secret

    def token(item: str, field: str) -> str:
        planted[(item, field)] = _github_token(len(planted))
        return planted[(item, field)]

    with closing(sqlite3.connect(path)) as conn, conn:
        chunk_id, doc_id = conn.execute("SELECT id, document_id FROM chunks ORDER BY id LIMIT 1").fetchone()
        conn.execute("UPDATE chunks SET text = text || ? WHERE id = ?", (" " + token(chunk_id, "text"), chunk_id))
        conn.execute(
            "UPDATE chunks SET heading_path = ? WHERE id = ?",
            (json.dumps(["Setup", token(chunk_id, "heading_path")]), chunk_id),
        )
        conn.execute(
            "UPDATE documents SET title = ?, tags = ? WHERE id = ?",
            (token(doc_id, "title"), json.dumps([token(doc_id, "tags")]), doc_id),
        )
        front = {
            "db": {"password": "Db9xPassQ7wLm2Zz"},
            "passwords": ["Lst9Pw0rdCharlie"],
            "note": token(doc_id, "frontmatter.note"),
        }
        planted[(doc_id, "frontmatter.db.password")] = "Db9xPassQ7wLm2Zz"
        planted[(doc_id, "frontmatter.password")] = "Lst9Pw0rdCharlie"
        conn.execute("UPDATE documents SET frontmatter = ? WHERE id = ?", (json.dumps(front), doc_id))
    with closing(tier_logs.connect(path)) as conn:  # the logs' file beside the store: audited too
        conn.execute(
            "INSERT INTO search_log (id, at, query, params, results) VALUES (7, 'now', ?, ?, ?)",
            (
                token("search_log#7", "search_log.query"),
                json.dumps({"q": token("search_log#7", "search_log.params.q")}),
                json.dumps([{"id": chunk_id, "snippet": token("search_log#7", "search_log.results.snippet")}]),
            ),
        )
        conn.execute(
            "INSERT INTO answer_log (id, at, session, question, query, answer, sources, abstained, error)"
            " VALUES (3, 'now', 'nas', ?, ?, ?, ?, 0, ?)",
            (
                token("answer_log#3", "answer_log.question"),
                token("answer_log#3", "answer_log.query"),
                token("answer_log#3", "answer_log.answer"),
                json.dumps([token("answer_log#3", "answer_log.sources")]),
                token("answer_log#3", "answer_log.error"),
            ),
        )

    report = audit_store(path, "safe", SecretDetector())
    found = {(f.item_id, f.field) for f in report.findings}
    missed = sorted(set(planted) - found)
    assert not missed, f"the audit missed {missed}"
    assert report.rows_scanned["search_log"] == 1 and report.rows_scanned["answer_log"] == 1

    assert rag(["audit", "--config", str(config)]) == 1
    printed = capsys.readouterr().out
    assert "answer_log (1)" in printed and "search_log (1)" in printed
    assert not [s[:8] for s in planted.values() if s in printed or s[4:] in printed]


def test_an_audit_preview_never_shows_the_secret_next_to_its_finding(site, tmp_path, capsys):
    """Two passwords a line apart are each other's context: the preview of the second showed the
    first raw (short values are no "long token"), and a long one cut by the window's edge to 15
    characters slipped through too. The previews reach the terminal, --json and the Dagster
    check's metadata, stored in the event log."""
    out = tmp_path / "out"
    shutil.copytree(site.parent / "out", out)
    config = tmp_path / "rag.yaml"
    config.write_text(
        f"content_dir: {site.parent / 'content'}\noutput_dir: {out}\nembedder: {{name: hashing}}\nidentity_map: null\n"
        f"private_tier: {{embedder: hashing}}\nvaults:\n  - {{name: notes, path: {site.parent / 'vault'}, tier: safe}}\n",
        encoding="utf-8",
    )
    neighbours = ["Pw1aQb9Zz", "Sc2QbXb8Yy", "DataviewPwAa1122", "DataviewTokBb3344x"]
    planted = (
        f"\ndb_password: {neighbours[0]}\npassword: {neighbours[1]}\n\n"
        f"password:: {neighbours[2]}\ntoken:: {neighbours[3]}\n"
    )
    with closing(sqlite3.connect(out / "data" / "rag-store-blog.db")) as conn, conn:
        chunk_id = conn.execute("SELECT id FROM chunks ORDER BY id LIMIT 1").fetchone()[0]
        conn.execute("UPDATE chunks SET text = text || ? WHERE id = ?", (planted, chunk_id))
    for extra in ([], ["--json"]):
        assert rag(["audit", "--config", str(config), *extra]) == 1
        printed = capsys.readouterr().out
        assert printed.count(chunk_id) >= 4, printed
        assert [s[:4] for s in neighbours if s in printed or s[1:] in printed or s[:-1] in printed] == []
