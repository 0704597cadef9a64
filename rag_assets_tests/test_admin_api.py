"""The admin console's JSON API (/admin/api/...) on a real server (uvicorn on loopback) over
stores from a real build: the tier cards, the vault edits and their refusals, an ingest
launched into a real Dagster instance, the leak audit, and the log of every action."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from contextlib import closing

import dagster as dg
import pytest

from rag_assets.index import admin_actions, store, tier_logs
from rag_assets.index.freshness import age_label
from rag_assets.serve.http import create_app
from rag_assets.serve.status import status_report

from .admin_site import PLANTED_KEY, build_admin_site, copy_site, dagster_home
from .conftest import instance_for_test
from .embedding_server import EmbeddingServer
from .live_server import ServerThread


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("admin-api-site")
    build_admin_site(root)
    return root


@pytest.fixture
def ollama():
    """Ollama's /api/tags (and /api/embed), answered by the loopback embedding server (one per
    test: a scripted answer one test leaves unused must not reach the next)."""
    with EmbeddingServer(models=("nomic-embed-text:latest", "llama3.2:latest")) as server:
        yield server


@pytest.fixture
def cfg(built, tmp_path, ollama, monkeypatch):
    cfg = copy_site(built, tmp_path / "site")
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home(tmp_path / "dagster")))
    embedding = cfg.embedding.model_copy(
        update={"ollama": cfg.embedding.ollama.model_copy(update={"host": ollama.url})}
    )
    return dataclasses.replace(cfg, embedding=embedding)


@pytest.fixture
def server(cfg):
    with ServerThread(create_app(cfg, log_searches=False)) as running:
        yield running


def post(server, path: str, body: dict):
    return server.post(path, json=body)  # httpx sends Content-Type: application/json


def logged(cfg) -> list[admin_actions.AdminAction]:
    return admin_actions.recent_actions(cfg.public_store_path)


def wait_run(server, run_id: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        progress = server.get(f"/admin/api/runs/{run_id}")
        assert progress.status_code == 200, progress.text
        if progress.json()["finished"] or time.monotonic() > deadline:
            return progress.json()
        time.sleep(0.25)


# ------------------------------------------------------------------------------ the overview


def test_the_overview_has_a_card_per_tier_from_the_status_report(server, cfg, ollama):
    overview = server.get("/admin/api/overview")
    assert overview.status_code == 200
    body = overview.json()
    report = status_report(cfg)
    tiers = body["tiers"]
    assert list(tiers) == ["public", "safe", "private"]
    public = tiers["public"]
    assert public["chunks"] == report["totalChunks"] and public["model"] == "rag-assets/feature-hash-v1"
    assert public["contentHash"] == report["contentHash"] and public["freshness"] == "Fresh"
    assert public["pills"] == [{"name": n, "chunks": c["chunks"]} for n, c in sorted(report["collections"].items())]
    assert public["chatLink"] == "./?tier=public" and not public["localOnly"]
    safe, private = tiers["safe"], tiers["private"]
    assert safe["chunks"] == report["tiers"]["safe"]["chunks"] > 0 and safe["dimension"] == 384
    assert safe["freshness"] == age_label(safe["builtAt"])[0] == "Fresh"
    assert safe["bytes"] == report["tiers"]["safe"]["bytes"] > 0
    assert safe["contentHash"] and safe["contentHash"] != private["contentHash"]
    # Two notes on disk: the .obsidian and .trash folders and the image are not counted.
    assert [(v["name"], v["markdownFiles"], v["tier"]) for v in safe["vaults"]] == [("lab", 2, "safe")]
    assert [(v["name"], v["tier"]) for v in private["vaults"]] == [("lab", "safe"), ("me", "private")]
    assert private["localOnly"] and private["chatLink"] == "./?tier=private"
    services = body["services"]
    assert services["embedding"]["selected"] == "hashing" and services["embedding"]["reachable"]
    assert set(services["chat"]) == {"public", "safe", "private"}
    assert services["ollama"]["online"] and services["ollama"]["models"] == [
        "nomic-embed-text:latest",
        "llama3.2:latest",
    ]
    assert body["dagsterUrl"] == "http://127.0.0.1:3000"
    assert body["allowedRoots"] == [str(cfg.config_path.parent)]


def test_ollama_offline_is_said(server, ollama):
    ollama.script_tags("down")
    services = server.get("/admin/api/overview").json()["services"]
    assert services["ollama"]["online"] is False and services["ollama"]["models"] == []


# ------------------------------------------------------------------------------ vaults


def test_adding_and_removing_a_vault_edits_rag_yaml_and_is_logged(server, cfg):
    added = post(server, "/admin/api/vaults/add", {"name": "new", "path": "vaults/new", "tier": "safe"})
    assert added.status_code == 200, added.text
    assert added.json() == {"added": "new", "tier": "safe", "vaults": ["lab", "me", "new"]}
    text = cfg.config_path.read_text(encoding="utf-8")
    assert "  - {name: new, path: vaults/new, tier: safe}\n" in text and text.startswith("# The admin tests'")
    safe = server.get("/admin/api/overview").json()["tiers"]["safe"]
    new = next(v for v in safe["vaults"] if v["name"] == "new")
    assert new["markdownFiles"] == 3 and new["built"] is False  # counted live, not ingested yet
    removed = post(server, "/admin/api/vaults/remove", {"name": "new"})
    assert removed.status_code == 200 and removed.json()["vaults"] == ["lab", "me"]
    assert "name: new" not in cfg.config_path.read_text(encoding="utf-8")
    # The edits' lock is kept beside the outputs, not left in the user's rag.yaml folder.
    assert not (cfg.config_path.parent / ".rag.yaml.lock").exists() and (cfg.data_dir / "rag-yaml.lock").is_file()
    rows = logged(cfg)
    assert [(a.action, a.outcome, a.tier, a.target, a.who) for a in rows] == [
        ("remove_vault", "ok", "safe", "new", "loopback"),
        ("add_vault", "ok", "safe", "new", "loopback"),
    ]
    assert all(a.at.endswith("Z") for a in rows)
    listed = server.get("/admin/api/actions").json()["actions"]
    assert [a["action"] for a in listed] == ["remove_vault", "add_vault"]


REFUSED = [
    ({"name": "a/b", "path": "vaults/new", "tier": "safe"}, "may not contain"),
    ({"name": "..", "path": "vaults/new", "tier": "safe"}, "may not contain"),
    ({"name": "x", "path": "vaults/new\x00", "tier": "safe"}, "control character"),  # was a 500 (embedded null byte)
    ({"name": "x\x00y", "path": "vaults/new", "tier": "safe"}, "control character"),
    ({"name": "x\ny", "path": "vaults/new", "tier": "safe"}, "control character"),
    ({"name": "x", "path": "/tmp", "tier": "safe"}, "outside the allowed roots"),
    ({"name": "x", "path": "content/docs", "tier": "private"}, "overlaps the content folder"),
    ({"name": "x", "path": "out/data", "tier": "private"}, "overlaps the output"),
    ({"name": "x", "path": "vaults/me", "tier": "safe"}, "overlaps the private vault 'me'"),
    ({"name": "lab", "path": "vaults/new", "tier": "safe"}, "exists already"),
    ({"name": "x", "path": "vaults/nope", "tier": "safe"}, "does not exist"),
    ({"name": "x", "path": "vaults/new", "tier": "public"}, "tier must be one of safe, private"),
]


def test_refused_vault_edits_are_400s_that_leave_rag_yaml_byte_for_byte(server, cfg):
    before = cfg.config_path.read_bytes()
    for body, reason in REFUSED:
        answer = post(server, "/admin/api/vaults/add", body)
        assert answer.status_code == 400 and reason in answer.json()["error"], (body, answer.text)
    answer = post(server, "/admin/api/vaults/remove", {"name": "nope"})
    assert answer.status_code == 400 and "no vault named 'nope'" in answer.json()["error"]
    assert cfg.config_path.read_bytes() == before
    rows = logged(cfg)
    assert len(rows) == len(REFUSED) + 1 and {a.outcome for a in rows} == {"refused"}
    assert rows[0].detail.startswith("no vault named 'nope'")


def test_a_vault_write_that_would_not_validate_is_refused(server, cfg):
    (cfg.config_path.parent / "identity_map.json").unlink()  # the Safe tier needs it
    before = cfg.config_path.read_bytes()
    answer = post(server, "/admin/api/vaults/add", {"name": "new", "path": "vaults/new", "tier": "private"})
    assert answer.status_code == 400 and "does not validate" in answer.json()["error"]
    assert "identity map" in answer.json()["error"] and cfg.config_path.read_bytes() == before


BAD_BODIES = [
    ({"content": b'{"name": "x"', "headers": {"Content-Type": "application/json"}}, 400, "must be JSON"),
    ({"content": b"[1]", "headers": {"Content-Type": "application/json"}}, 400, "must be a JSON object"),
    ({"json": {"name": "x", "path": "p", "tier": "safe", "force": True}}, 400, "unknown key(s) force"),
    ({"json": {"name": "x", "tier": "safe"}}, 400, "missing or empty path"),
    ({"json": {"name": 3, "path": "p", "tier": "safe"}}, 400, "missing or empty name"),
    (
        {"content": b"name=x&path=p&tier=safe", "headers": {"Content-Type": "application/x-www-form-urlencoded"}},
        415,
        "application/json",
    ),
    ({"content": b'{"name": "x", "path": "p", "tier": "safe"}'}, 415, "application/json"),  # no Content-Type
    ({"content": b'{"name": "' + b"x" * 20_000 + b'"}', "headers": {"Content-Type": "application/json"}}, 413, "over"),
]


@pytest.mark.parametrize("request_kwargs,status,message", BAD_BODIES)
def test_bad_bodies_get_a_clear_4xx_never_a_500(server, cfg, request_kwargs, status, message):
    before = cfg.config_path.read_bytes()
    answer = server.post("/admin/api/vaults/add", **request_kwargs)
    assert answer.status_code == status and message in answer.json()["error"], answer.text
    assert cfg.config_path.read_bytes() == before


# ------------------------------------------------------------------------------ ingest


def test_ingest_launches_the_tier_job_into_the_instance_and_reports_its_progress(server, cfg):
    assert (
        post(server, "/admin/api/vaults/add", {"name": "new", "path": "vaults/new", "tier": "safe"}).status_code == 200
    )
    started = post(server, "/admin/api/ingest", {"tier": "safe"})
    assert started.status_code == 200, started.text
    run_id = started.json()["runId"]
    assert started.json()["runUrl"] == f"http://127.0.0.1:3000/runs/{run_id}"
    again = post(server, "/admin/api/ingest", {"tier": "safe"})  # the first one is still loading
    assert again.status_code == 409 and run_id in again.json()["error"]
    progress = wait_run(server, run_id)
    assert progress["status"] == "SUCCESS" and progress["job"] == "update_safe_vaults", progress
    assert progress["stepsSucceeded"] >= 2 and progress["materializations"] >= 2
    with dg.DagsterInstance.get() as instance:  # the instance at DAGSTER_HOME: what the Dagster UI shows
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert run.tags["rag/launched-by"] == "loopback"
    new = next(v for v in server.get("/admin/api/overview").json()["tiers"]["safe"]["vaults"] if v["name"] == "new")
    assert new["built"] and new["chunks"] >= 3
    assert ("ingest", "started", "safe", run_id) in [(a.action, a.outcome, a.tier, a.detail) for a in logged(cfg)]


def test_ingesting_a_tier_after_its_last_vault_left_purges_its_rows(server, cfg):
    assert post(server, "/admin/api/vaults/remove", {"name": "lab"}).status_code == 200
    run_id = post(server, "/admin/api/ingest", {"tier": "safe"}).json()["runId"]
    progress = wait_run(server, run_id)
    assert progress["status"] == "SUCCESS" and progress["job"] == "refresh_tier_stores", progress
    assert store.read_sources(cfg.safe_store_path) == {}
    assert server.get("/admin/api/overview").json()["tiers"]["safe"]["chunks"] == 0


def test_ingest_refusals(server, cfg, monkeypatch):
    assert post(server, "/admin/api/ingest", {"tier": "public"}).status_code == 400
    assert server.get("/admin/api/runs/not-a-run").status_code == 400
    unknown = server.get("/admin/api/runs/00000000-0000-4000-8000-000000000000")
    assert unknown.status_code == 404 and "no run" in unknown.json()["error"]
    monkeypatch.delenv("DAGSTER_HOME")
    answer = post(server, "/admin/api/ingest", {"tier": "private"})
    assert answer.status_code == 400 and "DAGSTER_HOME is not set" in answer.json()["error"]
    assert [(a.action, a.outcome) for a in logged(cfg)][:2] == [("ingest", "refused"), ("ingest", "refused")]


# ------------------------------------------------------------------------------ audit


def test_the_audit_finds_a_planted_key_and_shows_only_a_masked_preview(server, cfg):
    clean = post(server, "/admin/api/audit", {"tier": "safe"})
    assert clean.status_code == 200 and clean.json()["total"] == 0 and clean.json()["chunksScanned"] > 0
    # A key that reached the store anyway (a bug upstream, a store copied from elsewhere).
    with closing(sqlite3.connect(cfg.safe_store_path)) as conn, conn:
        conn.execute(
            "UPDATE chunks SET text = text || ? WHERE rowid = (SELECT MIN(rowid) FROM chunks)", (f" key {PLANTED_KEY}",)
        )
    audit = post(server, "/admin/api/audit", {"tier": "safe"})
    assert audit.status_code == 200
    body = audit.json()
    assert body["total"] == 1 and body["kinds"] == {"aws_access_key_id": 1} and not body["ok"]
    assert body["findings"][0]["field"] == "text" and "AK…" in body["findings"][0]["preview"]
    assert PLANTED_KEY not in audit.text
    assert post(server, "/admin/api/audit", {"tier": "private"}).status_code == 400
    details = [a.detail for a in logged(cfg) if a.action == "audit" and a.outcome == "ok"]
    assert details[0].startswith("1 finding(s)") and details[1].startswith("0 finding(s)")


# ------------------------------------------------------------------------------ the page, the log


def test_the_page_is_served_with_the_strict_policy_and_admin_rag_redirects(server):
    page = server.get("/admin")
    assert page.status_code == 200 and "default-src 'self'" in page.headers["content-security-policy"]
    assert 'src="web/js/admin.js"' in page.text
    redirect = server.client.get("/admin/rag", follow_redirects=False)
    assert redirect.status_code == 307 and redirect.headers["location"] == "/admin"
    for asset in ("/web/js/admin.js", "/web/js/admin-cards.js", "/web/js/admin-api.js", "/web/admin.css"):
        assert server.get(asset).status_code == 200, asset


def test_the_actions_go_to_the_log_file_and_leave_the_store_untouched(cfg):
    path = cfg.public_store_path
    real = path.resolve()
    before = (real.stat().st_mtime_ns, real.stat().st_size, real.read_bytes())
    assert admin_actions.recent_actions(path) == []
    first = admin_actions.record_action(path, admin_actions.AdminAction("alice", "audit", "ok", tier="safe"))
    admin_actions.record_action(
        path, admin_actions.AdminAction("bob", "ingest", "started", tier="private", detail="run")
    )
    assert [a.who for a in admin_actions.recent_actions(path)] == ["bob", "alice"]
    assert admin_actions.recent_actions(path, limit=1)[0].detail == "run" and first.at.endswith("Z")
    assert (real.stat().st_mtime_ns, real.stat().st_size, real.read_bytes()) == before
    with closing(store.connect(path, readonly=True)) as conn:
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'admin_actions'").fetchone() is None
    assert tier_logs.log_path(path).is_file()


def test_the_action_log_survives_a_publish(cfg):
    """A publish writes a new generation of the store: the log, in its file beside it, is left as it is."""
    from rag_assets.defs.runner import run_build
    from rag_assets.index import generations

    admin_actions.record_action(cfg.public_store_path, admin_actions.AdminAction("alice", "audit", "ok", tier="safe"))
    before = generations.published(cfg).id
    doc = cfg.content_dir / "docs" / "zigbee.md"
    doc.write_text(doc.read_text(encoding="utf-8") + "\nPair the sensors one at a time.\n", encoding="utf-8")
    with instance_for_test() as instance:
        assert run_build(cfg, instance, collections=["docs"], vaults=[]).success
    assert generations.published(cfg).id != before
    assert [(a.who, a.action) for a in admin_actions.recent_actions(cfg.public_store_path)] == [("alice", "audit")]
