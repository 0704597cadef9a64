"""End to end through a real `dagster dev`: the change sensor builds, then re-indexes one edited collection.

Starts `dagster dev` (webserver + daemon + code server) headless on a free loopback port,
against a temporary content tree, rag.yaml and DAGSTER_HOME, and drives it only through
its GraphQL API and the files it writes:

1. with no index yet, the first sensor tick launches one `update_collection` run over every
   collection (a partition range); it succeeds and publishes the JSON index and the SQLite store;
2. editing one file makes the sensor launch a new run for that collection only, and the
   new words become searchable in the store's FTS table;
3. the server stops cleanly when its process group gets SIGTERM.

It runs twice: on the default SQLite instance (dagster.yaml) and on dagster.postgres.yaml,
whose run, event-log and schedule storage is a throw-away database on the local PostgreSQL.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import httpx
import orjson
import pytest

from rag_assets.index.index_json import read_index

from .conftest import REPO_ROOT
from .postgres import postgres_home, scratch_database

DAGSTER = Path(sys.executable).with_name("dagster")
UPDATE_JOB = "update_collection"
PARTITION_TAG = "dagster/partition"
RANGE_TAGS = ("dagster/asset_partition_range_start", "dagster/asset_partition_range_end")
# rag.yaml's automation.sensor_interval_seconds. Dagster's sensor daemon evaluates sensors at most
# once per loop of 5 s, so 1 s means "on every loop"; with 5 s a tick that comes a moment early
# is skipped and the next is 10 s later, and every wait below pays for it.
SENSOR_INTERVAL = 1
TICK_DEADLINE = 30.0
EDITED, UNTOUCHED = "guides", "notes"
UNIQUE_WORD = "zyxwvut"
# Deadlines only bound a failure: a healthy run takes ~100 s on an idle 2-core machine (five
# Python processes start, and each run is one more), ~130-160 s when other test suites share the cores.
STARTUP_DEADLINE = 90.0
BUILD_DEADLINE = 180.0
FAILED_STATUSES = {"FAILURE", "CANCELED", "CANCELING"}

RUNS_QUERY = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter) {
    __typename
    ... on Runs { results { runId status jobName tags { key value } } }
    ... on PythonError { message }
    ... on InvalidPipelineRunsFilterError { message }
  }
}
"""
SENSOR_NAME = "content_change_sensor"
SENSOR_QUERY = """
query Sensors {
  repositoriesOrError {
    __typename
    ... on RepositoryConnection {
      nodes {
        sensors {
          name
          sensorState {
            status
            ticks(limit: 5) { tickId status timestamp runIds skipReason error { message } }
          }
        }
      }
    }
    ... on PythonError { message }
  }
}
"""


def paragraph(topic: str, n: int) -> str:
    return " ".join(f"{topic} sentence {i} explains the {topic} setup in plain words." for i in range(n))


# The smallest tree that shows it: one file in the collection that gets edited, one in the one
# that must be left alone.
CONTENT = {
    "guides/upgrade.md": f"---\ntitle: Upgrading\n---\n# Upgrading\n\n{paragraph('upgrade', 10)}\n",
    "notes/tuesday.md": f"# Tuesday\n\n{paragraph('tuesday', 9)}\n",
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _default_signals() -> None:
    """In the child: a non-interactive parent may have left SIGINT/SIGTERM ignored; undo that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class DagsterDev:
    """A `dagster dev` process group, its log file and a GraphQL client."""

    def __init__(self, port: int, env: dict[str, str], log_path: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [str(DAGSTER), "dev", "-h", "127.0.0.1", "-p", str(port), "-w", str(REPO_ROOT / "workspace.yaml")],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_signals,
        )
        self.pgid = self.proc.pid  # start_new_session: the child leads its own group
        self.client = httpx.Client(base_url=self.url, timeout=10.0)

    def output_tail(self, lines: int = 60) -> str:
        try:
            with open(self.log_path, "rb") as f:
                tail = deque(f, maxlen=lines)
        except OSError as exc:
            return f"<no output: {exc}>"
        return b"".join(tail).decode("utf-8", "replace")

    def fail(self, message: str) -> None:
        pytest.fail(f"{message}\n--- last lines of `dagster dev` output ---\n{self.output_tail()}", pytrace=False)

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            self.fail(f"`dagster dev` exited early with code {code}")

    def wait_until_serving(self, deadline: float) -> float:
        start = time.monotonic()
        last_error: Exception | None = None
        while time.monotonic() - start < deadline:
            self.check_alive()
            try:
                if self.client.get("/server_info", timeout=3.0).status_code == 200:
                    return time.monotonic() - start
            except httpx.HTTPError as exc:
                last_error = exc
            time.sleep(0.25)
        self.fail(f"`dagster dev` did not answer GET /server_info within {deadline:.0f}s (last error: {last_error!r})")
        raise AssertionError("unreachable")

    def runs(self) -> list[dict]:
        """Every run of the update job, as {runId, status, partitions} (its key, or its range's ends)."""
        response = self.client.post(
            "/graphql", json={"query": RUNS_QUERY, "variables": {"filter": {"pipelineName": UPDATE_JOB}}}
        )
        response.raise_for_status()
        body = response.json()
        if body.get("errors"):
            self.fail(f"GraphQL errors: {body['errors']}")
        result = body["data"]["runsOrError"]
        if result["__typename"] != "Runs":
            self.fail(f"runsOrError returned {result['__typename']}: {result.get('message')}")
        return [
            {"runId": r["runId"], "status": r["status"], "partitions": _partitions(r["tags"])}
            for r in result["results"]
        ]

    def _sensor_state(self) -> dict:
        response = self.client.post("/graphql", json={"query": SENSOR_QUERY})
        response.raise_for_status()
        body = response.json()
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        result = body["data"]["repositoriesOrError"]
        if result["__typename"] != "RepositoryConnection":
            raise RuntimeError(f"repositoriesOrError returned {result['__typename']}: {result.get('message')}")
        for repo in result["nodes"]:
            for sensor in repo["sensors"]:
                if sensor["name"] == SENSOR_NAME:
                    return sensor["sensorState"]
        raise RuntimeError(f"no sensor named {SENSOR_NAME!r} in the workspace: {result['nodes']}")

    def sensor(self) -> dict:
        """The change sensor's state: {status, ticks: newest first}."""
        try:
            return self._sensor_state()
        except RuntimeError as exc:
            self.fail(str(exc))
            raise

    def sensor_summary(self) -> str:
        try:
            state = self._sensor_state()
        except Exception as exc:  # only for failure messages
            return f"<sensor state unavailable: {exc!r}>"
        ticks = [
            {k: t[k] for k in ("status", "timestamp", "runIds", "skipReason")}
            | {"error": (t["error"] or {}).get("message")}
            for t in state["ticks"]
        ]
        return f"sensor {SENSOR_NAME}: {state['status']}, newest ticks: {ticks}"

    def wait_for_tick_after(self, timestamp: float, deadline: float) -> dict:
        """Wait for a finished sensor tick that started after ``timestamp`` (Unix time)."""
        start = time.monotonic()
        while time.monotonic() - start < deadline:
            self.check_alive()
            for tick in self.sensor()["ticks"]:
                if tick["timestamp"] > timestamp and tick["status"] != "STARTED":
                    if tick["status"] == "FAILURE":
                        self.fail(f"the sensor tick failed: {tick['error']}")
                    return tick
            time.sleep(1.0)
        self.fail(f"no sensor tick finished within {deadline:.0f}s after {timestamp}; {self.sensor_summary()}")
        raise AssertionError("unreachable")

    def wait_for(self, what: str, ready: Callable[[list[dict]], bool], deadline: float) -> list[dict]:
        """Poll the runs until ``ready(runs)``; fail fast on a failed run or a dead server."""
        start = time.monotonic()
        runs: list[dict] = []
        while time.monotonic() - start < deadline:
            self.check_alive()
            try:
                runs = self.runs()
            except httpx.HTTPError:
                time.sleep(1.0)
                continue
            failed = [r for r in runs if r["status"] in FAILED_STATUSES]
            if failed:
                self.fail(f"while waiting for {what}: run(s) failed: {failed}\nall runs: {runs}")
            if ready(runs):
                return runs
            time.sleep(1.0)
        self.fail(f"timed out after {deadline:.0f}s waiting for {what}; runs: {runs}\n{self.sensor_summary()}")
        raise AssertionError("unreachable")

    def stop(self) -> int | None:
        """SIGTERM the whole process group, SIGKILL it after 15 s; return the exit code."""
        self.client.close()
        try:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.pgid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    pass
            # Children (daemon, webserver, code server, run workers) share the group:
            # give them a moment after the parent, then kill whatever is left.
            grace = time.monotonic() + 5
            while time.monotonic() < grace and _group_alive(self.pgid):
                time.sleep(0.2)
            if _group_alive(self.pgid):
                os.killpg(self.pgid, signal.SIGKILL)
                # Killed children linger as zombies until init reaps them (a loaded machine
                # takes a moment), and signal 0 still reaches a zombie.
                reaped = time.monotonic() + 10
                while time.monotonic() < reaped and _group_alive(self.pgid):
                    time.sleep(0.2)
            if self.proc.poll() is None:
                self.proc.wait(timeout=10)
            return self.proc.returncode
        finally:
            self._log.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _partitions(tags: list[dict]) -> list[str]:
    """The collections a run covers: its partition, or the ends of its range (two collections
    here, so a range's ends are all of it)."""
    values = {t["key"]: t["value"] for t in tags}
    if PARTITION_TAG in values:
        return [values[PARTITION_TAG]]
    return sorted({values[tag] for tag in RANGE_TAGS if tag in values})


def count(runs: list[dict], partition: str, status: str | None = None) -> int:
    return sum(1 for r in runs if partition in r["partitions"] and (status is None or r["status"] == status))


def all_done(runs: list[dict]) -> bool:
    return all(r["status"] == "SUCCESS" for r in runs)


def fts_hits(db_path: Path, word: str) -> int:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT COUNT(*) FROM fts_chunks WHERE fts_chunks MATCH ?", (word,)).fetchone()[0]
    finally:
        conn.close()


@pytest.mark.skipif(not DAGSTER.exists(), reason="the dagster CLI is not installed next to this Python")
@pytest.mark.skipif(sys.platform == "win32", reason="uses POSIX process groups")
@pytest.mark.parametrize("storage", ["sqlite", "postgres"])
def test_dagster_dev_sensor_builds_then_reindexes_only_the_edited_collection(tmp_path: Path, storage: str) -> None:
    """The same run history in the default SQLite instance and in dagster.postgres.yaml's."""
    with ExitStack() as stack:
        pg_settings: dict[str, str] = {}
        if storage == "postgres":
            pg_settings, _connect = stack.enter_context(scratch_database())
        _sensor_builds_then_reindexes(tmp_path, storage, pg_settings)


def _sensor_builds_then_reindexes(tmp_path: Path, storage: str, pg_settings: dict[str, str]) -> None:
    content = tmp_path / "content"
    for rel, text in CONTENT.items():
        path = content / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    rag_yaml = tmp_path / "rag.yaml"
    rag_yaml.write_text(
        f"content_dir: {content}\noutput_dir: {out}\nembedder:\n  name: hashing\n"
        f"automation:\n  sensor_interval_seconds: {SENSOR_INTERVAL}\n",
        encoding="utf-8",
    )
    if storage == "postgres":
        home = postgres_home(tmp_path / "dagster_home")
    else:
        home = tmp_path / "dagster_home"
        home.mkdir()
        shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RAG_", "DAGSTER_")) and k not in ("OPENROUTER_API_KEY", "OPENAI_API_KEY", "OLLAMA_HOST")
    }
    env.update(RAG_CONFIG=str(rag_yaml), DAGSTER_HOME=str(home), RAG_EMBEDDER="hashing", PYTHONUNBUFFERED="1")
    env.update(pg_settings)  # DAGSTER_PG_*: the scratch database dagster.postgres.yaml reads

    index_path = out / "public" / "embeddings-index.json"
    store_path = out / "data" / "rag-store-public.db"
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    server = DagsterDev(free_port(), env, tmp_path / "dagster-dev.log")
    try:
        timings["serving"] = server.wait_until_serving(STARTUP_DEADLINE)

        # 1. First sensor tick: no index yet, so one run over every collection.
        runs = server.wait_for(
            "the first build (one successful run over both collections)",
            lambda rs: count(rs, EDITED, "SUCCESS") >= 1 and count(rs, UNTOUCHED, "SUCCESS") >= 1 and all_done(rs),
            BUILD_DEADLINE,
        )
        timings["first build"] = time.monotonic() - t0
        if not index_path.is_file() or not store_path.is_file():
            server.fail(f"runs succeeded but the outputs are missing: {index_path}, {store_path}; runs: {runs}")
        assert len(runs) == 1 and runs[0]["partitions"] == sorted([EDITED, UNTOUCHED]), f"expected one run: {runs}"
        first_index = orjson.dumps(read_index(index_path)).decode()
        assert "tuesday" in first_index and "upgrade" in first_index, "the first index lacks a collection"
        assert fts_hits(store_path, UNIQUE_WORD) == 0
        assert fts_hits(store_path, "tuesday") >= 1, "the untouched collection is not in the store"
        edited_before, untouched_before = count(runs, EDITED), count(runs, UNTOUCHED)

        # 2. Edit one file of one collection: the sensor re-indexes that collection only.
        edited_file = content / "guides" / "upgrade.md"
        with edited_file.open("a", encoding="utf-8") as f:
            f.write(f"\n## Rollback\n\nIf the upgrade fails, the {UNIQUE_WORD} procedure restores the backup.\n")
        t_edit = time.monotonic()
        runs = server.wait_for(
            f"a new successful run for the edited collection {EDITED!r}",
            lambda rs: count(rs, EDITED, "SUCCESS") > edited_before and all_done(rs),
            BUILD_DEADLINE,
        )
        timings["edit -> reindexed"] = time.monotonic() - t_edit
        hits = fts_hits(store_path, UNIQUE_WORD)
        if hits < 1:
            server.fail(f"{UNIQUE_WORD!r} is not searchable in {store_path} after the re-index run; runs: {runs}")
        assert UNIQUE_WORD in orjson.dumps(read_index(index_path)).decode(), "the JSON index lacks the new paragraph"
        assert fts_hits(store_path, "tuesday") >= 1, "the untouched collection vanished from the store"

        # 3. Let the sensor tick once more after the re-index: still no run for the untouched collection.
        tick = server.wait_for_tick_after(time.time(), deadline=TICK_DEADLINE)
        assert not tick["runIds"], f"the tick after the re-index launched runs: {tick}"
        runs = server.runs()
        assert count(runs, UNTOUCHED) == untouched_before, (
            f"the sensor launched run(s) for the untouched collection {UNTOUCHED!r} after the edit: {runs}"
        )
        assert count(runs, EDITED) == edited_before + 1, f"expected exactly one re-index run for {EDITED!r}: {runs}"
    except AssertionError as exc:
        exc.add_note(f"--- last lines of `dagster dev` output ---\n{server.output_tail()}")
        raise
    finally:
        code = server.stop()
        timings["total"] = time.monotonic() - t0
        print("timings:", {k: round(v, 1) for k, v in timings.items()})

    assert code is not None, "`dagster dev` is still running after SIGTERM/SIGKILL"
    assert not _group_alive(server.pgid), "processes of `dagster dev` survived the shutdown"
    if storage == "postgres":  # the run history went to PostgreSQL, not to SQLite files
        assert not list(home.rglob("*.db")), f"SQLite storage under {home}: {list(home.rglob('*.db'))}"
