"""A real, scriptable HTTP embedding server for testing our HTTP embedding clients.

Mocking the HTTP layer would test our assumptions about ``httpx`` rather than the
client's behaviour on the wire (timeouts, dropped connections, ``Retry-After``,
keep-alive), so tests instead talk to this tiny server on ``127.0.0.1``. It speaks
the OpenAI-compatible protocol (``POST /v1/embeddings`` and ``/embeddings``) and the
Ollama one (``POST /api/embed``, ``GET /api/tags``), returns deterministic
pseudo-embeddings, records every request and can be told what to do with each
of the next embedding requests::

    with EmbeddingServer(api_key="sk-test") as server:
        server.script("429:0", "500", "ok")   # then "ok" forever
        client = MyClient(base_url=server.url + "/v1", api_key="sk-test")
        ...
        assert len(server.embedding_requests) == 3

Action strings for :meth:`EmbeddingServer.script` (one consumed per embedding POST,
whatever its body, shared by both protocols):

``ok``                      normal response
``429`` / ``429:S``         429 with ``Retry-After: S`` seconds (default 1)
``429-date:S``              429 with ``Retry-After`` as an HTTP date S seconds ahead
``NNN`` (400-599)           that status with a protocol-style JSON error (401, 403, 500, 502, 503...)
``slow:S``                  sleep S seconds (float), then respond normally
``malformed``               200 with a body that is not JSON
``wrong_count``             200, one vector fewer than inputs
``wrong_dim``               200, vectors one dimension short
``nan``                     200, the first vector contains ``NaN``
``missing_field``           200 without ``data`` / ``embeddings``
``drop``                    close the connection without any response

:meth:`EmbeddingServer.script_tags` queues actions for ``GET /api/tags`` only
(``ok``, ``NNN``, ``slow:S``, ``down``/``drop``).
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import http.server
import json
import re
import socket
import socketserver
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import numpy as np

OPENAI_PATHS = frozenset({"/v1/embeddings", "/embeddings"})
OLLAMA_EMBED_PATH = "/api/embed"
EMBEDDING_PATHS = OPENAI_PATHS | {OLLAMA_EMBED_PATH}
TAGS_PATH = "/api/tags"

_WORD = re.compile(r"\w+", re.UNICODE)
_DATA_ACTIONS = frozenset({"ok", "malformed", "wrong_count", "wrong_dim", "nan", "missing_field", "drop"})
_TAGS_ACTIONS = frozenset({"ok", "drop"})
_REASONS = {
    400: "Bad request",
    401: "Invalid API key",
    403: "Permission denied",
    404: "Not found",
    429: "Rate limit reached, slow down",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable, the model is overloaded",
}
_OPENAI_TYPES = {401: "invalid_request_error", 403: "permission_error", 429: "rate_limit_exceeded"}


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it. ``time`` is ``time.monotonic()`` at arrival,
    so gaps between retries can be measured; ``json`` is None if the body is not JSON."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any
    raw_body: bytes
    time: float


@dataclass(frozen=True)
class _Action:
    name: str  # "ok", "status", "slow", "drop", "malformed", ...
    status: int = 200
    seconds: float = 0.0
    retry_after: str | None = None


def _parse_action(text: str | int, *, for_tags: bool = False) -> _Action:
    """Parse an action string eagerly, so a typo fails in the test, not in the server thread."""
    text = str(text).strip()
    name, _, arg = text.partition(":")
    name = {"down": "drop"}.get(name, name)
    try:
        seconds = float(arg) if arg else 1.0
    except ValueError:
        raise ValueError(f"bad seconds in action {text!r}") from None
    if seconds < 0:
        raise ValueError(f"negative seconds in action {text!r}")
    if name == "slow":
        return _Action("slow", seconds=seconds)
    if name in ("429", "429-date") and not for_tags:
        if name == "429-date":
            retry_after = "date"  # rendered when the response is sent, so "S seconds ahead" holds
        else:
            retry_after = str(int(seconds)) if seconds.is_integer() else str(seconds)
        return _Action("status", status=429, seconds=seconds, retry_after=retry_after)
    if arg:
        raise ValueError(f"action {text!r} takes no argument")
    if name.isdigit() and 400 <= int(name) <= 599:
        return _Action("status", status=int(name))
    if name in (_TAGS_ACTIONS if for_tags else _DATA_ACTIONS):
        return _Action(name)
    raise ValueError(f"unknown {'tags ' if for_tags else ''}action {text!r}")


@lru_cache(maxsize=4096)
def _vector(text: str, dim: int) -> tuple[float, ...]:
    """Signed feature hashing of lower-cased words, L2-normalised.

    BLAKE2b (not the salted built-in ``hash``) keeps vectors identical across
    processes; texts sharing words share buckets, so similar texts are close.
    Text without words hashes a sentinel, so every vector has unit length and
    clients never divide by a zero norm. Values are float32-exact, so a client
    storing float32 loses nothing.
    """
    vec = np.zeros(dim, dtype=np.float64)
    for word in _WORD.findall(text.lower()) or ["\x00empty"]:
        h = int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "big")
        vec[h % dim] += -1.0 if h >> 63 else 1.0
    norm = np.linalg.norm(vec)
    if norm:  # words can cancel out in small dimensions
        vec /= norm
    return tuple(vec.astype(np.float32).tolist())


def _token_count(texts: Sequence[str]) -> int:
    return sum(len(t.split()) for t in texts)


class _HTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True  # sleeping handlers must never block interpreter exit or stop()
    block_on_close = False

    def __init__(self, owner: EmbeddingServer) -> None:
        self.owner = owner
        super().__init__((owner.bind_host, 0), _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn, a reverse DNS lookup that can hang in sandboxes.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out and hang up are expected; keep stderr clean


class _Handler(http.server.BaseHTTPRequestHandler):
    """Routes requests to the owning :class:`EmbeddingServer`; all state lives there."""

    protocol_version = "HTTP/1.1"  # keep-alive, like real servers (and so clients reuse connections)
    disable_nagle_algorithm = True  # headers and body go out in two writes; avoid the 40 ms delayed-ACK stall
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, False)

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def _dispatch(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True  # cannot find the end of the body, so not the next request either
            return self.send_json(400, {"error": {"message": "bad Content-Length", "type": "invalid_request_error"}})
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            self.server.owner._handle(self, raw)
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away (e.g. after its own timeout)
        except Exception as exc:  # a server bug must be a visible 500, never a dead thread
            with self.server.owner._lock:
                self.server.owner._errors.append(exc)
            self.send_json(500, {"error": {"message": f"test server bug: {exc!r}", "type": "server_error"}})

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.send_raw(status, json.dumps(payload, separators=(",", ":")).encode(), headers)

    def send_raw(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def drop(self) -> None:
        """Hang up without a response: the client sees a transport error."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class EmbeddingServer:
    """OpenAI-compatible + Ollama embedding server in a background thread (see module docstring).

    ``api_key`` set: OpenAI endpoints require ``Authorization: Bearer <api_key>``.
    ``models``: the Ollama models that exist (``x`` and ``x:latest`` are the same).
    ``bind_host``: the address to listen on ("0.0.0.0" lets a test reach it through a
    non-loopback address of this machine).
    """

    def __init__(
        self,
        dimension: int = 1536,
        ollama_dimension: int = 768,
        models: Iterable[str] = ("nomic-embed-text:latest",),
        api_key: str | None = None,
        bind_host: str = "127.0.0.1",
    ) -> None:
        self.bind_host = bind_host
        self.dimension = dimension
        self.ollama_dimension = ollama_dimension
        self.models = list(models)
        self.api_key = api_key
        self._lock = threading.Condition()
        self._script: deque[_Action] = deque()
        self._tags_script: deque[_Action] = deque()
        self._requests: list[RecordedRequest] = []
        self._errors: list[BaseException] = []
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> EmbeddingServer:
        if self._httpd is not None:
            raise RuntimeError("EmbeddingServer already started")
        self._stopping.clear()
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="embedding-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop promptly: wake sleeping ``slow:`` handlers and hang up open (keep-alive) connections."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=1)

    def __enter__(self) -> EmbeddingServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("EmbeddingServer is not running; use start() or `with`")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------- test control
    def script(self, *actions: str | int) -> None:
        """Queue actions for the next embedding requests (appends; ``ok`` once the queue is empty)."""
        parsed = [_parse_action(a) for a in actions]
        with self._lock:
            self._script.extend(parsed)

    def script_tags(self, *actions: str | int) -> None:
        """Queue actions for the next ``GET /api/tags`` requests (separate from :meth:`script`)."""
        parsed = [_parse_action(a, for_tags=True) for a in actions]
        with self._lock:
            self._tags_script.extend(parsed)

    @property
    def pending_actions(self) -> int:
        """How many scripted embedding actions are not consumed yet."""
        with self._lock:
            return len(self._script)

    def reset(self) -> None:
        """Clear both scripts and all records."""
        with self._lock:
            self._script.clear()
            self._tags_script.clear()
            self._requests.clear()
            self._errors.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == "POST" and urlsplit(r.path).path in EMBEDDING_PATHS]

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised by the server's own code (should stay empty)."""
        with self._lock:
            return list(self._errors)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``count`` requests arrived (useful with clients running in threads)."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(f"{len(self._requests)} of {count} requests arrived within {timeout}s")
            return list(self._requests)

    @staticmethod
    def vector_for(text: str, dim: int) -> list[float]:
        """The vector the server returns for ``text`` at dimension ``dim``."""
        return list(_vector(text, dim))

    # ------------------------------------------------------------------ serving
    def _track(self, conn: socket.socket, open_: bool) -> None:
        with self._lock:
            (self._connections.add if open_ else self._connections.discard)(conn)

    def _record(self, handler: _Handler, raw: bytes) -> Any:
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        rec = RecordedRequest(
            method=handler.command,
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            json=body,
            raw_body=raw,
            time=time.monotonic(),
        )
        with self._lock:
            self._requests.append(rec)
            self._lock.notify_all()
        return body

    def _handle(self, h: _Handler, raw: bytes) -> None:
        body = self._record(h, raw)
        path = urlsplit(h.path).path
        if h.command == "GET" and path == TAGS_PATH:
            return self._tags(h)
        if h.command != "POST" or path not in EMBEDDING_PATHS:
            return h.send_json(404, {"error": f"no route for {h.command} {path}"})
        ollama = path == OLLAMA_EMBED_PATH
        with self._lock:
            action = self._script.popleft() if self._script else _Action("ok")
        if not self._apply_transport_action(h, action, ollama):
            return
        if not ollama and self.api_key is not None and h.headers.get("Authorization") != f"Bearer {self.api_key}":
            return self._error(h, 401, ollama, "Invalid API key")
        if raw and body is None:
            return self._error(h, 400, ollama, "request body is not valid JSON")
        request, error = _validate(body, ollama)
        if error:
            return self._error(h, 400, ollama, error)
        if ollama:
            self._ollama_embed(h, request, action)
        else:
            self._openai_embed(h, request, action)

    def _apply_transport_action(self, h: _Handler, action: _Action, ollama: bool) -> bool:
        """Carry out actions that do not depend on the request body; False = response already done."""
        if action.name == "slow":
            if self._stopping.wait(action.seconds):
                h.drop()
                return False
            return True
        if action.name == "drop":
            h.drop()
            return False
        if action.name == "malformed":
            h.send_raw(200, b'{"embeddings": [' if ollama else b'{"data": [')
            return False
        if action.name == "status":
            headers = {}
            if action.retry_after == "date":
                headers["Retry-After"] = email.utils.formatdate(time.time() + action.seconds, usegmt=True)
            elif action.retry_after is not None:
                headers["Retry-After"] = action.retry_after
            self._error(h, action.status, ollama, _REASONS.get(action.status, f"HTTP {action.status}"), headers)
            return False
        return True

    def _error(
        self, h: _Handler, status: int, ollama: bool, message: str, headers: dict[str, str] | None = None
    ) -> None:
        if ollama:
            payload: Any = {"error": message}
        else:
            kind = _OPENAI_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
            payload = {"error": {"message": message, "type": kind, "code": status}}
        h.send_json(status, payload, headers)

    def _vectors(self, texts: list[str], dim: int, action: _Action) -> list[list[float]]:
        vectors = [list(_vector(t, dim)) for t in texts]
        if action.name == "wrong_count":
            vectors = vectors[:-1]
        elif action.name == "wrong_dim":
            vectors = [v[:-1] for v in vectors]
        elif action.name == "nan" and vectors:
            vectors[0][0] = float("nan")
        return vectors

    def _openai_embed(self, h: _Handler, req: dict[str, Any], action: _Action) -> None:
        texts = req["texts"]
        dim = req.get("dimensions") or self.dimension
        vectors = self._vectors(texts, dim, action)
        if req.get("encoding_format") == "base64":  # what the official SDKs request by default
            encoded: list[Any] = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() for v in vectors]
        else:
            encoded = vectors
        tokens = _token_count(texts)
        payload: dict[str, Any] = {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(encoded)],
            "model": req["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        if action.name == "missing_field":
            del payload["data"]
        h.send_json(200, payload)

    def _ollama_embed(self, h: _Handler, req: dict[str, Any], action: _Action) -> None:
        start = time.perf_counter_ns()
        model = req["model"]
        known = {_with_tag(m) for m in self.models}
        if _with_tag(model) not in known:
            return h.send_json(404, {"error": f'model "{model}" not found, try pulling it first'})
        texts = req["texts"]
        payload: dict[str, Any] = {
            "model": model,
            "embeddings": self._vectors(texts, self.ollama_dimension, action),
            "total_duration": time.perf_counter_ns() - start + 1_000_000,
            "load_duration": 1_000_000,
            "prompt_eval_count": _token_count(texts),
        }
        if action.name == "missing_field":
            del payload["embeddings"]
        h.send_json(200, payload)

    def _tags(self, h: _Handler) -> None:
        with self._lock:
            action = self._tags_script.popleft() if self._tags_script else _Action("ok")
        if not self._apply_transport_action(h, action, ollama=True):
            return
        models = [
            {
                "name": _with_tag(m),
                "model": _with_tag(m),
                "modified_at": "2025-01-01T00:00:00Z",
                "size": 274302450,
                "digest": hashlib.sha256(_with_tag(m).encode()).hexdigest(),
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "nomic-bert",
                    "families": ["nomic-bert"],
                    "parameter_size": "137M",
                    "quantization_level": "F16",
                },
            }
            for m in self.models
        ]
        h.send_json(200, {"models": models})


def _with_tag(model: str) -> str:
    """Ollama treats ``name`` and ``name:latest`` as the same model."""
    return model if ":" in model.rsplit("/", 1)[-1] else f"{model}:latest"


def _validate(body: Any, ollama: bool) -> tuple[dict[str, Any], str | None]:
    """Check an embedding request body; return it with ``texts`` normalised to a list, or an error."""
    if not isinstance(body, dict):
        return {}, "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return {}, "'model' is required"
    inputs = body.get("input")
    texts = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return {}, "'input' must be a string or a list of strings"
    if not texts and not ollama:
        return {}, "'input' must not be empty"
    req = dict(body, texts=texts)
    if not ollama:
        dims = body.get("dimensions")
        if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims <= 0):
            return {}, "'dimensions' must be a positive integer"
        if body.get("encoding_format", "float") not in ("float", "base64"):
            return {}, "'encoding_format' must be 'float' or 'base64'"
    return req, None
