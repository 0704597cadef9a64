"""Incremental vault builds and links: a note renamed or moved updates the links and backlinks
of the notes around it without re-embedding them, and a note whose links are edited is the only
one re-embedded. Real `rag build` runs (the CLI, in process) and the vault sensor on a real
Dagster instance; the hashing embedder's ``embed_documents`` is counted, not replaced."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rag_assets.config import load_config
from rag_assets.defs.partitions import VAULT_PARTITIONS
from rag_assets.defs.sensors import build_vault_sensor
from rag_assets.embed import HashingEmbedder
from rag_assets.planning import observe, plan
from rag_assets.serve.cli import main as rag

from .conftest import instance_for_test
from .test_obsidian_links import write_vault
from .test_sensors import evaluate, partitions_of, touch

WORDS = "Orchard notes with enough ordinary words to make a real chunk of text for the embedder. " * 3
VAULT = {
    "Apple.md": f"# Apple\n\nApples ripen in autumn. {WORDS}\n",
    "B.md": f"# B\n\nSee [[Apple]] for fruit. {WORDS}\n",
    "C.md": f"# C\n\nCherries, and [[Apple#Apple|the apple note]]. {WORDS}\n",
    "D.md": f"# D\n\nDates, linked to nothing. {WORDS}\n",
}


@pytest.fixture
def embedded(monkeypatch) -> list[str]:
    """Every text the hashing embedder embeds for a document, in order (queries not counted)."""
    texts: list[str] = []
    real = HashingEmbedder.embed_documents

    def counting(self, batch, **kwargs):
        texts.extend(batch)
        return real(self, batch, **kwargs)

    monkeypatch.setattr(HashingEmbedder, "embed_documents", counting)
    return texts


def links_of(db: Path) -> dict[str, tuple[list, list]]:
    """Each document's stored (links, backlinks), as (target id, from id) lists."""
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT id, links, backlinks FROM documents").fetchall()
    return {
        doc: (
            sorted(link.get("to") or link["status"] for link in json.loads(out or "[]")),
            sorted(b["from"] for b in json.loads(back or "[]")),
        )
        for doc, out, back in rows
    }


def chunk_rowids(db: Path) -> dict[str, int]:
    """Chunk id -> rowid: a chunk rewritten gets a new rowid."""
    with closing(sqlite3.connect(db)) as conn:
        return dict(conn.execute("SELECT id, rowid FROM chunks"))


def build_like_the_sensor(cfg, instance, config: Path) -> list[str]:
    """The vault sensor's request, checked to be the planner's, then `rag build` (which runs that plan)."""
    planned = plan(cfg, observe(cfg))
    request = evaluate(build_vault_sensor(cfg), instance, None, cfg)
    asked = {
        "private": [
            k
            for r in request.run_requests
            if r.job_name == "update_private_vaults"
            for k in partitions_of(r, instance, VAULT_PARTITIONS["private"])
        ]
    }
    assert asked == planned.vaults == {"private": ["orchard"]}
    assert rag(["build", "--config", str(config)]) == 0
    return planned.vault_names


@pytest.fixture
def vault(tmp_path):
    root = tmp_path / "site"
    write_vault(root / "vaults" / "orchard", VAULT)
    (root / "content" / "docs").mkdir(parents=True)
    (root / "content" / "docs" / "page.md").write_text("# Page\n\nA public page.\n")
    config = root / "rag.yaml"
    config.write_text(
        "content_dir: content\noutput_dir: out\nembedder: {name: hashing}\nidentity_map: null\n"
        "private_tier: {embedder: hashing}\nllm: {name: none}\nvaults:\n  - {name: orchard, path: vaults/orchard, tier: private}\n",
        encoding="utf-8",
    )
    return root, config, load_config(config, environ={})


def test_moving_a_note_updates_its_backlinks_and_the_linking_notes_without_reembedding(vault, embedded):
    root, config, cfg = vault
    with instance_for_test() as instance:
        assert rag(["build", "--config", str(config)]) == 0
        assert len(embedded) >= 4  # every note embedded once
        db = cfg.store_path("private")
        before = links_of(db)
        assert before["orchard/Apple"][1] == ["orchard/B", "orchard/C"]
        rowids = chunk_rowids(db)
        embedded.clear()

        # Moved into a folder: [[Apple]] still resolves (shortest unique path), to the new id.
        moved = root / "vaults" / "orchard" / "Trees" / "Apple.md"
        moved.parent.mkdir()
        (root / "vaults" / "orchard" / "Apple.md").rename(moved)
        touch(moved, moved.read_text())
        build_like_the_sensor(cfg, instance, config)
        after = links_of(db)
        assert "orchard/Apple" not in after
        assert after["orchard/Trees/Apple"][1] == ["orchard/B", "orchard/C"]
        assert after["orchard/B"][0] == after["orchard/C"][0] == ["orchard/Trees/Apple"]
        assert embedded == []  # the moved note's text is unchanged: its vectors come from the cache
        now = chunk_rowids(db)
        kept = [cid for cid in rowids if cid.startswith(("orchard/B/", "orchard/C/", "orchard/D/"))]
        assert kept and all(now[cid] == rowids[cid] for cid in kept)  # B, C, D's chunks untouched

        # Renamed: B's and C's [[Apple]] no longer resolve; they say so, still not re-embedded.
        moved.rename(moved.with_name("Pomme.md"))
        touch(moved.with_name("Pomme.md"), moved.with_name("Pomme.md").read_text())
        build_like_the_sensor(cfg, instance, config)
        after = links_of(db)
        assert after["orchard/B"][0] == after["orchard/C"][0] == ["unresolved"]
        assert after["orchard/Trees/Pomme"][1] == [] and embedded == []
        assert all(chunk_rowids(db)[cid] == rowids[cid] for cid in kept)


def test_editing_a_notes_links_reembeds_that_note_only(vault, embedded):
    root, config, cfg = vault
    with instance_for_test() as instance:
        assert rag(["build", "--config", str(config)]) == 0
        db = cfg.store_path("private")
        rowids = chunk_rowids(db)
        embedded.clear()
        b = root / "vaults" / "orchard" / "B.md"
        touch(b, b.read_text().replace("See [[Apple]]", "See [[D]]"))
        build_like_the_sensor(cfg, instance, config)
        after = links_of(db)
        assert after["orchard/B"][0] == ["orchard/D"]
        assert after["orchard/D"][1] == ["orchard/B"] and after["orchard/Apple"][1] == ["orchard/C"]
        assert embedded and all("See D for fruit" in text for text in embedded)  # B's changed chunk alone
        now = chunk_rowids(db)
        others = [cid for cid in rowids if not cid.startswith("orchard/B/")]
        assert others and all(now[cid] == rowids[cid] for cid in others)
