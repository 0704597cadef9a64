"""A page of another site cannot make `rag serve` answer, log or spend: POST /ask (and every
POST) needs ``Content-Type: application/json`` and, with an ``Origin``, the server's own origin
or one listed in ``serve.cors_origins``. Checked with httpx and with a real Chromium on a page
served from another port, which sends what browsers send without a preflight
(``navigator.sendBeacon`` and a ``no-cors`` fetch)."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest

from rag_assets.config import ConfigError, load_config
from rag_assets.config.settings import LlmOllamaSettings, LlmSettings, ServeSettings
from rag_assets.index import tier_logs
from rag_assets.serve.http import create_app

from .browser import static_server
from .chat_server import ChatServer
from .live_server import ServerThread
from .test_mcp import build_site

QUESTION = "how do I flash the zigbee coordinator firmware?"
EVIL = "http://evil.example"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return build_site(tmp_path_factory.mktemp("cross-site"))


@pytest.fixture
def chat():
    with ChatServer() as server:
        yield server


def served_config(site: Path, chat_url: str, *origins: str):
    cfg = load_config(site, environ={})
    return dataclasses.replace(
        cfg,
        llm=LlmSettings(name="ollama", max_retries=0, ollama=LlmOllamaSettings(host=chat_url)),
        serve=ServeSettings(cors_origins=origins),
    )


def logged_sessions(cfg, tier: str) -> list[str | None]:
    path = tier_logs.log_path(cfg.store_path(tier))  # where answers are logged (beside the store)
    if not path.is_file():
        return []
    with closing(sqlite3.connect(path)) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'answer_log'").fetchone():
            return []
        return [row[0] for row in conn.execute("SELECT session FROM answer_log")]


class Recorder:
    """An ASGI wrapper counting the POSTs to /ask that reach the server (refused or not), so a
    test knows the browser's requests arrived before it checks that nothing came of them."""

    def __init__(self, app) -> None:
        self.app = app
        self.asks = 0
        self.arrived = threading.Condition()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/ask" and scope["method"] == "POST":
            with self.arrived:
                self.asks += 1
                self.arrived.notify_all()
        await self.app(scope, receive, send)

    def wait_for(self, count: int) -> bool:
        with self.arrived:
            return self.arrived.wait_for(lambda: self.asks >= count, timeout=60)


# --- httpx ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tier", ["public", "safe", "private"])
def test_a_post_without_json_or_from_a_foreign_origin_runs_nothing(site, chat, tier):
    cfg = served_config(site, chat.url)
    raw = b'{"question": "%s", "tier": "%s", "session": "attacker"}' % (QUESTION.encode(), tier.encode())
    with ServerThread(create_app(cfg, preload=False)) as api:
        r = api.post("/ask", content=raw, headers={"Origin": EVIL})  # no Content-Type: sendBeacon with a Blob
        assert r.status_code == 415 and "application/json" in r.json()["error"], r.text
        r = api.post("/ask", content=raw)  # and none from a program either: JSON must say so
        assert r.status_code == 415
        r = api.post("/ask", content=raw, headers={"Content-Type": "text/plain;charset=UTF-8", "Origin": EVIL})
        assert r.status_code == 415
        r = api.post("/ask", content=raw, headers={"Content-Type": "application/json", "Origin": EVIL})
        assert r.status_code == 403 and "serve.cors_origins" in r.json()["error"], r.text
        assert (
            api.post("/ask", content=raw, headers={"Content-Type": "application/json", "Origin": "null"}).status_code
            == 403
        )
    assert chat.chat_requests == []
    assert "attacker" not in logged_sessions(cfg, tier)


def test_the_servers_own_origin_and_listed_origins_may_post(site, chat):
    cfg = served_config(site, chat.url, "https://notes.example.org")
    body = {"question": QUESTION, "tier": "public"}
    with ServerThread(create_app(cfg, preload=False)) as api:
        assert api.post("/ask", json=body, headers={"Origin": api.url}).status_code == 200
        assert api.post("/ask", json=body).status_code == 200  # a program: no Origin
        assert api.post("/ask", json=body, headers={"Origin": "https://notes.example.org"}).status_code == 200
        assert api.post("/ask", json=body, headers={"Origin": "https://other.example.org"}).status_code == 403
        port = api.url.rsplit(":", 1)[1]
        # The page at http://localhost:PORT posting to the same server by that name: its own origin.
        same = {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"}
        assert api.post("/ask", json=body, headers=same).status_code == 200
    assert len(chat.chat_requests) == 4


def test_embed_and_mcp_posts_are_guarded_too(site, chat):
    cfg = served_config(site, chat.url)
    with ServerThread(create_app(cfg, preload=False)) as api:
        r = api.post("/embed", json={"text": "zigbee"}, headers={"Origin": EVIL})
        assert r.status_code == 403
        assert api.post("/embed", content=b'{"text": "zigbee"}').status_code == 415
        assert api.post("/embed", json={"text": "zigbee"}).status_code == 200
        init = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        r = api.post(
            "/mcp",
            content=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert r.status_code == 415
        r = api.post("/mcp", json=init, headers={"Accept": "application/json, text/event-stream", "Origin": EVIL})
        assert r.status_code == 403


def test_cors_origins_are_validated_and_normalised(tmp_path):
    config = tmp_path / "rag.yaml"
    config.write_text("serve:\n  cors_origins: ['HTTPS://Notes.Example.org:443/', 'http://127.0.0.1:8080']\n")
    assert load_config(config, environ={}).serve.cors_origins == ("https://notes.example.org", "http://127.0.0.1:8080")
    for bad in ("notes.example.org", "https://notes.example.org/search", "ftp://x.example", "'*'"):
        config.write_text(f"serve:\n  cors_origins: [{bad}]\n")
        with pytest.raises(ConfigError, match="cors_origins"):
            load_config(config, environ={})


# --- Chromium ---------------------------------------------------------------------------------

ATTACK_PAGE = f"""<!doctype html><title>evil</title><script>
const target = new URLSearchParams(location.search).get("target");
window.attack = async (tier) => {{
  const body = JSON.stringify({{question: "{QUESTION}", tier, session: "attacker"}});
  // A Blob without a type: the request goes out with no Content-Type at all, and no preflight.
  const beacon = navigator.sendBeacon(target, new Blob([body]));
  await fetch(target, {{mode: "no-cors", method: "POST", body: new Blob([body])}});
  await fetch(target, {{mode: "no-cors", method: "POST", body}});  // text/plain
  return beacon;
}};
</script>"""


def test_a_page_of_another_origin_cannot_make_ask_answer(site, chat, page, tmp_path):
    cfg = served_config(site, chat.url)
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "index.html").write_text(ATTACK_PAGE)
    (folder / "embeddings-meta.json").write_text("{}")  # what static_server waits for
    recorder = Recorder(create_app(cfg, preload=False))
    with ServerThread(recorder) as api, static_server(folder) as evil:
        page.goto(f"{evil}/index.html?target={api.url}/ask")
        sent = 0
        for tier in ("safe", "private"):
            assert page.evaluate("(tier) => window.attack(tier)", tier) is True
            sent += 3
            assert recorder.wait_for(sent), f"only {recorder.asks} of {sent} requests reached the server"
    assert chat.chat_requests == []
    assert "attacker" not in logged_sessions(cfg, "safe") + logged_sessions(cfg, "private")


def logged_queries(cfg, tier: str) -> list[str]:
    path = tier_logs.log_path(cfg.store_path(tier))
    if not path.is_file():
        return []
    with closing(sqlite3.connect(path)) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'search_log'").fetchone():
            return []
        return [row[0] for row in conn.execute("SELECT query FROM search_log")]


def test_a_search_another_sites_page_started_is_refused_unless_listed(site, chat):
    cfg = served_config(site, chat.url, "https://notes.example.org")
    query = {"q": "zigbee coordinator firmware", "tier": "safe"}
    with ServerThread(create_app(cfg, preload=False)) as api:
        for route in ("/search", "/context"):
            r = api.client.get(route, params=query, headers={"Sec-Fetch-Site": "cross-site"})  # an <img>: no Origin
            assert r.status_code == 403 and "serve.cors_origins" in r.json()["error"], r.text
            r = api.client.get(route, params=query, headers={"Sec-Fetch-Site": "same-site", "Origin": EVIL})
            assert r.status_code == 403
            listed = {"Sec-Fetch-Site": "cross-site", "Origin": "https://notes.example.org"}
            assert api.client.get(route, params=query, headers=listed).status_code == 200
            assert api.client.get(route, params=query, headers={"Sec-Fetch-Site": "same-origin"}).status_code == 200
            assert api.client.get(route, params=query).status_code == 200  # a program sends no Sec-Fetch-Site


IMG_PAGE = """<!doctype html><title>evil</title><body><script>
const target = new URLSearchParams(location.search).get("target");
window.attack = () => new Promise((done) => {
  const img = new Image();
  img.onload = img.onerror = () => done(true);
  img.src = target;
});
</script>"""


def test_a_page_of_another_origin_cannot_make_the_server_search_and_log(site, chat, page, tmp_path):
    cfg = served_config(site, chat.url)
    folder = tmp_path / "evil"
    folder.mkdir()
    (folder / "index.html").write_text(IMG_PAGE)
    (folder / "embeddings-meta.json").write_text("{}")  # what static_server waits for
    before = logged_queries(cfg, "safe")
    with ServerThread(create_app(cfg, preload=False)) as api, static_server(folder) as evil:
        page.goto(f"{evil}/index.html?target={api.url}/search%3Fq%3Dimgattackquery%26tier%3Dsafe")
        assert page.evaluate("() => window.attack()") is True
        page.evaluate(
            "() => fetch(new URLSearchParams(location.search).get('target'), {mode: 'no-cors'}).catch(() => 0)"
        )
    assert "imgattackquery" not in logged_queries(cfg, "safe")
    assert len(logged_queries(cfg, "safe")) == len(before)
