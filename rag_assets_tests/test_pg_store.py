"""The PostgreSQL + pgvector store (``store.backend: postgres``) end to end, on a real server.

A sample build with the postgres backend (real Dagster runs) syncs the three tiers into
their schemas; every search then returns the same JSON from PostgreSQL as from the SQLite
stores (hybrid, bm25, vector, filters, page and chunk views, relevance), through the Python
API, the `rag` command and `rag serve`. An edit and a deletion are synced by diff (the rows
of unchanged chunks are not rewritten); the migration version is recorded; the Private
tier refuses a remote URL. The server: see rag_assets_tests/pgvector.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rag_assets.config import ConfigError, VaultConfig, load_config
from rag_assets.config.settings import StoreSettings
from rag_assets.defs.runner import run_build
from rag_assets.index import pg_mirror, pg_schema, pg_sync, store, tier_logs
from rag_assets.index.params import SearchError, SearchParams
from rag_assets.search.backends import open_index
from rag_assets.search.retrieval import tier_embedder
from rag_assets.search.search_log import read_log
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .conftest import REPO_ROOT, SAMPLE_CONTENT, instance_for_test
from .live_server import ServerThread
from .pgvector import pgvector_server, scratch_database

QUERIES = ("how do I set up vlans on proxmox", "restic offsite backup", "wireguard handshake", "ssh keys")
PARAMS = (
    SearchParams(k=5),
    SearchParams(k=5, view="chunks", min_score=0.0),
    SearchParams(k=5, mode="bm25"),
    SearchParams(k=5, mode="vector", min_score=0.0),
    SearchParams(k=5, collections=("posts", "homelab-notes"), min_score=0.0),
    SearchParams(k=5, tags=("proxmox",), min_score=0.0),
    SearchParams(k=5, slug_prefix="services/", min_score=0.0),
)
TIMINGS = ("latencyMs", "embedMs")


def sample_config(output: Path, content: Path = SAMPLE_CONTENT, url: str | None = None):
    """The repository's rag.yaml over ``content``, hashing embedders, the store backend given by ``url``."""
    cfg = load_config(
        REPO_ROOT / "rag.yaml", output_dir=output, embedder="hashing", private_embedder="hashing", environ={}
    )
    vaults = tuple(VaultConfig(v.name, content / "vaults" / v.name, v.tier) for v in cfg.vaults)
    store_settings = StoreSettings(backend="postgres", url=url) if url else StoreSettings()
    return dataclasses.replace(cfg, content_dir=content, vaults=vaults, store=store_settings)


def without_timings(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in TIMINGS}


@pytest.fixture(scope="module")
def server():
    with pgvector_server() as url:
        yield url


@pytest.fixture(scope="module")
def built(server, tmp_path_factory):
    """One sample build with the postgres backend: (the SQLite config, the postgres config, the URL)."""
    with scratch_database(server) as url:
        pg = sample_config(tmp_path_factory.mktemp("pgstore") / "out", url=url)
        with instance_for_test() as instance:
            assert run_build(pg, instance).success
        yield dataclasses.replace(pg, store=StoreSettings()), pg, url


def search_json(cfg, tier: str, query: str, params: SearchParams) -> dict:
    index = open_index(cfg, tier, log_searches=False)
    try:
        embedder = None if params.mode == "bm25" else tier_embedder(cfg, tier, index)
        return without_timings(index.search(query, embedder, params).to_json())
    finally:
        index.close()


@pytest.mark.parametrize("tier", ["public", "safe", "private"])
def test_search_returns_the_sqlite_paths_json(built, tier):
    lite, pg, _ = built
    hits = 0
    for query in QUERIES:
        for params in PARAMS:
            expected = search_json(lite, tier, query, params)
            assert search_json(pg, tier, query, params) == expected, (tier, query, params)
            hits += len(expected["hits"])
    assert hits > 20  # the comparison is not between empty results


def test_the_schemas_hold_the_stores_rows_with_their_indexes(built):
    import psycopg

    lite, _, url = built
    with psycopg.connect(url) as conn:
        for tier in ("public", "safe", "private"):
            s = pg_schema.schema_name(tier)
            versions = conn.execute(f"SELECT version FROM {s}.schema_migrations ORDER BY version").fetchall()
            assert versions == [(1,), (2,), (3,)] and pg_schema.SCHEMA_VERSION == 3
            assert pg_schema.schema_version(conn, tier) == 3
            ids = {r[0] for r in conn.execute(f"SELECT id FROM {s}.chunks")}
            assert ids == store.chunk_ids(lite.store_path(tier)) and ids
            indexes = {
                r[0]: r[1]
                for r in conn.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (s,))
            }
            assert "USING hnsw (embedding vector_cosine_ops)" in indexes["chunks_embedding_hnsw"]
            assert "USING gin (tsv)" in indexes["chunks_tsv"]
            matched = conn.execute(
                f"SELECT count(*) FROM {s}.chunks WHERE tsv @@ plainto_tsquery('english', 'networks')"
            ).fetchone()[0]
            assert matched > 0 or tier == "safe"
    # A vector from PostgreSQL is the SQLite store's, bit for bit.
    with psycopg.connect(url) as conn:
        from pgvector.psycopg import register_vector

        register_vector(conn)
        chunk_id, vector = conn.execute("SELECT id, embedding FROM rag_public.chunks ORDER BY id LIMIT 1").fetchone()
    with store.connect(lite.store_path("public"), readonly=True) as conn:
        blob = conn.execute("SELECT embedding FROM chunks WHERE id = ?", (chunk_id,)).fetchone()[0]
    assert vector.to_numpy().tobytes() == blob


def test_hnsw_mode_scans_the_index_and_exact_mode_does_not(built):
    """The planner prefers an exact scan of a small store at a high ef_search; HNSW mode must not."""
    _, pg, _ = built
    query = np.ones(384, dtype=np.float32)  # the hashing model's dimension
    hnsw = open_index(pg, "public", log_searches=False)
    exact = open_index(pg, "public", log_searches=False, exact=True)
    try:
        assert "Index Scan using chunks_embedding_hnsw" in hnsw.query_plan(query, 200)
        # A filter down to a few documents reads their chunks by the document index (exact, and cheap).
        assert "chunks_document" in hnsw.query_plan(query, 200, ["posts/restic-offsite-backups"])
        assert "chunks_embedding_hnsw" not in exact.query_plan(query, 200)
        assert len(hnsw.nearest_ids(query, 10)) == 10
    finally:
        hnsw.close()
        exact.close()


def test_exact_vector_search_scans_the_loaded_vectors_not_the_index(built, monkeypatch):
    """store.vector_search: exact takes the vector candidates from the search process's own
    vectors (no HNSW query at all), and gives the SQLite path's JSON in every mode."""
    from rag_assets.search.pg_index import PgSearchIndex

    lite, pg, _ = built
    exact_cfg = dataclasses.replace(pg, store=pg.store.model_copy(update={"vector_search": "exact"}))

    def no_hnsw(*args, **kwargs):
        raise AssertionError("vector_search exact queried PostgreSQL for vector candidates")

    monkeypatch.setattr(PgSearchIndex, "_nearest", no_hnsw)
    for query in QUERIES:
        for params in PARAMS:
            assert search_json(exact_cfg, "public", query, params) == search_json(lite, "public", query, params), (
                query,
                params,
            )
    with pytest.raises(AssertionError, match="queried PostgreSQL"):  # the default still uses the index
        search_json(pg, "public", QUERIES[0], SearchParams(mode="vector"))


def test_vector_search_setting_is_validated(tmp_path):
    (tmp_path / "rag.yaml").write_text(
        "store: {backend: postgres, url: 'postgresql://127.0.0.1/rag', vector_search: exact}\n"
    )
    assert load_config(tmp_path / "rag.yaml", environ={}).store.vector_search == "exact"
    (tmp_path / "rag.yaml").write_text("store: {vector_search: ivfflat}\n")
    with pytest.raises(ConfigError, match="vector_search"):
        load_config(tmp_path / "rag.yaml", environ={})


def test_rag_search_and_rag_serve_read_postgres(built, monkeypatch, capsys):
    lite, pg, url = built
    args = ["search", "vlan proxmox", "--output-dir", str(pg.output_dir), "--json", "--tier"]
    monkeypatch.setenv("RAG_CONFIG", str(REPO_ROOT / "rag.yaml"))
    assert rag([*args, "public"]) == 0
    from_sqlite = without_timings(json.loads(capsys.readouterr().out))
    monkeypatch.setenv("RAG_STORE_URL", url)
    assert rag([*args, "public"]) == 0
    assert without_timings(json.loads(capsys.readouterr().out)) == from_sqlite
    assert (pg.output_dir / "data" / "postgres-mirror" / "rag-store-public.db").is_file()
    with ServerThread(create_app(lite, log_searches=False)) as a, ServerThread(create_app(pg, log_searches=False)) as b:
        for tier in ("public", "private"):
            expected = a.get("/search", q="ssh keys", tier=tier, view="chunks").json()
            got = b.get("/search", q="ssh keys", tier=tier, view="chunks").json()
            assert without_timings(got) == without_timings(expected) and expected["hits"]


def test_the_logs_live_beside_the_mirror_and_an_older_mirrors_move_out(built):
    import sqlite3
    from contextlib import closing

    _, pg, url = built
    index = open_index(pg, "public")
    index.search("vlan", None, SearchParams(mode="bm25"))
    mirror = index.path
    index.close()
    logs = tier_logs.log_path(mirror)
    assert logs.parent == mirror.parent and read_log(mirror)[0][0]["query"] == "vlan"
    # A mirror of an older version: its own search_log, no log file. The next copy moves the rows out.
    store.remove_database(logs)
    with closing(store.connect(mirror)) as conn:
        conn.execute("CREATE TABLE search_log (id INTEGER PRIMARY KEY, at TEXT NOT NULL, query TEXT NOT NULL)")
        conn.execute("INSERT INTO search_log(at, query) VALUES ('2026-01-01T00:00:00Z', 'older')")
    schema = pg_schema.schema_name("public")
    with closing(pg_schema.connect(url, "public")) as conn:  # as the search index connects
        pg_schema.register_types(conn)
        pg_mirror.write_mirror(conn, schema, mirror, pg_mirror.pg_stamp(conn, schema))
    assert [r["query"] for r in read_log(mirror)[0]] == ["older"]
    with closing(sqlite3.connect(mirror)) as conn:
        assert conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_log'").fetchone() is None


def test_mcp_tools_read_postgres(built):
    from rag_assets.serve.mcp_tools import GET_CONTEXT, GET_DOCUMENT, SEARCH, Caller, ToolEnv, call_tool
    from rag_assets.serve.tiers import Tiers

    lite, pg, _ = built
    local = Caller("http", "127.0.0.1")
    answers = []
    for cfg in (lite, pg):
        env = ToolEnv(cfg, Tiers(cfg, log_searches=False))
        found = call_tool(env, local, SEARCH, {"query": "wireguard handshake", "tier": "private"})
        hit = found["hits"][0]
        page = call_tool(
            env, local, GET_DOCUMENT, {"collection": hit["collection"], "slug": hit["slug"], "tier": "private"}
        )
        context = call_tool(env, local, GET_CONTEXT, {"query": "restic offsite backup"})
        answers.append((without_timings(found), page, without_timings(context)))
        env.tiers.close()
    assert answers[1] == answers[0] and answers[0][0]["hits"]


def test_status_reports_each_tiers_postgres_store(built):
    from rag_assets.serve.status import status_report

    _, pg, _ = built
    tiers = status_report(pg)["postgres"]["tiers"]
    assert {t: (v["schemaVersion"], v["inSync"]) for t, v in tiers.items()} == {
        t: (pg_schema.SCHEMA_VERSION, True) for t in ("public", "safe", "private")
    }
    assert tiers["private"]["documents"] > tiers["safe"]["documents"] > 0


def test_an_edit_and_a_deletion_sync_by_diff(server, tmp_path):
    import psycopg

    content = tmp_path / "content"
    shutil.copytree(SAMPLE_CONTENT, content)
    with scratch_database(server) as url:
        pg = sample_config(tmp_path / "out", content, url=url)
        with instance_for_test() as instance:
            assert run_build(pg, instance).success

            def rows(tier: str) -> dict[str, tuple]:
                with psycopg.connect(url) as conn:
                    s = pg_schema.schema_name(tier)
                    return {
                        r[0]: (r[1], r[2]) for r in conn.execute(f"SELECT id, document_id, xmin::text FROM {s}.chunks")
                    }

            before = {tier: rows(tier) for tier in ("public", "safe")}
            edited = content / "posts" / "restic-offsite-backups.md"
            edited.write_text(edited.read_text() + "\n\nA new closing paragraph about pruning snapshots.\n")
            (content / "posts" / "wireguard-remote-access.md").unlink()
            note = content / "vaults" / "homelab-notes" / "services" / "grafana-alerting.md"
            note.write_text(note.read_text() + "\n\nAlert on disk temperature too.\n")
            assert run_build(pg, instance).success
        after = {tier: rows(tier) for tier in ("public", "safe")}
        lite = dataclasses.replace(pg, store=StoreSettings())
        for tier, changed_doc, gone_doc in (
            ("public", "posts/restic-offsite-backups", "posts/wireguard-remote-access"),
            ("safe", "homelab-notes/services/grafana-alerting", None),
        ):
            old, new = before[tier], after[tier]
            assert set(new) == store.chunk_ids(lite.store_path(tier))
            assert not any(doc == gone_doc for doc, _ in new.values())
            untouched = {cid: row for cid, row in old.items() if row[0] not in (changed_doc, gone_doc)}
            assert untouched and all(new[cid] == row for cid, row in untouched.items())  # same xmin: not rewritten
            rewritten = [cid for cid, row in new.items() if row[0] == changed_doc and old.get(cid) != row]
            assert rewritten and len(rewritten) < len(new)
        # A second sync with nothing changed touches nothing; other HNSW settings rebuild only the index.
        with psycopg.connect(url) as conn:
            assert pg_schema.vector_index_settings(conn, "public") == pg_schema.DEFAULT_HNSW
        result = pg_sync.sync_tier(url, "public", lite.store_path("public"), hnsw=(24, 80))
        assert (result.chunks_written, result.chunks_deleted, result.documents_written, result.full_rewrite) == (
            0,
            0,
            0,
            False,
        )
        with psycopg.connect(url) as conn:
            assert pg_schema.vector_index_settings(conn, "public") == (24, 80)
        assert rows("public") == after["public"]
        params = SearchParams(k=5, min_score=0.0)
        assert search_json(pg, "public", "pruning snapshots", params) == search_json(
            lite, "public", "pruning snapshots", params
        )


def test_eval_backend_postgres_scores_like_sqlite(server, make_config, tmp_path):
    from rag_assets.evaluation.runner import run_evaluation

    from .test_evaluation import write_beir

    dataset = write_beir(tmp_path / "tiny")
    with scratch_database(server) as url:
        cfg = dataclasses.replace(make_config(tmp_path / "content"), store=StoreSettings(backend="postgres", url=url))
        on_sqlite = run_evaluation(cfg, dataset, embedder_name="hashing", backend="sqlite")
        on_postgres = run_evaluation(cfg, dataset, embedder_name="hashing")
    assert (on_sqlite.info.backend, on_postgres.info.backend) == ("sqlite", "postgres")
    assert on_postgres.metrics == on_sqlite.metrics


def test_store_url_from_the_environment_selects_postgres():
    env = {"RAG_STORE_URL": "postgresql://rag@127.0.0.1:5433/rag"}
    cfg = load_config(REPO_ROOT / "rag.yaml", environ=env)
    assert (cfg.store.backend, cfg.store.url) == ("postgres", env["RAG_STORE_URL"])
    assert load_config(REPO_ROOT / "rag.yaml", environ={}).store == StoreSettings()


def write_config(tmp_path: Path, store_section: str, vaults: bool = True) -> Path:
    lines = ["content_dir: content", store_section]
    if vaults:
        lines += ["identity_map: null", "vaults:", "  - {name: notes, path: notes, tier: private}"]
    path = tmp_path / "rag.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://rag@db.example.com/rag",
        "postgresql://rag@10.0.0.5:5432/rag",
        "postgresql://rag@127.0.0.1,db.example.com/rag",  # libpq tries every host listed
        "postgresql://rag@localhost/rag?host=db.example.com",
        "postgresql://rag@localhost/rag?hostaddr=192.0.2.7",  # hostaddr is where libpq connects
        "postgresql:///rag?service=prod",
    ],
)
def test_the_private_tier_with_a_remote_url_is_a_config_error(tmp_path, url):
    path = write_config(tmp_path, f"store: {{backend: postgres, url: '{url}'}}")
    with pytest.raises(ConfigError, match="store.url: the Private tier's store would be at"):
        load_config(path, environ={})
    with pytest.raises(ConfigError, match="not on this machine"):
        load_config(write_config(tmp_path, "store: {backend: sqlite}"), environ={"RAG_STORE_URL": url})
    # Checked again where the store is opened, before any connection is attempted.
    with pytest.raises(pg_schema.PostgresStoreError, match="not on this machine"):
        pg_schema.connect(url, "private", environ={})
    # Without vaults, the other tiers may use any server.
    assert load_config(write_config(tmp_path, f"store: {{backend: postgres, url: '{url}'}}", vaults=False), environ={})


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://rag@127.0.0.1:5432/rag",
        "postgresql://rag@[::1]:5432/rag",
        "postgresql://rag@localhost/rag",
        "postgresql:///rag",  # the default Unix socket
        "postgresql://rag@/rag?host=/var/run/postgresql",
    ],
)
def test_the_private_tier_accepts_a_local_url(tmp_path, url):
    cfg = load_config(write_config(tmp_path, f"store: {{backend: postgres, url: '{url}'}}"), environ={})
    assert cfg.store.url == url


def test_an_empty_host_follows_pghost(tmp_path):
    path = write_config(tmp_path, "store: {backend: postgres, url: 'postgresql:///rag'}")
    with pytest.raises(ConfigError, match="db.example.com"):
        load_config(path, environ={"PGHOST": "db.example.com"})


def test_the_private_tier_connects_over_loopback(server):
    """A loopback TCP URL is reached (the machine's PostgreSQL, 127.0.0.1:5432) and accepted."""
    from .postgres import PG_HOST, PG_PORT, require_postgres

    require_postgres()
    conn = pg_schema.connect(f"postgresql://postgres@{PG_HOST}:{PG_PORT}/postgres", "private", environ={})
    try:
        assert conn.info.hostaddr in ("127.0.0.1", "::1")
    finally:
        conn.close()


def test_postgres_needs_a_url(tmp_path):
    with pytest.raises(ConfigError, match="backend postgres needs url"):
        load_config(write_config(tmp_path, "store: {backend: postgres}", vaults=False), environ={})
    with pytest.raises(ConfigError, match="must be a PostgreSQL URL"):
        load_config(write_config(tmp_path, "store: {backend: postgres, url: 'mysql://x/y'}", vaults=False), environ={})


def test_a_store_never_synced_says_so(server, tmp_path, monkeypatch, capsys):
    with scratch_database(server) as url:
        cfg = sample_config(tmp_path / "out", url=url)
        assert not open_index(cfg, "public").exists()
        monkeypatch.setenv("RAG_STORE_URL", url)
        assert (
            rag(["ask", "vlans?", "--config", str(REPO_ROOT / "rag.yaml"), "--output-dir", str(tmp_path / "out")]) == 2
        )
        assert "has no store yet (expected in PostgreSQL)" in capsys.readouterr().err
    gone = open_index(sample_config(tmp_path / "out", url="postgresql://postgres@/absent?host=/nonexistent"), "public")
    with pytest.raises(SearchError, match="cannot connect"):
        gone.exists()
