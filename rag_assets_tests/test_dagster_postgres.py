"""dagster.postgres.yaml: the instance variant that keeps run and event storage in PostgreSQL.

The build test runs a real sample build against the PostgreSQL server on 127.0.0.1:5432,
in a database it creates and drops, with the instance loaded from dagster.postgres.yaml
through DAGSTER_HOME and the DAGSTER_PG_* variables. Where dagster-postgres is not
installed or no server answers on that port it skips, except under CI, where that fails. It connects
as DAGSTER_PG_USER (default ``postgres``) with DAGSTER_PG_PASSWORD (default empty: trust
auth); that user must be allowed to create databases.
"""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.ingest.collections import discover_collections

from .conftest import REPO_ROOT, check_sample_build
from .postgres import PG_YAML, postgres_home, scratch_database


def test_the_postgres_variant_keeps_every_other_setting_of_dagster_yaml():
    """dagster.yaml cannot include another file, so the variant copies its sections: keep them equal."""
    default = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text())
    variant = yaml.safe_load(PG_YAML.read_text())
    assert "storage" not in default
    assert {k: v for k, v in variant.items() if k != "storage"} == default
    db = variant["storage"]["postgres"]["postgres_db"]
    # Every connection field comes from the environment; nothing deployment-specific is in the file.
    assert {k: v for k, v in db.items() if k in ("hostname", "port", "db_name", "username", "password")} == {
        "hostname": {"env": "DAGSTER_PG_HOST"},
        "port": {"env": "DAGSTER_PG_PORT"},
        "db_name": {"env": "DAGSTER_PG_DB"},
        "username": {"env": "DAGSTER_PG_USER"},
        "password": {"env": "DAGSTER_PG_PASSWORD"},
    }
    assert (REPO_ROOT / ".dagster_home_postgres" / "dagster.yaml").resolve() == PG_YAML.resolve()


@pytest.fixture
def pg_database(monkeypatch):
    """A fresh database on the local server, named in the DAGSTER_PG_* variables; dropped after."""
    with scratch_database() as (settings, connect):
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        yield connect


def test_a_sample_build_is_recorded_in_postgres(pg_database, tmp_path):
    """What `tasks.py build` does, with DAGSTER_HOME holding dagster.postgres.yaml.

    Both tiers embed with `hashing`: where the run and event records go does not depend on the
    embedder, and the Private tier's default local model would only add seconds of CPU."""
    home = postgres_home(tmp_path / "dagster_home")
    cfg = load_config(
        REPO_ROOT / "rag.yaml", output_dir=tmp_path / "out", embedder="hashing", private_embedder="hashing", environ={}
    )
    collections = discover_collections(cfg).collections
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        outcome = run_build(cfg, instance, full=True)
        runs = check_sample_build(instance, outcome, collections)
        run_ids = {r.run_id for r in runs}

    # The records are in the test's own database, not in a file under DAGSTER_HOME.
    conn = pg_database()
    try:
        cur = conn.cursor()
        cur.execute("SELECT run_id FROM runs")
        assert {row[0] for row in cur.fetchall()} == run_ids
        cur.execute("SELECT asset_key, partition FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'")
        stored = cur.fetchall()
    finally:
        conn.close()
    assert {p for key, p in stored if key == '["parsed_documents"]'} == set(collections)
    assert not list(home.rglob("*.db"))
