"""A genuine non-loopback client for tests of ``rag serve``: a network namespace joined to this one
by a veth pair with addresses from 198.18.0.0/15 (the benchmarking range, never a real network).

The server runs here, bound to the host side's address; the client runs inside the namespace
(``ip netns exec NAME python netns_client.py``), so the server sees a peer address that is not
loopback, as a machine on the network would be. Needs root and iproute2; when they are missing
the fixture fails loudly (it never skips: the access tests would prove nothing).

Names and addresses are unique per process and fixture (pytest-xdist workers run side by side);
the namespace and the veth pair are removed when the fixture ends.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

CLIENT_SCRIPT = Path(__file__).with_name("netns_client.py")
REPO_ROOT = Path(__file__).resolve().parents[1]
_counter = itertools.count()


def _ip(*args: str, namespace: str | None = None) -> None:
    command = (["ip", "netns", "exec", namespace, "ip"] if namespace else ["ip"]) + list(args)
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"`{' '.join(command)}` failed ({done.stderr.strip()}); the access tests need root and iproute2 "
            "to make a network namespace with a non-loopback client"
        )


@dataclass(frozen=True)
class Netns:
    """A namespace whose client reaches this one's ``host_address`` from ``client_address``."""

    name: str
    host_address: str
    client_address: str

    def run_client(self, base_url: str, calls: list[dict[str, Any]], timeout: float = 300) -> list[dict[str, Any]]:
        """Run ``calls`` (see netns_client.py) from inside the namespace; their results, in order."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run(
            ["ip", "netns", "exec", self.name, sys.executable, str(CLIENT_SCRIPT), base_url],
            input=json.dumps(calls),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        if done.returncode != 0:
            raise AssertionError(f"the namespace client failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads(done.stdout)


def _addresses(index: int) -> tuple[str, str]:
    """A /30 of 198.18.0.0/16 for this process and fixture: (host side, namespace side)."""
    base = (index % 16384) * 4
    prefix = f"198.18.{base >> 8}."
    return prefix + str((base & 255) + 1), prefix + str((base & 255) + 2)


@contextmanager
def network_namespace() -> Iterator[Netns]:
    """A namespace with a veth pair to this one (see the module docstring); removed on exit."""
    n = next(_counter)
    tag = f"{os.getpid() % 1_000_000}{n}"
    name, host_if, ns_if = f"ragt{tag}", f"rh{tag}", f"rn{tag}"
    host_address, client_address = _addresses(os.getpid() * 8 + n)
    _ip("netns", "add", name)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", name)
        _ip("addr", "add", f"{host_address}/30", "dev", host_if)
        _ip("link", "set", host_if, "up")
        _ip("addr", "add", f"{client_address}/30", "dev", ns_if, namespace=name)
        _ip("link", "set", ns_if, "up", namespace=name)
        _ip("link", "set", "lo", "up", namespace=name)
        yield Netns(name, host_address, client_address)
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)  # its peer goes with it
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


@dataclass
class RagServe:
    """A ``rag serve`` process: its base URL and the file its output goes to."""

    url: str
    log_path: Path
    process: subprocess.Popen

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@contextmanager
def rag_serve(
    config: Path, host: str, log_path: Path, *flags: str, env: dict[str, str] | None = None
) -> Iterator[RagServe]:
    """``rag serve --config CONFIG --host HOST`` in a subprocess (this namespace), until the block ends."""
    port = free_port(host)
    command = [
        sys.executable,
        "-m",
        "rag_assets.serve.cli",
        "serve",
        "--config",
        str(config),
        "--host",
        host,
        "--port",
        str(port),
        *flags,
    ]
    full_env = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with open(log_path, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=config.parent)
    url = f"http://{host}:{port}"
    try:
        deadline = time.monotonic() + 90
        # One client for every poll: httpx.get makes a client, and its TLS context, each time
        # (tens of milliseconds of CPU per poll, seconds while a loaded machine starts the server).
        with httpx.Client(timeout=2) as poller:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"rag serve exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
                try:
                    if poller.get(f"{url}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rag serve did not answer /health in 90 s:\n{log_path.read_text()[-4000:]}")
                time.sleep(0.2)
        yield RagServe(url, log_path, process)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
