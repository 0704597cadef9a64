"""Copying `public/` as the documentation says works: its files are links into `data/`, so a
plain `cp -r` copies links that lead nowhere at the copy, and every place the README or the
docs/ site speaks of copying or uploading `public/` says to follow them (`cp -rL`, `rsync -rL`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build

ROOT = Path(__file__).resolve().parents[1]
# The README and every page of the documentation site (docs/, mkdocs.yml).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def paragraphs(text: str) -> list[str]:
    """A page's blank-line-separated blocks."""
    return [p for p in re.split(r"\n\s*\n", text) if p.strip()]


def test_every_place_that_copies_public_says_to_follow_its_links():
    near = re.compile(r"\b(copy|upload)\w*\b[^.|]{0,80}public/|public/[^.|]{0,80}\b(copy|upload)", re.IGNORECASE)
    copying = [p for page in PAGES for p in paragraphs(page.read_text(encoding="utf-8")) if near.search(p)]
    assert len(PAGES) > 10, "the docs/ pages are found"
    assert len(copying) >= 2, "the documentation describes copying public/"
    for paragraph in copying:
        assert re.search(r"cp -rL|rsync -r?L", paragraph), paragraph


@pytest.mark.skipif(shutil.which("cp") is None, reason="no cp")
def test_cp_r_copies_dangling_links_and_cp_rl_the_files(tmp_path):
    (tmp_path / "content" / "docs").mkdir(parents=True)
    (tmp_path / "content" / "docs" / "a.md").write_text("# A page\n\nSome words about a page.\n", encoding="utf-8")
    (tmp_path / "identity_map.json").write_text(json.dumps({"version": 1, "salt": "t", "rules": []}), encoding="utf-8")
    (tmp_path / "rag.yaml").write_text("content_dir: content\noutput_dir: out\nidentity_map: identity_map.json\n")
    cfg = load_config(tmp_path / "rag.yaml", embedder="hashing", private_embedder="hashing", environ={})
    with dg.instance_for_test() as instance:
        assert run_build(cfg, instance).success
    public = tmp_path / "out" / "public"
    assert (public / "embeddings-index.json").is_symlink()
    site = tmp_path / "site"
    site.mkdir()
    subprocess.run(["cp", "-r", str(public), str(site / "plain")], check=True)
    subprocess.run(["cp", "-rL", str(public), str(site / "followed")], check=True)
    assert not (site / "plain" / "embeddings-index.json").exists()  # a link to ../data/current/...: nothing there
    followed = site / "followed" / "embeddings-index.json"
    assert not followed.is_symlink()
    # The index names its segments, copied as files under segments/ (public/segments is a link too).
    for segment in json.loads(followed.read_text())["segments"]:
        assert (site / "followed" / segment["chunks"]["file"]).is_file()
