"""Note embeds transcluded behind a vault's ``transclude_embeds`` (issue 28): off by default, on
it brings a whole note, a heading's section or a block into the embedding note's chunks, from
the same vault only, bounded in depth and size, loops reported, Safe text sanitised, and an
edit of the embedded note reaches the embedding note. Real `rag build` runs (the CLI, in process)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.ingest.link_resolution import LinkReport, resolve_vault
from rag_assets.ingest.parsing import as_obsidian_note
from rag_assets.ingest.transclusion import MAX_TRANSCLUDED_CHARS, transclude_vault
from rag_assets.planning import observe, plan
from rag_assets.records import Document
from rag_assets.serve.cli import main as rag

from .conftest import instance_for_test
from .deadline import deadline
from .test_obsidian import GITHUB_TOKEN
from .test_obsidian_incremental import embedded  # noqa: F401  (the fixture counting embedded texts)
from .test_obsidian_links import write_vault
from .test_sensors import touch

WORDS = "Plain filler words so that each note makes a chunk of its own for the embedder. "
LAB = {
    "Hub.md": "# Hub\n\nThe hub note. ![[Recipes#Bread]] and ![[Facts#^fact-7]] and ![[Whole]]\n",
    "Recipes.md": (
        "# Recipes\n\n## Soup\n\nSoupwordzeta simmers.\n\n## Bread\n\nBreadwordalpha needs flour.\n\n"
        "### Crust\n\nCrustwordbeta bakes hard.\n\n## Cake\n\nCakewordgamma is sweet.\n"
    ),
    "Facts.md": f"# Facts\n\nFirst fact factworddelta. ^fact-6\n\nSeventh fact factwordepsilon. ^fact-7\n\n{WORDS}\n",
    "Whole.md": f"# Whole\n\nWholewordeta in full, token {GITHUB_TOKEN}.\n",
    "Loop A.md": "# Loop A\n\nLoopwordalef. ![[Loop B]]\n",
    "Loop B.md": "# Loop B\n\nLoopwordbet. ![[Loop A]]\n",
    "Self.md": "# Self\n\nSelfwordgimel. ![[Self]]\n",
    "Cross.md": "# Cross\n\nCrosswordnote. ![[Secret plan]]\n",
}
OTHER = {"Secret plan.md": "# Secret plan\n\nOtherwordvaultonly.\n"}


def write_site(root: Path, transclude: bool | None) -> Path:
    """Two vaults (lab: safe, other: private) and a rag.yaml; ``None`` leaves the setting out."""
    write_vault(root / "vaults" / "lab", LAB)
    write_vault(root / "vaults" / "other", OTHER)
    write_vault(root / "content" / "docs", {"page.md": "# Page\n\nA public page.\n"})
    setting = "" if transclude is None else f", transclude_embeds: {str(transclude).lower()}"
    config = root / "rag.yaml"
    config.write_text(
        "content_dir: content\noutput_dir: out\nembedder: {name: hashing}\nidentity_map: null\n"
        "private_tier: {embedder: hashing}\nllm: {name: none}\nvaults:\n"
        f"  - {{name: lab, path: vaults/lab, tier: safe{setting}}}\n"
        f"  - {{name: other, path: vaults/other, tier: private{setting}}}\n",
        encoding="utf-8",
    )
    return config


def note_text(db: Path, doc_id: str) -> str:
    """Every chunk of a note, joined in order."""
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT text FROM chunks WHERE document_id = ? ORDER BY chunk_index", (doc_id,))
        return "\n".join(r[0] for r in rows)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The site with transclusion on, built once: (root, config, cfg, build output)."""
    root = tmp_path_factory.mktemp("transclude")
    config = write_site(root, True)
    cfg = load_config(config, environ={})
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
        assert outcome.success, outcome.error or outcome.failed_checks
        issues = [
            item
            for key in ("safe_vault_chunks", "private_vault_chunks")
            for record in instance.fetch_materializations(dg.AssetKey(key), limit=10).records
            if record.partition_key == "lab"
            for item in record.asset_materialization.metadata["link_issue_entries"].value
        ]
    return root, config, cfg, issues


def test_off_by_default_an_embed_is_a_link_only(tmp_path):
    config = write_site(tmp_path, None)
    cfg = load_config(config, environ={})
    assert cfg.vaults[0].transclude_embeds is False
    with instance_for_test():
        assert rag(["build", "--config", str(config)]) == 0
    hub = note_text(cfg.store_path("private"), "lab/Hub")
    assert "The hub note." in hub
    for word in ("Breadwordalpha", "factwordepsilon", "Wholewordeta"):
        assert word not in hub


@pytest.mark.parametrize("tier", ["private", "safe"])
def test_on_a_heading_section_a_block_and_a_whole_note_are_included(built, tier):
    _, _, cfg, _ = built
    hub = note_text(cfg.store_path(tier), "lab/Hub")
    assert "The hub note." in hub
    # The heading's section, its subsection too, and nothing of the sibling sections.
    assert "Breadwordalpha" in hub and "Crustwordbeta" in hub
    assert "Soupwordzeta" not in hub and "Cakewordgamma" not in hub
    # The block alone, not its neighbour, and without its ^id.
    assert "Seventh fact factwordepsilon." in hub and "factworddelta" not in hub and "^fact-7" not in hub
    assert "Wholewordeta" in hub
    assert "Embedded from Recipes > Bread:" in hub
    assert "## Bread" not in hub and "\n# Whole" not in hub  # embedded headings are plain lines


def test_cross_vault_text_is_never_included(built):
    _, _, cfg, _ = built
    for tier in ("private", "safe"):
        cross = note_text(cfg.store_path(tier), "lab/Cross")
        assert "Crosswordnote" in cross and "Otherwordvaultonly" not in cross


def test_loops_and_self_embeds_are_included_once_and_reported(built):
    _, _, cfg, issues = built
    a = note_text(cfg.store_path("private"), "lab/Loop A")
    assert a.count("Loopwordalef") == 1 and a.count("Loopwordbet") == 1
    b = note_text(cfg.store_path("private"), "lab/Loop B")
    assert b.count("Loopwordbet") == 1 and b.count("Loopwordalef") == 1
    assert note_text(cfg.store_path("private"), "lab/Self").count("Selfwordgimel") == 1
    loops = {(i["note"], i["kind"]) for i in issues if i["kind"] == "transclusion_loop"}
    assert {"lab/Loop A", "lab/Loop B", "lab/Self"} <= {note for note, _ in loops}


def test_safe_transcluded_text_is_sanitised(built):
    _, _, cfg, _ = built
    safe = cfg.store_path("safe")
    hub = note_text(safe, "lab/Hub")
    assert "Wholewordeta" in hub and GITHUB_TOKEN not in hub and "[REDACTED:" in hub
    raw = safe.read_bytes() + (Path(f"{safe}-wal").read_bytes() if Path(f"{safe}-wal").exists() else b"")
    assert GITHUB_TOKEN.encode() not in raw
    assert GITHUB_TOKEN in note_text(cfg.store_path("private"), "lab/Hub")  # the Private tier keeps it


def test_editing_the_embedded_note_updates_the_embedding_note(tmp_path, embedded):  # noqa: F811
    config = write_site(tmp_path, True)
    cfg = load_config(config, environ={})
    with instance_for_test():
        assert rag(["build", "--config", str(config)]) == 0
        embedded.clear()
        recipes = tmp_path / "vaults" / "lab" / "Recipes.md"
        touch(recipes, recipes.read_text().replace("Breadwordalpha", "Breadwordomega"))
        assert plan(cfg, observe(cfg)).vaults["private"] == ["lab"]  # what the sensor and the CLI plan
        assert rag(["build", "--config", str(config)]) == 0
    # Re-embedded: Recipes and the note embedding its Bread section, nothing else.
    assert embedded and all("Breadwordomega" in text for text in embedded)
    for tier in ("private", "safe"):
        hub = note_text(cfg.store_path(tier), "lab/Hub")
        assert "Breadwordomega" in hub and "Breadwordalpha" not in hub


def test_turning_the_setting_on_rebuilds_the_vault(tmp_path):
    config = write_site(tmp_path, False)
    with instance_for_test():
        assert rag(["build", "--config", str(config)]) == 0
        config.write_text(config.read_text().replace("transclude_embeds: false", "transclude_embeds: true"))
        assert rag(["build", "--config", str(config)]) == 0
    assert "Wholewordeta" in note_text(load_config(config, environ={}).store_path("private"), "lab/Hub")


def _doc(slug: str, body: str) -> Document:
    """A vault note read as the build reads it."""
    doc = Document("v", slug, f"v/{slug}.md", slug, "", [], {}, body, "", "")
    return as_obsidian_note(doc)


def test_depth_and_size_are_bounded_and_reported():
    big = "x" * (MAX_TRANSCLUDED_CHARS * 2)
    chain = [_doc(f"N{i}", f"# N{i}\n\nword{i} ![[N{i + 1}]]\n") for i in range(10)]
    docs = [*chain, _doc("Big", f"# Big\n\n{big}\n"), _doc("Hub", "# Hub\n\n![[Big]]\n")]
    resolved = resolve_vault("v", docs, [])
    report = LinkReport("v")
    out = {d.id: d for d in transclude_vault(resolved.documents, report)}
    assert "word3" in out["v/N0"].body and "word4" not in out["v/N0"].body  # three levels followed
    assert report.counts["transclusion_depth"] >= 1 and report.counts["transclusion_capped"] == 1
    assert len(out["v/Hub"].body) <= MAX_TRANSCLUDED_CHARS + 100


def test_thousands_of_embeds_in_one_note_stay_bounded():
    sections = "".join(f"## S{i}\n\nsection{i} text.\n\n" for i in range(3000))
    embeds = " ".join(f"![[Big#S{i}]]" for i in range(3000))
    docs = [_doc("Big", f"# Big\n\n{sections}"), _doc("Hub", f"# Hub\n\n{embeds} ![[Hub]]\n")]
    report = LinkReport("v")
    with deadline(120):  # a hang guard only: quadratic work would take far longer
        out = {d.id: d for d in transclude_vault(resolve_vault("v", docs, []).documents, report)}
    assert "section0 text." in out["v/Hub"].body and report.counts["transclusion_capped"] == 1
    assert report.counts["transclusion_loop"] == 1  # the self-embed, once
