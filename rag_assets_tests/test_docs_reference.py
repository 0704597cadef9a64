"""The generated reference pages of the documentation site (docs/reference/) are current, and
every rag.yaml key and `rag` command is documented in them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from rag_assets.config.schema import ConfigFile
from rag_assets.serve import docs_reference
from rag_assets.serve.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def test_committed_reference_pages_are_current():
    """What the code generates now is what is committed (else: run the generator, commit)."""
    assert docs_reference.stale_pages() == [], (
        "run python -m rag_assets.serve.docs_reference and commit docs/reference/"
    )


def test_check_reports_a_stale_page(tmp_path):
    """The check can fail: a page edited by hand (or left behind by a code change) is named."""
    folder = tmp_path / "reference"
    shutil.copytree(ROOT / "docs" / "reference", folder)
    assert docs_reference.stale_pages(folder) == []
    page = folder / "configuration.md"
    page.write_text(page.read_text(encoding="utf-8").replace("New (non-overlap) words", "Words"), encoding="utf-8")
    assert docs_reference.stale_pages(folder) == ["configuration.md"]
    (folder / "cli.md").unlink()
    assert docs_reference.stale_pages(folder) == ["configuration.md", "cli.md"]


def test_every_rag_yaml_key_has_a_description():
    """Each key's row carries its model field's description (a key without one fails here)."""
    rows = [row for _, _, section in docs_reference.sections(ConfigFile, ConfigFile(), "") for row in section]
    assert len(rows) > 80
    assert [row.key for row in rows if not row.description.strip()] == []
    page = docs_reference.configuration_page()
    for row in rows:
        assert f"| `{row.key}` |" in page


def test_every_command_and_option_is_in_the_cli_page():
    """Every subcommand (token's own too) has a section, and each of its options a row."""
    page = docs_reference.cli_page()
    parser = build_parser()
    commands = next(a for a in docs_reference.parser_actions(parser) if isinstance(a.choices, dict)).choices
    assert {"build", "search", "serve", "mcp", "token", "eval", "config"} <= set(commands)
    for name, sub in commands.items():
        assert f"## `rag {name}`" in page
        for action in docs_reference.parser_actions(sub):
            for option in action.option_strings:
                if option != "-h":
                    assert f"`{option}" in page or f", {option}" in page, (name, option)
    assert "### `rag token create`" in page


def test_the_generator_runs_as_a_module_with_check():
    """`python -m rag_assets.serve.docs_reference --check` (what CI's docs task runs) exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "rag_assets.serve.docs_reference", "--check"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr


def test_the_readme_stays_short_and_its_links_lead_somewhere():
    """Issue 29: a README of at most about 200 lines, whose links into docs/ name real files
    (the site itself is checked by `mkdocs build --strict` in `tasks.py docs`)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    targets = {m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in m}
    assert "docs/getting-started.md" in targets and "CHANGELOG.md" in targets
    assert [t for t in sorted(targets) if t and not (ROOT / t).exists()] == []
