"""Vault notes used as Obsidian uses them, on one real Dagster build of a fixture vault: an alias
finds its note (BM25's title field, the relevance model's title feature, `rag ask`'s retrieval,
SQLite and the migration of an older store), vault passages are cited as ``[[Note#Heading]]``
in context packs (CLI, HTTP, MCP) and answers, public pages keep ``[collection:slug#anchor]``,
and the web page (Debian's Chromium) links a vault citation with an ``obsidian://open`` URI."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from contextlib import closing

import anyio
import pytest

from rag_assets.config import load_config
from rag_assets.config.settings import LlmOllamaSettings, LlmSettings
from rag_assets.defs.runner import run_build
from rag_assets.embed import HashingEmbedder
from rag_assets.index import store
from rag_assets.index.params import SearchError, SearchParams
from rag_assets.search.passages import note_citation, obsidian_uri
from rag_assets.search.relevance import weighted
from rag_assets.search.retrieval import SearchIndex
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .chat_server import ChatServer
from .conftest import instance_for_test
from .live_server import ServerThread
from .test_mcp import call, http_session
from .test_obsidian_links import write_vault

EMAIL = "alice.smith@corp-mail.net"
FILLER = "Ordinary words about the lab, so that the note reads like a real one and chunks like one. " * 4
LAB = {
    "Projects/Proxmox setup.md": (
        "---\naliases: [Hypervisor cluster, pve box]\n---\n# Proxmox setup\n\n"
        f"{FILLER * 8}\n\n## Network\n\nBridges vmbr0 and vmbr1 carry the guests' VLANs.\n\n{FILLER * 8}\n"
    ),
    # Says "hypervisor cluster" in its body more often than the note whose alias it is.
    "Rack.md": f"# Rack\n\nThe hypervisor cluster sits in the rack; the hypervisor cluster is loud. [[Disks]]. {FILLER}\n",
    "Disks.md": f"---\nalias: spinning rust\n---\n# Disks\n\nSMART every week. {FILLER}\n",
    f"Mail {EMAIL}.md": f"---\naliases: postbox\n---\n# Mail\n\n## Relay\n\nThe mail relay forwards to the provider. {FILLER}\n",
}
SITE = {
    "page.md": "---\naliases: [/old/path/]\n---\n# A page\n\nA public page about a hypervisor cluster, cited as before.\n"
}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A Safe vault (``lab``, so in the Safe and Private stores) and a site collection, built by the
    real Dagster build; (config path, config)."""
    root = tmp_path_factory.mktemp("use")
    write_vault(root / "vaults" / "lab", LAB)
    write_vault(root / "content" / "docs", SITE)
    config = root / "rag.yaml"
    config.write_text(
        "content_dir: content\noutput_dir: out\nembedder: {name: hashing}\nidentity_map: null\n"
        "private_tier: {embedder: hashing}\nllm: {name: none}\nvaults:\n  - {name: lab, path: vaults/lab, tier: safe}\n",
        encoding="utf-8",
    )
    cfg = load_config(config, environ={})
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
        assert outcome.success, outcome.error or outcome.failed_checks
    return config, cfg


def cli_json(capsys, *args: str) -> dict:
    assert rag(list(args)) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_aliases_are_stored_and_searched_in_the_title_field(site):
    _, cfg = site
    with closing(sqlite3.connect(cfg.store_path("private"))) as conn:
        aliases = dict(conn.execute("SELECT slug, aliases FROM documents"))
        hits = conn.execute(
            "SELECT DISTINCT d.slug FROM fts_chunks f JOIN chunks c ON c.rowid = f.rowid JOIN documents d"
            " ON d.id = c.document_id WHERE fts_chunks MATCH 'title:postbox'"
        ).fetchall()
    assert json.loads(aliases["Projects/Proxmox setup"]) == ["Hypervisor cluster", "pve box"]
    assert json.loads(aliases["Disks"]) == ["spinning rust"] and aliases["Rack"] is None
    assert hits == [(f"Mail {EMAIL}",)]
    # A site page's `aliases` (Hugo's redirects) is not a note's: its title field stays its title.
    with closing(sqlite3.connect(cfg.store_path("public"))) as conn:
        assert conn.execute("SELECT aliases FROM documents").fetchall() == [(None,)]


@pytest.mark.parametrize("tier", ["private", "safe"])
@pytest.mark.parametrize("mode", ["bm25", "hybrid"])
def test_a_query_naming_only_an_alias_finds_its_note_first(site, capsys, tier, mode):
    config, _ = site
    for query, slug in (
        ("hypervisor cluster", "Projects/Proxmox setup"),
        ("spinning rust", "Disks"),
        ("pve box", "Projects/Proxmox setup"),
    ):
        out = cli_json(capsys, "search", "--config", str(config), "--tier", tier, "--mode", mode, "--json", query)
        assert out["hits"][0]["slug"] == slug, (query, [r["slug"] for r in out["hits"]])


def test_rag_ask_retrieves_the_note_an_alias_names(site, capsys):
    config, _ = site
    assert (
        rag(["ask", "--config", str(config), "--tier", "private", "--json", "what about the pve box?"]) == 1
    )  # no model
    out = json.loads(capsys.readouterr().out)
    sources = out["retrieval"]["sources"]
    assert sources[0]["slug"] == "Projects/Proxmox setup"
    assert sources[0]["url"] == "obsidian://open?vault=lab&file=Projects%2FProxmox%20setup"
    # The Safe tier's note names are sanitised: so are its citations and Obsidian URIs.
    assert rag(["ask", "--config", str(config), "--tier", "safe", "--json", "where does the mail relay forward?"]) == 1
    safe = json.loads(capsys.readouterr().out)["retrieval"]["sources"][0]
    assert safe["url"] == "obsidian://open?vault=lab&file=Mail%20%5BREDACTED%3Aemail%5D" and EMAIL not in json.dumps(
        safe
    )


def test_a_store_of_schema_4_gains_aliases_in_its_title_field(tmp_path):
    db = tmp_path / "old.db"
    with closing(store.connect(db)) as conn:
        store.ensure_schema(conn)
        conn.execute("INSERT INTO documents(id, collection, slug, title) VALUES ('v/a', 'v', 'a', 'Apples')")
        conn.execute("INSERT INTO chunks(id, document_id, chunk_index, text) VALUES ('v/a/chunk-0', 'v/a', 0, 'fruit')")
        # The schema-4 view: the title field is the title alone (its triggers are not needed here).
        triggers = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")]
        conn.executescript(
            "".join(f"DROP TRIGGER {t};" for t in triggers) + "DROP VIEW chunk_fields;"
            "ALTER TABLE documents DROP COLUMN aliases; CREATE VIEW chunk_fields AS SELECT c.rowid AS"
            " chunk_rowid, c.text AS text, d.title AS title, NULL AS headings, NULL AS tags FROM chunks c"
            " LEFT JOIN documents d ON d.id = c.document_id;"
        )
        conn.execute("PRAGMA user_version = 4")
    with closing(store.connect(db)) as conn:
        store.ensure_schema(conn)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 5
        conn.execute("""UPDATE documents SET aliases = '["Pomme"]' WHERE id = 'v/a'""")
        match = "SELECT count(*) FROM fts_chunks WHERE fts_chunks MATCH ?"
        assert [conn.execute(match, (q,)).fetchone()[0] for q in ("title:pomme", "title:apples", "fruit")] == [1, 1, 1]
        conn.execute("UPDATE documents SET aliases = NULL WHERE id = 'v/a'")
        assert conn.execute(match, ("pomme",)).fetchone()[0] == 0
        conn.execute("INSERT INTO fts_chunks(fts_chunks) VALUES ('integrity-check')")  # the entries match the view


def test_the_link_signal_boosts_the_notes_linked_with_the_best_hit_and_is_off_by_default(site, capsys):
    config, cfg = site
    index = SearchIndex(cfg.store_path("private"), log_searches=False)

    def relevance(factor: float) -> tuple[str, dict[str, float]]:
        params = SearchParams(k=10, min_score=0.0, link_boost=factor)
        hits = index.search("the rack is loud", HashingEmbedder(), params).hits
        return hits[0].slug, {h.slug: h.relevance for h in hits}

    best, off = relevance(1.0)
    assert best == "Rack" and {"Disks", "Projects/Proxmox setup"} <= set(off)
    best, on = relevance(3.0)
    assert best == "Rack" and on["Rack"] == off["Rack"]
    assert on["Disks"] == pytest.approx(weighted(off["Disks"], 3.0)) and on["Disks"] > off["Disks"]  # Rack links to it
    assert on["Projects/Proxmox setup"] == off["Projects/Proxmox setup"]  # not linked with Rack
    assert SearchParams().link_boost == 1.0  # off: bench/link_signal.py found no gain in hit@5
    args = ["search", "--config", str(config), "--tier", "private", "--min-score", "0", "--json", "the rack is loud"]
    boosted = cli_json(capsys, *args, "--link-boost", "3")["hits"]
    assert [h["slug"] for h in boosted[:2]] == ["Rack", "Disks"]
    assert boosted[1]["relevance"] == pytest.approx(on["Disks"], abs=1e-4)
    plain = {h["slug"]: h["relevance"] for h in cli_json(capsys, *args)["hits"]}
    assert plain["Disks"] == pytest.approx(off["Disks"], abs=1e-4)
    for bad in (0.5, float("nan"), 11.0):
        with pytest.raises(SearchError, match="link_boost"):
            SearchParams(link_boost=bad).validate()


def test_note_citations_and_uris():
    assert note_citation("Projects/Proxmox setup", ["Proxmox setup", "Network"]) == "[[Projects/Proxmox setup#Network]]"
    assert note_citation("Disks") == "[[Disks]]"
    assert note_citation("A", ["Odd [x] | #y ^z"]) == "[[A#Odd x y z]]"  # what Obsidian cannot hold in a link
    assert obsidian_uri("my vault", "a/b & c?#d") == "obsidian://open?vault=my%20vault&file=a%2Fb%20%26%20c%3F%23d"


def test_context_packs_cite_vault_notes_as_obsidian_links(site, capsys):
    config, cfg = site
    args = ["context", "--config", str(config), "--json", "bridges vmbr0 vmbr1 VLANs"]
    private = cli_json(capsys, *args, "--tier", "private")
    assert private["citations"][0]["tag"] == "[[Projects/Proxmox setup#Network]]"
    assert private["text"].startswith("[[Projects/Proxmox setup#Network]]\n")
    safe = cli_json(capsys, *args[:-1], "the mail relay forwards", "--tier", "safe")
    tag = safe["citations"][0]["tag"]
    assert tag == "[[Mail [REDACTED:email]#Mail]]"  # the note's name as the Safe store holds it
    public = cli_json(capsys, *args[:-1], "public page hypervisor", "--tier", "public")
    assert public["citations"][0]["tag"] == "[docs:page#a-page]"  # site pages keep their form

    with ServerThread(create_app(cfg)) as server:
        got = server.get("/context", q="bridges vmbr0 vmbr1 VLANs", tier="private").json()
        assert got["citations"][0]["tag"] == "[[Projects/Proxmox setup#Network]]"

        async def main():
            async with http_session(server.url) as session:
                context = await call(session, "get_context", query="bridges vmbr0 vmbr1 VLANs", tier="private")
                found = await call(session, "search", query="bridges vmbr0 vmbr1 VLANs", tier="private")
                public = await call(session, "search", query="public page hypervisor", tier="public")
                return context, found, public

        context, found, public = anyio.run(main)
        assert context["context"].startswith("[[Projects/Proxmox setup#Network]]")
        assert found["hits"][0]["citation"] == "[[Projects/Proxmox setup#Network]]"
        assert public["hits"][0]["citation"] == "[docs:page#a-page]"


def test_answers_cite_vault_notes_and_the_page_links_them_into_obsidian(site, page):
    _, cfg = site
    with ChatServer() as chat:
        chat.reply("text:The bridges carry the VLANs [1].")
        llm = LlmSettings(name="ollama", ollama=LlmOllamaSettings(host=chat.url), max_retries=0)
        with ServerThread(create_app(dataclasses.replace(cfg, llm=llm))) as server:
            page.set_default_timeout(10_000)
            page.goto(server.url + "/?tier=safe")
            page.wait_for_selector("body[data-ready]")
            page.wait_for_function("() => document.getElementById('status-model').textContent !== '…'")
            page.get_by_label("Ask a question about the notes").fill("which bridges carry the guests' VLANs?")
            page.get_by_role("button", name="Ask", exact=True).click()
            page.wait_for_function("() => document.querySelector('.answer-note')?.textContent.includes('Answered by')")
            assert page.locator(".answer-text").inner_text() == "The bridges carry the VLANs [1]."
            page.locator(".answer-text button.cite").first.click()
            dialog = page.get_by_role("dialog")
            link = dialog.get_by_role("link", name="Open in Obsidian")
            assert link.get_attribute("href") == "obsidian://open?vault=lab&file=Projects%2FProxmox%20setup"
            assert dialog.locator("#source-path").inner_text().endswith("Network")
            # The answer's JSON names the citation as Obsidian does.
            chat.reply("text:The bridges carry the VLANs [1].")
            posted = server.post("/ask", json={"question": "which bridges carry the guests' VLANs?", "tier": "private"})
            assert posted.status_code == 200, posted.text
            assert posted.json()["citations"][0]["cite"] == "[[Projects/Proxmox setup#Network]]"


def test_an_alias_finds_its_note_over_the_postgresql_store(site, tmp_path):
    """Synced to PostgreSQL (aliases column: migration 3), searched through the postgres backend's
    mirror: the alias query ranks the note first, as over SQLite."""
    from rag_assets.config.settings import StoreSettings
    from rag_assets.index import pg_sync
    from rag_assets.search.backends import open_index

    from .pgvector import pgvector_server, scratch_database

    _, cfg = site
    with pgvector_server() as server, scratch_database(server) as url:
        pg_sync.sync_tier(url, "private", cfg.store_path("private"))
        on_pg = dataclasses.replace(cfg, store=StoreSettings(backend="postgres", url=url), output_dir=tmp_path / "out")
        index = open_index(on_pg, "private", log_searches=False)
        try:
            hits = index.search("pve box", HashingEmbedder(), SearchParams(k=3, min_score=0.0)).hits
        finally:
            index.close()
    assert hits[0].slug == "Projects/Proxmox setup"
