"""The three privacy tiers end to end on the sample content: real Dagster runs, real SQLite.

One build of the repository's content (site collections plus the two sample vaults) is
shared by the read-only tests; tests that change things build their own copy of the vaults
with one small site collection beside them (``rag build`` indexes it too; the other four play no
part in what a vault test checks). The Dagster instances are in-memory
(``DagsterInstance.ephemeral``): the tests read them through the same API as an on-disk one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.config import VaultConfig, load_config
from rag_assets.config.schema import HashingSection
from rag_assets.defs.partitions import PRIVATE_VAULTS_PARTITION, SAFE_VAULTS_PARTITION
from rag_assets.defs.runner import run_build
from rag_assets.index import store
from rag_assets.serve.cli import main as rag

from .conftest import REPO_ROOT, SAMPLE_CONTENT

PLANTED = json.loads((Path(__file__).parent / "data" / "planted_secrets.json").read_text())
SECRETS = [p for p in PLANTED if p["kind"] not in ("not_secret", "identity")]
NOT_SECRETS = [p for p in PLANTED if p["kind"] == "not_secret"]
IDENTITIES = [p for p in PLANTED if p["kind"] == "identity"]


def sample_config(tmp: Path, content: Path = SAMPLE_CONTENT, **changes):
    """The repository's rag.yaml pointed at a copy (or the original) of the content."""
    cfg = load_config(
        REPO_ROOT / "rag.yaml", output_dir=tmp / "out", embedder="hashing", private_embedder="hashing", environ={}
    )
    vaults = tuple(VaultConfig(v.name, content / "vaults" / v.name, v.tier) for v in cfg.vaults)
    return dataclasses.replace(cfg, content_dir=content, vaults=vaults, **changes)


def copy_content(tmp: Path) -> Path:
    """The sample's vaults and its smallest site collection (see the module docstring)."""
    target = tmp / "content"
    for folder in ("vaults", "journal"):
        shutil.copytree(SAMPLE_CONTENT / folder, target / folder)
    return target


def file_digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def all_bytes(path: Path) -> bytes:
    """A SQLite file with its WAL: everything a reader of the disk could see."""
    return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())


def rows(path: Path, sql: str, params=()) -> list[tuple]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, params).fetchall()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One full build of the sample content; yields (cfg, instance, originals before, outcome)."""
    tmp = tmp_path_factory.mktemp("tiers")
    cfg = sample_config(tmp)
    before = file_digests(SAMPLE_CONTENT)
    with dg.DagsterInstance.ephemeral() as instance:
        outcome = run_build(cfg, instance)
        yield cfg, instance, before, outcome


def test_build_writes_the_three_tiers(built):
    cfg, _, _, outcome = built
    assert outcome.success, outcome.error or outcome.failed_checks
    assert cfg.safe_store_path.name == "rag-store-blog.db" and cfg.private_store_path.name == "rag-store.db"
    safe = store.summarise(cfg.safe_store_path)
    private = store.summarise(cfg.private_store_path)
    assert set(safe.per_collection) == {"homelab-notes"}
    assert set(private.per_collection) == {"homelab-notes", "personal"}
    assert safe.chunks >= 10 and private.chunks > safe.chunks
    # Every stored chunk is embedded and searchable.
    assert safe.embedded == safe.chunks == safe.fts_rows
    meta = outcome.tier_metadata["safe_store"]
    assert meta["documents"] == safe.documents and meta["vaults_not_built"] == "none"
    vault_meta = outcome.vaults[0].metadata["safe_vault_chunks"]
    assert vault_meta["secrets_redacted"] >= len({p["secret"] for p in SECRETS if p["vault"] == "homelab-notes"}) - 2


def test_originals_are_never_modified(built):
    _, _, before, _ = built
    assert file_digests(SAMPLE_CONTENT) == before


def test_no_planted_secret_or_identity_reaches_the_safe_store(built):
    cfg = built[0]
    data = all_bytes(cfg.safe_store_path)
    safe_vault = [p for p in SECRETS if p["vault"] == "homelab-notes"]
    assert safe_vault, "the sample safe vault must plant secrets"
    for planted in safe_vault:
        assert planted["secret"].encode() not in data, f"{planted['kind']} from {planted['file']} leaked"
    for planted in IDENTITIES:
        if planted["vault"] == "homelab-notes":
            assert planted["text"].encode() not in data, f"identity {planted['text'][:3]}… leaked"
    assert b"[REDACTED:" in data


def test_not_secrets_survive_sanitisation(built):
    cfg = built[0]
    text = "\n".join(r[0] for r in rows(cfg.safe_store_path, "SELECT text FROM chunks"))
    kept = [p["text"] for p in NOT_SECRETS if p["vault"] == "homelab-notes"]
    assert kept
    missing = [t for t in kept if t not in text]
    assert not missing, f"not-secrets redacted: {missing}"


def test_fts_cannot_find_a_redacted_secret(built):
    cfg = built[0]
    for planted in SECRETS:
        if planted["vault"] != "homelab-notes":
            continue
        token = max(planted["secret"].replace("-", " ").replace("_", " ").split(), key=len)
        query = '"' + token.replace('"', '""') + '"'
        assert (
            rows(cfg.safe_store_path, "SELECT COUNT(*) FROM fts_chunks WHERE fts_chunks MATCH ?", (query,))[0][0] == 0
        )


def test_private_tier_keeps_raw_text(built):
    cfg = built[0]
    data = all_bytes(cfg.private_store_path)
    assert any(p["secret"].encode() in data for p in SECRETS)  # secrets kept on purpose


def test_no_vault_text_in_public_outputs(built):
    cfg = built[0]
    public = cfg.index_path.read_bytes() + all_bytes(cfg.public_store_path) + cfg.manifest_path.read_bytes()
    public += b"".join(p.read_bytes() for p in sorted((cfg.data_dir / "segments").iterdir()))  # the index's segments
    for planted in PLANTED:
        needle = (planted.get("secret") or planted["text"]).encode()
        if planted["kind"] == "identity" or planted["kind"] == "not_secret":
            continue  # hostnames and digests may also appear in public posts
        assert needle not in public
    for note in (SAMPLE_CONTENT / "vaults").rglob("*.md"):
        title_line = next(line for line in note.read_text().splitlines() if line.startswith("title:"))
        assert title_line.split(":", 1)[1].strip().strip('"').encode() not in public
    assert not {c for (c,) in rows(cfg.public_store_path, "SELECT DISTINCT collection FROM documents")} & {
        "homelab-notes",
        "personal",
        "vaults",
    }


def test_no_private_vault_text_in_the_safe_store(built):
    cfg = built[0]
    safe = all_bytes(cfg.safe_store_path)
    for (text,) in rows(
        cfg.private_store_path,
        "SELECT c.text FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.collection = 'personal'",
    ):
        longest = max(text.split("\n"), key=len)
        assert longest.encode() not in safe


def test_search_in_one_tier_never_returns_another_tiers_chunks(built):
    cfg = built[0]
    expected = {"public": None, "safe": {"homelab-notes"}, "private": {"homelab-notes", "personal"}}
    words = ["password", "proxmox", "backup", "appointment", "vlan", "token", "bank"]
    for tier, allowed in expected.items():
        path = cfg.store_path(tier)
        for word in words:
            hits = rows(
                path,
                "SELECT d.collection FROM fts_chunks f JOIN chunks c ON c.rowid = f.rowid"
                " JOIN documents d ON d.id = c.document_id WHERE fts_chunks MATCH ?",
                (word,),
            )
            found = {h[0] for h in hits}
            if allowed is None:
                assert not found & {"homelab-notes", "personal"}
            else:
                assert found <= allowed, (tier, word, found)


def test_nothing_unsanitised_in_dagster_storage_logs_or_caches(built):
    cfg, instance, _, _ = built
    logged = []
    for run in instance.get_runs():
        for entry in instance.all_logs(run.run_id):
            logged.append(str(entry))
    dump = "\n".join(logged)
    assert "homelab-notes" in dump  # the vault runs are in the event log
    for planted in SECRETS:
        assert planted["secret"] not in dump, f"{planted['kind']} in Dagster's event log"
    for planted in IDENTITIES:
        if planted["vault"] == "homelab-notes":
            assert planted["text"] not in dump
    caches = b"".join(p.read_bytes() for p in cfg.data_dir.rglob("*") if p.is_file() and "rag-store" not in p.name)
    for planted in SECRETS:
        assert planted["secret"].encode() not in caches, f"{planted['kind']} in {cfg.data_dir}"


def test_audit_passes_then_reports_an_injected_secret_masked(built, tmp_path, capsys):
    cfg = built[0]
    copy = tmp_path / "out"
    shutil.copytree(cfg.output_dir, copy)
    config = tmp_path / "rag.yaml"
    config.write_text(
        f"content_dir: {SAMPLE_CONTENT}\noutput_dir: {copy}\nidentity_map: {REPO_ROOT / 'identity_map.json'}\n"
    )
    assert rag(["audit", "--config", str(config)]) == 0
    assert "0 finding(s)" in capsys.readouterr().out
    leaked = "ghp_" + "R8xk2LmQ9vTz4WcYp7NbHd3FsJ6gKe1AoU5i"
    store_path = copy / "data" / "rag-store-blog.db"
    chunk_id = rows(store_path, "SELECT id FROM chunks LIMIT 1")[0][0]
    with closing(sqlite3.connect(store_path)) as conn, conn:
        conn.execute("UPDATE chunks SET text = text || ? WHERE id = ?", (f"\nexport GITHUB_TOKEN={leaked}\n", chunk_id))
    assert rag(["audit", "--config", str(config)]) == 1
    out = capsys.readouterr().out
    assert chunk_id in out and "github" in out.lower()
    assert leaked not in out and leaked[4:] not in out
    assert rag(["audit", "--config", str(config), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report[0]["findings"][0]["item_id"] == chunk_id


def test_leak_audit_check_blocks_the_tier_store_run(tmp_path):
    content = copy_content(tmp_path)
    cfg = sample_config(tmp_path, content)
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance).success
        # Whatever wrote it, a secret in the Safe store fails the blocking audit check.
        store_path = cfg.safe_store_path
        chunk_id = rows(store_path, "SELECT id FROM chunks LIMIT 1")[0][0]
        with closing(sqlite3.connect(store_path)) as conn, conn:
            conn.execute("UPDATE chunks SET text = text || ' AKIA' || 'Q3EGRS7N2XKD5TYW' WHERE id = ?", (chunk_id,))
        outcome = run_build(cfg, instance, collections=[], vaults=[], publish=False)
        assert not outcome.success
        assert any("safe_store_leak_audit" in c for c in outcome.failed_checks)


def test_removing_a_vault_purges_it_from_both_stores_and_its_partition(tmp_path):
    content = copy_content(tmp_path)
    cfg = sample_config(tmp_path, content)
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance).success
        # Each tier's asset has its own partitions: the private vault is not one of the Safe tier's.
        assert set(instance.get_dynamic_partitions(PRIVATE_VAULTS_PARTITION)) == {"homelab-notes", "personal"}
        assert set(instance.get_dynamic_partitions(SAFE_VAULTS_PARTITION)) == {"homelab-notes"}
        without = dataclasses.replace(cfg, vaults=tuple(v for v in cfg.vaults if v.name != "homelab-notes"))
        outcome = run_build(without, instance)
        assert outcome.success, outcome.error
        assert "homelab-notes" in outcome.tier_metadata["safe_store"]["purged_vaults"]
        assert list(instance.get_dynamic_partitions(PRIVATE_VAULTS_PARTITION)) == ["personal"]
        assert not instance.get_dynamic_partitions(SAFE_VAULTS_PARTITION)
    for path in (cfg.safe_store_path, cfg.private_store_path):
        assert not rows(path, "SELECT 1 FROM documents WHERE collection = 'homelab-notes'")
        assert store.read_sources(path).get("homelab-notes") is None
        assert store.orphan_counts(path) == {"chunks_without_document": 0, "fts_rows_without_chunk": 0}
    assert store.summarise(cfg.private_store_path).per_collection.keys() == {"personal"}


def test_moving_a_vault_to_private_removes_it_from_the_safe_store(tmp_path):
    content = copy_content(tmp_path)
    cfg = sample_config(tmp_path, content)
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance).success
        moved = dataclasses.replace(cfg, vaults=tuple(dataclasses.replace(v, tier="private") for v in cfg.vaults))
        assert run_build(moved, instance).success
    assert store.summarise(cfg.safe_store_path).chunks == 0
    assert set(store.summarise(cfg.private_store_path).per_collection) == {"homelab-notes", "personal"}


def test_a_new_private_model_rebuilds_every_vault_even_when_one_is_asked_for(tmp_path):
    """One store holds one model: building one vault with a new model must not drop the others."""
    content = copy_content(tmp_path)
    cfg = sample_config(tmp_path, content)
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance).success
        before = store.summarise(cfg.private_store_path)
        assert set(before.per_collection) == {"homelab-notes", "personal"} and before.dimension == 384
        wider = dataclasses.replace(
            cfg, private_embedding=cfg.private_embedding.model_copy(update={"hashing": HashingSection(dimension=256)})
        )
        outcome = run_build(wider, instance, collections=[], vaults=["personal"], publish=False)
        assert outcome.success, outcome.error
    after = store.summarise(cfg.private_store_path)
    assert after.dimension == 256
    assert after.per_collection == before.per_collection  # both vaults, re-embedded, none lost
    assert store.orphan_counts(cfg.private_store_path) == {"chunks_without_document": 0, "fts_rows_without_chunk": 0}


def test_incremental_vault_builds(tmp_path, capsys):
    content = copy_content(tmp_path)
    config = tmp_path / "rag.yaml"
    text = (REPO_ROOT / "rag.yaml").read_text()
    text = text.replace("content_dir: content", f"content_dir: {content}").replace(
        "output_dir: .", f"output_dir: {tmp_path / 'out'}"
    )
    text = text.replace("path: content/vaults/", f"path: {content}/vaults/").replace(
        "identity_map: identity_map.json", f"identity_map: {tmp_path / 'map.json'}"
    )
    config.write_text(text)
    shutil.copy(REPO_ROOT / "identity_map.json", tmp_path / "map.json")
    args = ["build", "--config", str(config)]
    assert rag(args) == 0
    assert "[vault homelab-notes] safe:" in capsys.readouterr().out
    assert rag(args) == 0
    assert "up to date" in capsys.readouterr().out
    assert rag(["check", "--config", str(config)]) == 0
    assert "Fresh: the Safe and Private stores match 2 vault(s)" in capsys.readouterr().out
    note = next((content / "vaults" / "personal").rglob("*.md"))
    note.write_text(note.read_text() + "\n\nOne more line about the dentist.\n")
    assert rag(["check", "--config", str(config)]) == 1
    assert "[vault personal] private tier: notes or rules changed" in capsys.readouterr().out
    assert rag(args) == 0
    out = capsys.readouterr().out
    assert "[vault personal] private tier: the vault's notes changed" in out and "homelab-notes] safe" not in out
    # A new identity rule re-sanitises the Safe tier (its fingerprint changed).
    rules = json.loads((tmp_path / "map.json").read_text())
    rules["rules"].append({"kind": "user", "literal": "dentist-reception", "placeholder": "[USER:desk]", "word": True})
    (tmp_path / "map.json").write_text(json.dumps(rules))
    assert rag(args) == 0
    out = capsys.readouterr().out
    assert "[vault homelab-notes] safe tier: the identity map or the secret rules changed" in out
    assert rag(["status", "--config", str(config), "--json"]) == 0
    tiers = json.loads(capsys.readouterr().out)["tiers"]
    assert set(tiers) == {"public", "safe", "private"}
    vault = tiers["private"]["vaults"]["personal"]
    assert vault["markdownFiles"] == len(list((content / "vaults" / "personal").rglob("*.md")))
    assert tiers["safe"]["freshness"] == "Fresh" and tiers["safe"]["model"]
    assert rag(["status", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "Safe" in out and "Private" in out and "Markdown files on disk" in out


def test_hybrid_search_in_each_tier_returns_only_that_tiers_chunks(built):
    from rag_assets.index.params import SearchParams
    from rag_assets.search.retrieval import SearchIndex, tier_embedder

    cfg = built[0]
    allowed = {
        "public": set(cfg.collection_weights) | {"docs", "posts", "learn", "projects", "journal"},
        "safe": {"homelab-notes"},
        "private": {"homelab-notes", "personal"},
    }
    queries = ["proxmox backup password", "dentist appointment", "wifi password router", "grafana alert", "bank"]
    for tier, collections in allowed.items():
        index = SearchIndex(cfg.store_path(tier), log_searches=False)
        embedder = tier_embedder(cfg, tier, index)
        seen = set()
        for query in queries:
            for hit in index.search(query, embedder, SearchParams(k=20, min_score=0)).hits:
                seen.add(hit.collection)
                assert hit.collection in collections, (tier, query, hit.id)
        assert seen, tier
    private_hits = (
        SearchIndex(cfg.private_store_path).search("dentist appointment", None, SearchParams(mode="bm25")).hits
    )
    assert private_hits and private_hits[0].collection == "personal"


def test_rag_build_touches_the_tier_stores_only_when_the_plan_does(tmp_path, monkeypatch, capsys):
    """`rag build` after a collection edit runs the collection's job alone, as the change sensor
    does: no vault run and no tier-store refresh (one Dagster run, not two). A vault removed from
    rag.yaml is still purged from both stores: the planner names those tiers."""
    content = copy_content(tmp_path)
    config = tmp_path / "rag.yaml"

    def write_config(vaults: str) -> None:
        config.write_text(
            f"content_dir: {content}\noutput_dir: {tmp_path / 'out'}\nembedder: {{name: hashing}}\n"
            f"private_tier: {{embedder: hashing}}\nidentity_map: {REPO_ROOT / 'identity_map.json'}\n"
            f"vaults:\n{vaults}",
            encoding="utf-8",
        )

    both = (
        f"  - {{name: homelab-notes, path: {content / 'vaults' / 'homelab-notes'}, tier: safe}}\n"
        f"  - {{name: personal, path: {content / 'vaults' / 'personal'}, tier: private}}\n"
    )
    write_config(both)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    (tmp_path / "dagster").mkdir()
    assert rag(["build", "--config", str(config)]) == 0
    with dg.DagsterInstance.get() as instance:
        before = {r.run_id for r in instance.get_runs()}
    assert before  # the first build ran the collections, both tiers' vaults

    note = next((content / "journal").glob("*.md"))
    note.write_text(note.read_text(encoding="utf-8") + "\nOne more paragraph about zqx antennas.\n", encoding="utf-8")
    assert rag(["build", "--config", str(config)]) == 0
    with dg.DagsterInstance.get() as instance:
        jobs = [r.job_name for r in instance.get_runs() if r.run_id not in before]
    assert jobs == ["update_collection"], jobs

    write_config(both.splitlines(keepends=True)[1])  # homelab-notes leaves rag.yaml
    capsys.readouterr()
    assert rag(["build", "--config", str(config)]) == 0
    cfg = load_config(config, environ={})
    for path in (cfg.safe_store_path, cfg.private_store_path):
        assert not rows(path, "SELECT 1 FROM documents WHERE collection = 'homelab-notes'")
    assert store.summarise(cfg.private_store_path).per_collection.keys() == {"personal"}
