"""Private text reaches only the approved local endpoint: not a proxy, not a redirect target.

httpx honours ``HTTP_PROXY``/``HTTPS_PROXY``/``ALL_PROXY`` by default, even for
``127.0.0.1``, so a proxy variable once carried every private-tier embedding request
(raw note text in the body) to whatever the variable named. These tests set every proxy
variable at a real recording proxy on 127.0.0.1 and prove it receives zero bytes while
the local Ollama (the test embedding server) receives the requests.
"""

from __future__ import annotations

import http.server
import os
import re
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from rag_assets.embed.ollama import OllamaEmbedder
from rag_assets.privacy.local_only import PrivacyError, enforce_local_only
from rag_assets.serve.cli import main

from .deadline import deadline
from .embedding_server import EmbeddingServer

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
PRIVATE_NOTE = """---
title: Bank recovery codes
---
# Bank recovery codes

The recovery phrase for the savings account is kept in the fire safe, second drawer.
"""
QUERY = "where is the recovery phrase kept"


class RecordingServer:
    """Records every byte any client sends it; as a proxy it forwards, otherwise it answers 502.

    A forwarding proxy is what an attacker would run: the client gets its answers and notices
    nothing. Raw sockets rather than http.server, so that even a malformed or CONNECT request
    is recorded byte for byte before it is parsed.
    """

    REFUSAL = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    def __init__(self, *, forward: bool = False) -> None:
        self.forward = forward
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._lock = threading.Lock()
        self._received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, name="recording-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    @property
    def received(self) -> bytes:
        with self._lock:
            return b"".join(self._received)

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()

    def _serve_connection(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                while request := self._read_request(conn):
                    conn.sendall(self._relay(request) if self.forward else self.REFUSAL)
                    if not self.forward:
                        return
            except OSError:
                pass

    def _read_request(self, conn: socket.socket) -> bytes:
        """One request (head and Content-Length body), recorded as it arrives; b"" at EOF."""
        data = b""
        while b"\r\n\r\n" not in data or len(data) < self._request_length(data):
            chunk = conn.recv(65536)
            if not chunk:
                return b""
            with self._lock:
                self._received.append(chunk)
            data += chunk
        return data

    @staticmethod
    def _request_length(data: bytes) -> int:
        head, _, _ = data.partition(b"\r\n\r\n")
        match = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        return len(head) + 4 + (int(match.group(1)) if match else 0)

    @staticmethod
    def _relay(request: bytes) -> bytes:
        """Send an absolute-form request on to its origin and return the origin's whole answer."""
        head, _, body = request.partition(b"\r\n\r\n")
        request_line, _, headers = head.partition(b"\r\n")
        method, target, version = request_line.split(b" ")
        url = urlsplit(target.decode())
        if url.scheme != "http":
            return RecordingServer.REFUSAL  # CONNECT and the like: recorded, not tunnelled
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        headers = re.sub(rb"(?im)^connection:.*\r?\n?", b"", headers).rstrip(b"\r\n")
        forwarded = b"%s %s %s\r\n%s\r\nConnection: close\r\n\r\n%s" % (method, path.encode(), version, headers, body)
        with socket.create_connection((url.hostname, url.port or 80), timeout=5) as origin:
            origin.sendall(forwarded)
            answer = b""
            while chunk := origin.recv(65536):
                answer += chunk
        return answer


class _Redirector(http.server.BaseHTTPRequestHandler):
    """A "local Ollama" that answers every request with a 307 to ``server.target``."""

    def _redirect(self) -> None:
        self.send_response(307)
        self.send_header("Location", self.server.target + self.path)  # type: ignore[attr-defined]
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _redirect

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def recording_proxy(monkeypatch) -> Iterator[RecordingServer]:
    """A recording proxy named by every proxy variable, upper and lower case, with no NO_PROXY."""
    with RecordingServer(forward=True) as proxy:
        for name in PROXY_VARIABLES:
            monkeypatch.setenv(name, proxy.url)
            monkeypatch.setenv(name.lower(), proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        yield proxy


def rag_environ(proxy_url: str | None = None) -> dict[str, str]:
    """This process's environment for a ``rag`` subprocess: every proxy variable (upper and lower
    case) set to ``proxy_url`` or removed, no NO_PROXY, and no RAG_*EMBEDDER override (the test
    fixtures set hashing), so rag.yaml's ollama choice stands."""
    names = {n for v in PROXY_VARIABLES for n in (v, v.lower())}
    dropped = names | {"NO_PROXY", "no_proxy", "RAG_EMBEDDER", "RAG_PRIVATE_EMBEDDER"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if proxy_url is not None:
        env |= {name: proxy_url for name in names}
    return env


def write_private_project(tmp: Path, ollama_url: str) -> Path:
    """A rag.yaml with one public post and one private vault embedded by Ollama at ``ollama_url``."""
    content = tmp / "content"
    (content / "posts").mkdir(parents=True)
    (content / "posts" / "hello.md").write_text("# Hello\n\nA public post about gardening.\n")
    (content / "vaults" / "me").mkdir(parents=True)
    (content / "vaults" / "me" / "bank.md").write_text(PRIVATE_NOTE)
    config = tmp / "rag.yaml"
    config.write_text(
        f"""content_dir: {content}
output_dir: {tmp / "out"}
embedder:
  name: hashing
  ollama:
    host: {ollama_url}
    model: nomic-embed-text
    dimension: 768
vaults:
  - {{name: me, path: {content / "vaults" / "me"}, tier: private}}
identity_map: null
private_tier:
  embedder: ollama
"""
    )
    return config


def rag(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real ``rag`` command in a fresh process, so its environment is exactly ``env``."""
    command = [sys.executable, "-m", "rag_assets.serve.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def test_the_recording_proxy_receives_what_an_ordinary_client_sends(recording_proxy):
    """The harness control: a proxy-honouring client does reach the proxy, so silence below means something."""
    with pytest.raises(httpx.HTTPError):
        httpx.post("http://127.0.0.1:9/api/embed", json={"input": "marker-7f3a"}).raise_for_status()
    assert b"marker-7f3a" in recording_proxy.received


def test_rag_build_sends_private_notes_only_to_local_ollama(recording_proxy, tmp_path):
    with EmbeddingServer() as ollama:
        config = write_private_project(tmp_path, ollama.url)
        proc = rag("build", "--config", str(config), env=rag_environ(recording_proxy.url))
        assert len(recording_proxy.received) == 0, recording_proxy.received[:400]
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert any(b"fire safe" in r.raw_body for r in ollama.embedding_requests)


def test_rag_search_private_embeds_the_query_only_locally(tmp_path, monkeypatch):
    with EmbeddingServer() as ollama:
        config = write_private_project(tmp_path, ollama.url)
        # The index the search reads, built in this process with the environment a `rag build`
        # process would get (rag_environ(): no proxy, rag.yaml's embedders): the claim is the
        # search's, in its own process below, and a build process cost about 2 CPU s more.
        for name in set(os.environ) - set(rag_environ()):
            monkeypatch.delenv(name)
        with deadline(300):  # the subprocess's timeout
            assert main(["build", "--config", str(config)]) == 0
        assert any(b"fire safe" in r.raw_body for r in ollama.embedding_requests)  # by rag.yaml's Ollama
        ollama.reset()
        with RecordingServer(forward=True) as proxy:
            proc = rag("search", "--config", str(config), "--tier", "private", QUERY, env=rag_environ(proxy.url))
            assert len(proxy.received) == 0, proxy.received[:400]
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "me/bank" in proc.stdout
        assert any(QUERY.encode() in r.raw_body for r in ollama.embedding_requests)


def test_the_private_health_probe_ignores_proxies(recording_proxy):
    with EmbeddingServer() as ollama:
        embedder = enforce_local_only(OllamaEmbedder(host=ollama.url, model="nomic-embed-text"))
        assert embedder.health().online
        assert len(recording_proxy.received) == 0, recording_proxy.received[:400]
        assert [r.path for r in ollama.requests] == ["/api/tags"]


def test_a_local_endpoint_that_redirects_gets_a_refusal_not_the_text(recording_proxy):
    with RecordingServer() as elsewhere:
        redirector = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Redirector)
        redirector.target = elsewhere.url  # type: ignore[attr-defined]
        threading.Thread(target=redirector.serve_forever, daemon=True).start()
        try:
            host = f"http://127.0.0.1:{redirector.server_address[1]}"
            embedder = enforce_local_only(OllamaEmbedder(host=host, model="nomic-embed-text"))
            with pytest.raises(PrivacyError, match="redirect"):
                embedder.embed_documents(["the safe combination is 12-34-56"])
        finally:
            redirector.shutdown()
            redirector.server_close()
        time.sleep(0.1)  # let a stray connection, if any, be recorded
        assert len(elsewhere.received) == 0, elsewhere.received[:400]
    assert len(recording_proxy.received) == 0, recording_proxy.received[:400]


def test_the_private_client_refuses_a_host_that_was_not_approved():
    from rag_assets.base.egress import PrivateEgress

    with RecordingServer() as elsewhere, PrivateEgress(()).client() as client:
        # Approved hosts are loopback or listed: a public name is refused before any DNS or connection.
        with pytest.raises(PrivacyError, match="refusing to send private text"):
            client.post("http://openrouter.ai/api/v1/embeddings", json={"input": "secret"})
        with pytest.raises(PrivacyError, match="refusing to send private text"):
            client.post("http://gpu-box.lan:11434/api/embed", json={"input": "secret"})
        assert len(elsewhere.received) == 0, elsewhere.received[:400]


def test_localhost_must_resolve_to_loopback(monkeypatch):
    """A tampered resolver (or /etc/hosts) that points ``localhost`` elsewhere gets no text."""
    from rag_assets.base.egress import PrivateEgress

    with RecordingServer() as elsewhere:
        real_getaddrinfo = socket.getaddrinfo

        def tampered(host, *args, **kwargs):
            return real_getaddrinfo("192.0.2.10" if host == "localhost" else host, *args, **kwargs)

        monkeypatch.setattr(socket, "getaddrinfo", tampered)
        with PrivateEgress(()).client() as client, pytest.raises(PrivacyError, match="resolves to 192.0.2.10"):
            client.post("http://localhost:11434/api/embed", json={"input": "secret"})
        assert len(elsewhere.received) == 0, elsewhere.received[:400]


def test_a_listed_host_is_reached_at_the_address_that_was_checked():
    """An allowed_hosts name is connected to at the address resolved when it was checked."""
    from rag_assets.base.egress import PrivateEgress

    with EmbeddingServer() as ollama, PrivateEgress(("gpu-box.test",)).client() as client:
        original = socket.getaddrinfo

        def resolve(host, *args, **kwargs):
            return original("127.0.0.1" if host == "gpu-box.test" else host, *args, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(socket, "getaddrinfo", resolve)
            response = client.get(f"http://gpu-box.test:{ollama.port}/api/tags")
        assert response.status_code == 200
        assert ollama.requests[-1].headers.get("host") == f"gpu-box.test:{ollama.port}"


def test_localhost_falls_back_to_its_next_loopback_address(monkeypatch):
    """``localhost`` answering ::1 first must still reach an Ollama that listens on 127.0.0.1 only."""
    from rag_assets.base.egress import PrivateEgress

    real_getaddrinfo = socket.getaddrinfo

    def ipv6_first(host, port, *args, **kwargs):
        if host != "localhost":
            return real_getaddrinfo(host, port, *args, **kwargs)
        stream = socket.SOCK_STREAM
        return [
            (socket.AF_INET6, stream, 6, "", ("::1", port, 0, 0)),
            (socket.AF_INET, stream, 6, "", ("127.0.0.1", port)),
        ]

    with EmbeddingServer() as ollama, PrivateEgress(()).client() as client:
        monkeypatch.setattr(socket, "getaddrinfo", ipv6_first)
        response = client.get(f"http://localhost:{ollama.port}/api/tags")
        assert response.status_code == 200
        assert ollama.requests[-1].headers.get("host") == f"localhost:{ollama.port}"
