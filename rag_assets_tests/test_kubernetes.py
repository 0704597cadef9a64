"""deploy/kubernetes/: the dagster-k8s instance and executor configuration, validated (not run).

No cluster here: the instance file is loaded by Dagster and its ``K8sRunLauncher`` built
from it (Dagster validates the config against the launcher's schema first), with a
kubeconfig that names a cluster nobody contacts in place of the in-cluster token; the
executor's run config is validated against the jobs that use ``k8s_job_executor``.
"""

from __future__ import annotations

import contextvars

import dagster as dg
import pytest
import yaml

from rag_assets.config import load_config

from .conftest import REPO_ROOT
from .postgres import scratch_database
from .skip_allowlist import under_ci

DEPLOY = REPO_ROOT / "deploy" / "kubernetes"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: test, user: {token: not-a-token}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
"""


@pytest.fixture
def dagster_k8s():
    """The k8s extra; under CI it must be installed."""
    try:
        import dagster_k8s
    except ImportError as exc:
        if under_ci():
            pytest.fail(f"the k8s extra is not installed ({exc.name}); CI installs it")
        pytest.skip(f"the k8s extra is not installed ({exc.name}): pip install -e '.[k8s]'")
    return dagster_k8s


def test_the_instance_file_builds_a_k8s_run_launcher(dagster_k8s, tmp_path, monkeypatch):
    config = yaml.safe_load((DEPLOY / "dagster.k8s.yaml").read_text())
    assert config["run_launcher"]["config"]["load_incluster_config"] is True
    # Outside a cluster: the same file, reading a kubeconfig instead of the pod's token.
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    config["run_launcher"]["config"].update(load_incluster_config=False, kubeconfig_file=str(tmp_path / "kubeconfig"))
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    with scratch_database() as (settings, _connect):  # the storage section opens a real database
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            launcher = instance.run_launcher
            assert isinstance(launcher, dagster_k8s.K8sRunLauncher)
            assert launcher.instance_config_map == "rag-assets-instance"
            assert launcher.postgres_password_secret == "rag-assets-postgres"
            assert launcher.dagster_home == "/opt/dagster/dagster_home"
    # Its other sections are dagster.yaml's, like dagster.postgres.yaml's.
    default = yaml.safe_load((REPO_ROOT / "dagster.yaml").read_text())
    assert {k: v for k, v in config.items() if k not in ("storage", "run_launcher")} == default
    assert config["storage"] == yaml.safe_load((REPO_ROOT / "dagster.postgres.yaml").read_text())["storage"]


def test_a_misspelt_launcher_setting_is_refused_by_the_same_validation(dagster_k8s, tmp_path, monkeypatch):
    """The check above is Dagster's schema validation, which refuses what it does not know."""
    config = yaml.safe_load((DEPLOY / "dagster.k8s.yaml").read_text())
    config["run_launcher"]["config"]["servce_account_name"] = config["run_launcher"]["config"].pop(
        "service_account_name"
    )
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    with scratch_database() as (settings, _connect):
        for key, value in settings.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(dg.DagsterInvalidConfigError, match="servce_account_name"):
            with dg.DagsterInstance.from_config(str(home)) as instance:
                instance.run_launcher  # noqa: B018 - building it validates its config


def test_the_executor_config_is_valid_for_the_kubernetes_jobs(dagster_k8s, tmp_path):
    from rag_assets.defs.kubernetes import INDEX_JOB, PUBLISH_JOB, kubernetes_definitions

    run_config = yaml.safe_load((DEPLOY / "k8s-executor.yaml").read_text())
    defs = kubernetes_definitions(load_config(None, content_dir=tmp_path, output_dir=tmp_path / "out", environ={}))
    # Resolved in an empty context, as loaded_definitions does: an instance an earlier test of this
    # worker entered leaves itself Dagster's current definitions-state storage, dead once collected
    # ("Attempted to resolve undefined DagsterInstance weakref"; seen when the module order changed).
    contextvars.Context().run(defs.get_repository_def)
    for name in (INDEX_JOB, PUBLISH_JOB):
        job = defs.resolve_job_def(name)
        assert job.executor_def.name == "k8s"
        dg.validate_run_config(job, run_config)
    run_config["execution"]["config"]["max_concurent"] = 4
    with pytest.raises(dg.DagsterInvalidConfigError, match="max_concurent"):
        dg.validate_run_config(defs.resolve_job_def(INDEX_JOB), run_config)
