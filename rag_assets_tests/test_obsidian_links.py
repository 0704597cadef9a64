"""Vault links resolved by Obsidian's rules, within one vault: each rule on a fixture vault, the
stores' ``links`` and ``backlinks`` (SQLite migration, the Safe tier's sanitising), the report in
Dagster metadata and `rag check`, and `related` over the CLI, HTTP (a real uvicorn) and MCP (the
SDK's client over streamable HTTP and stdio), on one real Dagster build of two vaults."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import dagster as dg
import pytest

from rag_assets.config import VaultConfig, load_config
from rag_assets.defs.runner import run_build
from rag_assets.embed import HashingEmbedder
from rag_assets.index import store
from rag_assets.index.links import stored_link_report
from rag_assets.ingest.link_resolution import MAX_LINKS_PER_NOTE, resolve_vault
from rag_assets.privacy.audit import audit_store
from rag_assets.privacy.secrets import SecretDetector
from rag_assets.privacy.vaults import build_vault_tier
from rag_assets.records import Document
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app
from rag_assets.serve.tokens import TokenStore

from .conftest import instance_for_test
from .deadline import deadline
from .live_server import ServerThread
from .test_mcp import call, call_error, http_session, stdio_session
from .test_obsidian import GITHUB_TOKEN, SHARED_VAULT, note

EMAIL = "alice.smith@corp-mail.net"
LAB = {
    "Home.md": (
        '---\nrelated: "[[Disks]]"\n---\n# Home\n\n## Intro\n\n'
        "See [[Proxmox setup|the cluster]], [[projects/proxmox setup#Network]], [[Proxmox Setup.md#Storage]],\n"
        "[[Disks#^smart-1]], [[Disks#^nope]], [[Missing note]], [[Todo]], [[../../etc/passwd]], ![[rack.png]],\n"
        f"![[Home]], [[#Intro]], [[Mail {EMAIL}]], [[Disks|{GITHUB_TOKEN}]] and [text](Projects/Proxmox%20setup.md).\n"
    ),
    "Projects/Proxmox setup.md": "# Proxmox setup\n\n## Network\n\nBridges vmbr0 and vmbr1.\n\nEmbeds ![[Disks]].\n",
    "Projects/Local.md": "# Local\n\nThe [[Todo]] of this folder.\n",
    "Projects/Todo.md": "# Todo\n\nOne.\n",
    "Archive/Todo.md": "# Todo\n\nOld.\n",
    "Disks.md": "# Disks\n\nSMART every week ^smart-1\n\n![[Proxmox setup]]\n",
    f"Mail {EMAIL}.md": "# Mail\n\nThe mail server.\n",
    "img/rack.png": "PNG",
}
DIARY = {"Garden.md": "# Garden\n\nTomatoes, see [[Home]] and [[Plan]].\n", "Plan.md": "# Plan\n\nSouth bed.\n"}


def write_vault(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def stored_links(db: Path, doc_id: str) -> tuple[list[dict], list[dict]]:
    with closing(sqlite3.connect(db)) as conn:
        row = conn.execute("SELECT links, backlinks FROM documents WHERE id = ?", (doc_id,)).fetchone()
    return json.loads(row[0] or "[]"), json.loads(row[1] or "[]")


def by_target(links: list[dict]) -> dict[str, dict]:
    return {link["target"] + "#" + link.get("heading", "") + "^" + link.get("block", ""): link for link in links}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Two vaults (lab: safe, diary: private) built by the real Dagster build; (config path, instance)."""
    root = tmp_path_factory.mktemp("links")
    write_vault(root / "vaults" / "lab", LAB)
    write_vault(root / "vaults" / "diary", DIARY)
    write_vault(root / "content" / "docs", {"page.md": "# A page\n\nA public page about links.\n"})
    config = root / "rag.yaml"
    config.write_text(
        "content_dir: content\noutput_dir: out\nembedder: {name: hashing}\nidentity_map: null\n"
        "private_tier: {embedder: hashing}\nllm: {name: none}\n"
        "vaults:\n  - {name: lab, path: vaults/lab, tier: safe}\n  - {name: diary, path: vaults/diary, tier: private}\n",
        encoding="utf-8",
    )
    cfg = load_config(config, environ={})
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
        assert outcome.success, outcome.error or outcome.failed_checks
        records = instance.fetch_materializations(dg.AssetKey("safe_vault_chunks"), limit=10).records
        metadata = {r.partition_key: {k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records}
    return config, cfg, metadata


def test_links_resolve_by_obsidians_rules_within_the_vault(site):
    _, cfg, _ = site
    links, backlinks = stored_links(cfg.store_path("private"), "lab/Home")
    found = by_target(links)
    assert found["Proxmox setup#^"]["to"] == "lab/Projects/Proxmox setup"  # the file name alone
    assert found["projects/proxmox setup#Network^"] == {  # a path, any case, the heading checked
        "target": "projects/proxmox setup",
        "heading": "Network",
        "kind": "wikilink",
        "status": "note",
        "display": "projects/proxmox setup > Network",
        "to": "lab/Projects/Proxmox setup",
    }
    storage = found["Proxmox Setup.md#Storage^"]  # .md optional; a missing heading is a problem, still linked
    assert (
        storage["to"] == "lab/Projects/Proxmox setup" and storage["problem"] == "no heading 'Storage' in Proxmox setup"
    )
    assert "problem" not in found["Disks#^smart-1"] and found["Disks#^nope"]["problem"] == "no block ^nope in Disks"
    assert found["Missing note#^"]["status"] == "unresolved"
    assert found["Todo#^"]["status"] == "ambiguous"
    assert found["Todo#^"]["candidates"] == ["lab/Archive/Todo", "lab/Projects/Todo"]
    assert found["../../etc/passwd#^"]["status"] == "outside" and "to" not in found["../../etc/passwd#^"]
    assert found["rack.png#^"] == {"target": "rack.png", "kind": "embed", "status": "file", "to": "img/rack.png"}
    assert found["#Intro^"]["to"] == "lab/Home" and "problem" not in found["#Intro^"]
    assert found["Projects/Proxmox setup.md#^"]["kind"] == "markdown"
    assert [link["to"] for link in links if link.get("source") == "property:related"] == ["lab/Disks"]
    # The same name from a note in the folder of one of them: that one (Obsidian's preference).
    local, _ = stored_links(cfg.store_path("private"), "lab/Projects/Local")
    assert local[0]["to"] == "lab/Projects/Todo"
    # Backlinks: who links to Disks, and how; a note's own links to itself are no backlinks.
    _, disks_back = stored_links(cfg.store_path("private"), "lab/Disks")
    assert {(b["from"], b["kind"], b.get("source", "body")) for b in disks_back} >= {
        ("lab/Home", "wikilink", "property:related"),
        ("lab/Home", "wikilink", "body"),
        ("lab/Projects/Proxmox setup", "embed", "body"),
    }
    assert all(b["from"] != "lab/Home" for b in backlinks)
    # Never across vaults: the diary's [[Home]] stays unresolved though lab/Home is in the same store.
    garden = by_target(stored_links(cfg.store_path("private"), "diary/Garden")[0])
    assert garden["Home#^"]["status"] == "unresolved" and garden["Plan#^"]["to"] == "diary/Plan"


def test_safe_tier_links_are_sanitised_and_still_resolve(site):
    _, cfg, _ = site
    safe = cfg.store_path("safe")
    raw = safe.read_bytes() + (Path(f"{safe}-wal").read_bytes() if Path(f"{safe}-wal").exists() else b"")
    assert EMAIL.encode() not in raw and GITHUB_TOKEN.encode() not in raw
    links, _ = stored_links(safe, "lab/Home")
    mail = [link for link in links if link["target"].startswith("Mail ")]
    assert mail and mail[0]["status"] == "note" and "[REDACTED:" in mail[0]["to"]  # the note's name sanitised alike
    assert any(link.get("display") == "[REDACTED:github_pat_classic]" for link in links)
    assert audit_store(safe, "safe", SecretDetector()).ok


def test_the_report_is_dagster_metadata_and_in_rag_check(site, capsys):
    config, _, metadata = site
    lab = metadata["lab"]
    # Todo: ambiguous from Home; from Projects/Local, the one in its own folder
    assert (lab["links_unresolved"], lab["links_ambiguous"], lab["links_outside"]) == (1, 1, 1)
    assert lab["links"] == 18 and lab["links_to_files"] == 1
    kinds = {(e["note"], e["kind"]) for e in lab["link_issue_entries"]}
    assert {
        ("lab/Home", "embed_loop"),
        ("lab/Disks", "embed_loop"),
        ("lab/Home", "outside"),
        ("lab/Home", "heading"),
        ("lab/Home", "block"),
    } <= kinds
    assert "points outside the vault" in lab["link_issues"]
    assert rag(["check", "--config", str(config)]) in (0, 1)
    printed = capsys.readouterr().out
    assert "[vault lab] links:" in printed and "1 unresolved, 1 ambiguous, 1 outside; 2 embed loop(s)" in printed
    assert "lab/Home: ../../etc/passwd: points outside the vault; never followed" in printed
    assert "[vault diary] links: 2 distinct links per note: 1 resolved; 1 unresolved" in printed


def test_rag_related_on_the_command_line(site, capsys):
    config, _, _ = site
    assert rag(["related", "--config", str(config), "proxmox setup", "--collection", "lab", "--json", "-k", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["collection"], out["slug"]) == ("lab", "Projects/Proxmox setup")
    assert [(r["slug"], r["reason"]) for r in out["links"]] == [("Disks", "this note embeds it")]
    reasons = {r["slug"]: r["reason"] for r in out["backlinks"]}
    assert reasons["Home"] == "it links to this note" and reasons["Disks"] == "it embeds this note"
    assert len(out["similar"]) == 2 and all(
        r["relation"] == "similar" and "cosine" in r["reason"] for r in out["similar"]
    )
    assert rag(["related", "--config", str(config), "Todo"]) == 2  # several notes: say which
    assert "'Todo' names several notes: lab/Archive/Todo, lab/Projects/Todo" in capsys.readouterr().err


def test_related_over_http_follows_the_tier_rules(site):
    _, cfg, _ = site
    with ServerThread(create_app(cfg, preload=False)) as server:
        safe = server.get("/related", note="lab/Home", tier="safe")
        assert safe.status_code == 200, safe.text
        body = safe.json()
        assert body["tier"] == "safe" and {r["slug"] for r in body["links"]} >= {"Projects/Proxmox setup", "Disks"}
        assert {u["status"] for u in body["unresolved"]} == {"unresolved", "ambiguous", "outside", "note"}
        assert server.get("/related", note="diary/Garden").status_code == 400  # not in the public tier
        assert server.get("/related", note="lab/Nothing", tier="safe").json()["error"].startswith("no note")
        assert server.get("/related", note="lab/Home", tier="safe", depth="2").status_code == 400
    with ServerThread(create_app(cfg, serve_private=False, preload=False)) as server:
        refused = server.get("/related", note="diary/Garden", tier="private")
        assert refused.status_code == 403 and "private tier" in refused.json()["error"]


def test_related_off_loopback_needs_a_token_with_the_tiers_scope(site, tmp_path):
    """Bound off loopback (as to a LAN), the access layer of /search decides: no token, no Safe tier."""
    _, cfg, _ = site
    tokens = TokenStore(tmp_path / "tokens.json")
    safe_token = tokens.create("reader", ("safe",))
    app = create_app(cfg, serve_private=False, preload=False, host="0.0.0.0", tokens=tokens)
    with ServerThread(app) as server:
        anonymous = server.get("/related", note="lab/Home", tier="safe")
        assert anonymous.status_code == 401 and "Home" not in anonymous.text
        assert server.get("/related", note="docs/page").status_code == 200  # the Public tier needs none
        signed = server.client.get(
            "/related", params={"note": "lab/Home", "tier": "safe"}, headers={"Authorization": f"Bearer {safe_token}"}
        )
        assert signed.status_code == 200 and signed.json()["slug"] == "Home"


def test_related_over_mcp_http_and_stdio(site):
    config, cfg, _ = site

    async def over_http(session):
        out = await call(session, "related", note="Garden", tier="private", k=1)
        assert [r["slug"] for r in out["links"]] == ["Plan"] and len(out["similar"]) == 1
        assert "no note" in await call_error(session, "related", {"note": "Nowhere", "tier": "safe"})

    async def over_stdio(session):
        out = await call(session, "related", note="lab/Disks", tier="safe")
        assert {r["slug"] for r in out["backlinks"]} == {"Home", "Projects/Proxmox setup"}

    async def run(factory, body):
        with anyio.fail_after(120):
            async with factory() as session:
                await body(session)

    with ServerThread(create_app(cfg, preload=False)) as server:
        anyio.run(run, lambda: http_session(server.url), over_http)
    anyio.run(run, lambda: stdio_session(config), over_stdio)


def test_an_edit_of_links_rewrites_documents_only_and_updates_backlinks(write_tree, make_config):
    content = write_tree({"vaults/v/A.md": "# A\n\nAbout apples.\n", "vaults/v/B.md": "# B\n\nAbout bees.\n"})
    vault = VaultConfig("v", content / "vaults" / "v", "private")
    cfg = dataclasses.replace(make_config(content), vaults=(vault,), identity_map_path=None)
    build_vault_tier(cfg, vault, "private", HashingEmbedder(), provider="hashing")
    (vault.path / "C.md").write_text("# C\n\nLinks [[A]].\n", encoding="utf-8")
    again = build_vault_tier(cfg, vault, "private", HashingEmbedder(), provider="hashing")
    assert again.sync.chunks_written == 1 and again.sync.chunks_deleted == 0  # C's one chunk; A is not re-embedded
    assert again.sync.documents_written == 2  # C, and A's row for its new backlink
    assert stored_links(cfg.store_path("private"), "v/A")[1] == [{"from": "v/C", "kind": "wikilink"}]


def test_a_store_of_schema_3_gains_the_link_columns(tmp_path):
    db = tmp_path / "old.db"
    with closing(store.connect(db)) as conn:
        store.ensure_schema(conn)
        conn.execute("INSERT INTO documents(id, collection, slug) VALUES ('v/a', 'v', 'a')")
        conn.execute("ALTER TABLE documents DROP COLUMN links")
        conn.execute("ALTER TABLE documents DROP COLUMN backlinks")
        conn.execute("PRAGMA user_version = 3")
    with closing(store.connect(db)) as conn:
        store.ensure_schema(conn)
        columns = {r[1] for r in conn.execute("PRAGMA table_info(documents)")}
        assert {"links", "backlinks"} <= columns and conn.execute("PRAGMA user_version").fetchone()[0] == 5
        assert conn.execute("SELECT id, links FROM documents").fetchall() == [("v/a", None)]


def test_ten_thousand_links_loops_and_a_self_embed_are_bounded_and_reported(tmp_path):
    many = note(tmp_path, "![[Big]] " + " ".join(f"[[Note {i}]]" for i in range(10_000)) + "\n", "Big.md")
    loop = [note(tmp_path, f"# Loop {i}\n\n![[Loop {(i + 1) % 500}]]\n", f"Loop {i}.md") for i in range(500)]
    with deadline(60):  # against a hang only: one lookup per link
        resolved = resolve_vault("v", [many, *loop], [])
    report = resolved.report
    big = next(d for d in resolved.documents if d.slug == "Big")
    assert isinstance(big, Document) and len(big.resolved_links) == MAX_LINKS_PER_NOTE
    assert report.counts["capped"] == 1 and report.counts["unresolved"] == 10_000
    loops = [i.detail for i in report.issues if i.kind == "embed_loop"]
    assert sorted(loops) == [
        "embed loop of 500 notes: v/Loop 0 -> v/Loop 1 -> v/Loop 10 -> v/Loop 100 -> v/Loop 101 -> "
        "v/Loop 102 -> v/Loop 103 -> v/Loop 104 -> v/Loop 105 -> v/Loop 106 -> ... -> v/Loop 0",
        "embeds itself",
    ]


def test_postgres_store_holds_the_same_links_and_a_version_1_schema_is_migrated(site, tmp_path):
    """The PostgreSQL store is synced from the SQLite store: its links and backlinks are the
    same text; a schema at migration 1 (before links) gains the columns; the search mirror
    copies them, so `related` over the postgres backend answers as over SQLite."""
    from .pgvector import pgvector_server, scratch_database

    _, cfg, _ = site
    with pgvector_server() as server, scratch_database(server) as url:
        import psycopg

        from rag_assets.config.settings import StoreSettings
        from rag_assets.index import pg_schema, pg_sync
        from rag_assets.search.backends import open_index
        from rag_assets.search.related import related_notes

        with closing(pg_schema.connect(url, "private")) as pg:  # a store made before links: migration 1 only
            pg_schema.ensure_schema(pg, "private")
            pg.execute("ALTER TABLE rag_private.documents DROP COLUMN links")
            pg.execute("ALTER TABLE rag_private.documents DROP COLUMN backlinks")
            pg.execute("ALTER TABLE rag_private.documents DROP COLUMN aliases")
            pg.execute("DELETE FROM rag_private.schema_migrations WHERE version >= 2")
        pg_sync.sync_tier(url, "private", cfg.store_path("private"))
        with psycopg.connect(url) as conn:
            in_pg = conn.execute(
                "SELECT id, links::text, backlinks::text FROM rag_private.documents ORDER BY id"
            ).fetchall()
            assert pg_schema.schema_version(conn, "private") == pg_schema.SCHEMA_VERSION == 3
        with closing(sqlite3.connect(cfg.store_path("private"))) as conn:
            in_lite = conn.execute("SELECT id, links, backlinks FROM documents ORDER BY id").fetchall()
        assert in_pg == in_lite and any(row[1] for row in in_pg) and any(row[2] for row in in_pg)
        on_pg = dataclasses.replace(cfg, store=StoreSettings(backend="postgres", url=url), output_dir=tmp_path / "out")
        indexes = [open_index(on_pg, "private", log_searches=False), open_index(cfg, "private", log_searches=False)]
        try:
            answers = [related_notes(index, "lab/Disks", k=3).to_json() for index in indexes]
        finally:
            for index in indexes:
                index.close()
        assert answers[0] == answers[1] and answers[0]["backlinks"]


@pytest.mark.skipif(not SHARED_VAULT.is_dir(), reason="the shared corpora are not next to the repository")
def test_the_shared_vault_links_are_resolved_and_reported(tmp_path, capsys):
    """`rag build` of ../shared/corpora/obsidian-vault, then `rag check`: its distinct links per note
    by status (the .base views live in the skipped templates folder; the rest name unwritten notes)."""
    config = tmp_path / "rag.yaml"
    config.write_text(
        f"content_dir: content\noutput_dir: out\nidentity_map: null\n"
        f"vaults:\n  - {{name: shared, path: '{SHARED_VAULT.resolve()}', tier: private}}\n"
    )
    (tmp_path / "content").mkdir()
    assert rag(["build", "--config", str(config), "--embedder", "hashing", "--private-embedder", "hashing"]) == 0
    report = stored_link_report(tmp_path / "out" / "data" / "rag-store.db", "shared")
    assert dict(report.statuses) == {"note": 55, "file": 1, "unresolved": 80}
    built = capsys.readouterr().out
    assert "[vault shared] links: 56/137 resolved, 81 unresolved, 0 ambiguous, 0 outside the vault" in built
    rag(["check", "--config", str(config)])
    assert "[vault shared] links: 136 distinct links per note: 56 resolved; 80 unresolved" in capsys.readouterr().out
    related = rag(["related", "--config", str(config), "Kevin Kelly", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert related == 0 and {"Out of Control", "Well Made 145 Kevin Kelly"} <= {r["title"] for r in out["backlinks"]}
