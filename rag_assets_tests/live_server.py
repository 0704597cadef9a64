"""A real uvicorn server in a background thread on a free loopback port, for tests of `rag serve`."""

from __future__ import annotations

import threading
import time

import httpx
import uvicorn


class ServerThread:
    """uvicorn in a background thread on a free port of ``host`` (loopback unless a test needs another address)."""

    def __init__(self, app, host: str = "127.0.0.1") -> None:
        self.host = host
        config = uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{port}"
        self.client = httpx.Client(base_url=self.url, timeout=30)
        return self

    def __exit__(self, *exc) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(10)

    def get(self, path: str, **params) -> httpx.Response:
        return self.client.get(path, params=params)

    def post(self, path: str, **kwargs) -> httpx.Response:
        return self.client.post(path, **kwargs)
