"""A small built site for the access and limits tests: one public post, a Safe vault and a Private
vault, each with a word found nowhere else (so a response holding any of that tier's text shows
it), a rag.yaml whose chat model is a :class:`ChatServer` on 127.0.0.1, and tokens."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg

from rag_assets.config import RagConfig, load_config
from rag_assets.defs.runner import run_build
from rag_assets.serve.tokens import TokenStore

PUBLIC_WORD = "lighthousekeeper"
SAFE_WORD = "zebracorn"
PRIVATE_WORD = "quokkaquill"
FILLER = "The notes ramble about ordinary chores, weather, the garden and the week's errands. " * 12

FILES = {
    "content/posts/lighthouse.md": f"---\ntitle: The lighthouse\n---\n# The lighthouse\n\nThe {PUBLIC_WORD} climbs "
    f"the stairs at dusk to light the lamp.\n\n{FILLER}\n",
    "vaults/safenotes/zebra.md": f"# Zebra notes\n\nThe {SAFE_WORD} grazes behind the shed every morning.\n\n{FILLER}\n",
    "vaults/privnotes/quokka.md": f"# Quokka diary\n\nThe {PRIVATE_WORD} is hidden in the attic box.\n\n{FILLER}\n",
}


@dataclass
class Site:
    root: Path
    config_path: Path
    cfg: RagConfig
    tokens: dict[str, str]  # name -> token, including the revoked and the expired one
    store: TokenStore

    def token_names(self) -> list[str]:
        return list(self.tokens)


def write_config(root: Path, chat_url: str, serve: str = "") -> Path:
    """rag.yaml for the site; ``serve``: extra lines under ``serve:`` (indented by two spaces)."""
    path = root / "rag.yaml"
    path.write_text(
        "content_dir: content\noutput_dir: out\nidentity_map: null\nembedder: hashing\n"
        "private_tier: {embedder: hashing}\n"
        "vaults:\n  - {name: safenotes, path: vaults/safenotes, tier: safe}\n"
        "  - {name: privnotes, path: vaults/privnotes, tier: private}\n"
        f"llm: {{name: ollama, ollama: {{host: '{chat_url}'}}}}\n"
        f"serve:\n  token_file: '{root / 'config' / 'tokens.json'}'\n{serve}"
    )
    return path


def build_site(root: Path, chat_url: str, serve: str = "") -> Site:
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    config_path = write_config(root, chat_url, serve)
    cfg = load_config(config_path, environ={})
    outcome = run_build(cfg, dg.DagsterInstance.ephemeral())
    assert outcome.success, outcome.error or outcome.failed_checks
    store = TokenStore(cfg.serve.token_file)
    tokens = {
        "reader": store.create("reader", ("safe",)),
        "owner": store.create("owner", ("safe", "private")),
        "admin": store.create("admin", ("admin",)),
        "revoked": store.create("revoked", ("safe", "private")),
        "expired": store.create("expired", ("safe", "private"), expires_days=1),
    }
    store.revoke("revoked")
    expire_now(store, "expired")
    return Site(root, config_path, cfg, tokens, store)


def expire_now(store: TokenStore, name: str) -> None:
    """Move a token's expiry into the past, as time passing would."""
    data = json.loads(store.path.read_text())
    for entry in data["tokens"]:
        if entry["name"] == name:
            entry["expires"] = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    store.path.write_text(json.dumps(data))


def wrong_token(token: str) -> str:
    """The same id with another secret: found in the file, refused by the hash."""
    return token[: len("rag_") + 12 + 1] + "A" * 43


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}
