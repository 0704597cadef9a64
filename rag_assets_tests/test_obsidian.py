"""Obsidian vault notes: wikilinks, embeds, comments, callouts, tags, aliases and the vault
layout, on fixture vaults written per test, the Safe tier's sanitiser, and the shared vault
(``../shared/corpora/obsidian-vault`` relative to the repository) built by `rag build`."""

from __future__ import annotations

import dataclasses
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from rag_assets.config import ConfigError, VaultConfig, load_config
from rag_assets.embed import HashingEmbedder
from rag_assets.ingest.boundaries import vault_policy
from rag_assets.ingest.parsing import parse_collection, parse_markdown_file
from rag_assets.privacy.sanitize import Sanitizer
from rag_assets.privacy.vaults import build_vault_tier, detect_vault_changes, snapshot_vault
from rag_assets.records import Document, Link
from rag_assets.serve.cli import main as rag

from .conftest import REPO_ROOT
from .deadline import deadline

SHARED_VAULT = REPO_ROOT / ".." / "shared" / "corpora" / "obsidian-vault"
GITHUB_TOKEN = "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def note(tmp_path: Path, text: str, name: str = "Note.md", obsidian: bool = True) -> Document:
    path = tmp_path / "v" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    doc = parse_markdown_file(path, root=tmp_path / "v", collection="v", obsidian=obsidian)
    assert isinstance(doc, Document), doc
    return doc


def test_wikilinks_reach_the_text_as_their_display_text_and_are_recorded(tmp_path):
    doc = note(
        tmp_path,
        "Set up [[Proxmox setup|the cluster]] from [[Network]], see [[Backups#Offsite#Restic]],\n"
        "[[Disks#^smart-1]] and [[#Local part]]. | [[Table cell\\|aliased]] |\n",
    )
    assert doc.body == (
        "Set up the cluster from Network, see Backups > Offsite > Restic,\nDisks and Local part. | aliased |\n"
    )
    assert doc.links == [
        Link("Proxmox setup", display="the cluster"),
        Link("Network", display="Network"),
        Link("Backups", heading="Offsite#Restic", display="Backups > Offsite > Restic"),
        Link("Disks", block="smart-1", display="Disks"),
        Link("", heading="Local part", display="Local part"),
        Link("Table cell", display="aliased"),
    ]


def test_embeds_leave_no_text_and_are_recorded_as_links(tmp_path):
    doc = note(tmp_path, "# Rack\n\n![[rack diagram.png|300]]\n\nBefore ![[Other note#Section]] after.\n")
    assert "![[" not in doc.body and "rack diagram" not in doc.body and "Other note" not in doc.body
    assert "Before  after." in doc.body
    assert doc.links == [Link("rack diagram.png", kind="embed"), Link("Other note", heading="Section", kind="embed")]


def test_block_ids_comments_and_callout_markers_are_dropped(tmp_path):
    doc = note(
        tmp_path,
        "A paragraph with an id ^para-1\n\n- an item ^item2\n\nKept %% an inline comment %% text.\n\n"
        "%%\nA comment over\n\nseveral lines\n%%\n\n> [!warning]- Mind the UPS\n> It lasts ten minutes.\n\n"
        "> [!tip]\n> Label the cables.\n",
    )
    assert doc.anchors == ["para-1", "item2"]
    assert "^" not in doc.body and "%%" not in doc.body and "comment" not in doc.body and "[!" not in doc.body
    assert "A paragraph with an id" in doc.body and "Kept  text." in doc.body
    assert "> Mind the UPS\n> It lasts ten minutes." in doc.body
    assert "> Tip\n> Label the cables." in doc.body  # an untitled callout shows its type


def test_inline_tags_join_the_property_tags_but_not_from_code_headings_numbers_or_urls(tmp_path):
    doc = note(
        tmp_path,
        "---\ntags: [homelab]\n---\n# Title\n\n## Ideas #project/rack\n\nTagged #network and #homelab, "
        "issue #123, `#incode`, C#sharp, https://example.com/page#frag \\#escaped.\n\n```\n#fenced\n```\n",
    )
    assert doc.tags == ["homelab", "project/rack", "network"]
    assert "#network" in doc.body  # the tag stays in the text, as Obsidian shows it


@pytest.mark.parametrize(
    "properties",
    [
        "tags: a, b\naliases: First name, Second",
        "tags: [a, '#b']\naliases: [First name, Second]",
        "tags:\n  - a\n  - b\naliases:\n  - First name\n  - Second",
        "tags: '#a #b'\nalias: First name, Second",
    ],
)
def test_tags_and_aliases_properties_in_obsidians_forms(tmp_path, properties):
    doc = note(tmp_path, f"---\n{properties}\n---\nText.\n")
    assert doc.tags == ["a", "b"] and doc.aliases == ["First name", "Second"]


def test_wikilinks_in_properties_become_their_display_text_and_links(tmp_path):
    doc = note(tmp_path, '---\nauthor: "[[Steph Ango|Steph]]"\ngenre:\n  - "[[Sci-fi]]"\n---\nA note.\n')
    assert doc.frontmatter == {"author": "Steph", "genre": ["Sci-fi"]}
    assert doc.links == [
        Link("Steph Ango", display="Steph", source="property:author"),
        Link("Sci-fi", display="Sci-fi", source="property:genre"),
    ]


def test_markdown_links_to_notes_are_links(tmp_path):
    doc = note(tmp_path, "See [the other note](Other%20note.md#Part), [site](https://x.org/a.md) and [img](a.png).\n")
    assert doc.links == [Link("Other note.md", heading="Part", display="the other note", kind="markdown")]
    assert "[the other note](Other%20note.md#Part)" in doc.body


def test_code_is_never_read_as_obsidian_syntax(tmp_path):
    code = "`[[span]] %% x %% #tag ^id`\n\n```\n[[fence]] #tag %% y %%\n```\n\n    [[indented]] #tag\n"
    doc = note(tmp_path, "Text.\n\n" + code)
    assert doc.body == "Text.\n\n" + code and doc.links == [] and doc.tags == []


def test_a_vault_note_of_properties_only_is_a_note_but_a_site_page_is_not(tmp_path):
    doc = note(tmp_path, '---\ncategories: ["[[Movies]]"]\nyear: 1982\n---\n', name="Blade Runner.md")
    assert doc.title == "Blade Runner" and doc.links == [Link("Movies", display="Movies", source="property:categories")]
    path = tmp_path / "v" / "Blade Runner.md"
    skipped = parse_markdown_file(path, root=tmp_path / "v", collection="v")
    assert not isinstance(skipped, Document) and "empty file" in skipped.reason


def test_site_pages_are_read_as_plain_markdown(tmp_path):
    doc = note(tmp_path, "Kramdown id {: #custom-id} and a literal [[x]].\n", obsidian=False)
    assert "[[x]]" in doc.body and doc.tags == [] and doc.links == []


def test_ten_thousand_links_and_unclosed_brackets_stay_linear(tmp_path):
    many = " ".join(f"[[Note {i}|n{i}]] #t{i}" for i in range(10_000))
    with deadline(60):  # against a hang only: a quadratic scan would take many minutes
        doc = note(tmp_path, many + "\n\n" + "[[" * 20_000 + "\n\n" + "%% " * 20_000 + "\n")
    assert len(doc.links) == 10_000 and len(doc.tags) == 10_000 and doc.body.startswith("n0 #t0 n1")


def vault_config(make_config, content: Path, *vaults: VaultConfig):
    return dataclasses.replace(make_config(content), vaults=vaults, identity_map_path=None)


def test_vault_layout_skips_settings_trash_templates_bases_and_canvases(write_tree, make_config):
    content = write_tree(
        {
            "vaults/v/Note.md": "# Note\n\nThe note.",
            "vaults/v/.obsidian/workspace.md": "# Settings",
            "vaults/v/.trash/Old.md": "# Deleted note",
            "vaults/v/Templates/Daily.md": "# {{date}}",
            "vaults/v/Templates/Bases/All.base": "views: []",
            "vaults/v/Board.canvas": '{"nodes": []}',
            "vaults/v/Meta/Tpl/Other.md": "# Template",
        }
    )
    vault = VaultConfig("v", content / "vaults" / "v", "private")
    cfg = vault_config(make_config, content, vault)
    parsed = parse_collection(
        content / "vaults", "v", "", root=vault.path, policy=vault_policy(cfg, vault), obsidian=True
    )
    assert sorted(d.path for d in parsed.documents) == ["v/Meta/Tpl/Other.md", "v/Note.md"]
    reasons = {s.path: s.reason for s in parsed.skipped}
    assert set(reasons) == {"v/Templates", "v/Board.canvas"}
    assert "templates folder (templates_folder: Templates)" in reasons["v/Templates"]
    assert reasons["v/Board.canvas"].startswith("Obsidian canvas")

    moved = dataclasses.replace(vault, templates_folder="Meta/Tpl")
    parsed = parse_collection(
        content / "vaults", "v", "", root=vault.path, policy=vault_policy(cfg, moved), obsidian=True
    )
    assert {s.path for s in parsed.skipped} == {"v/Meta/Tpl", "v/Board.canvas", "v/Templates/Bases/All.base"}
    assert "Obsidian Bases file" in {s.path: s.reason for s in parsed.skipped}["v/Templates/Bases/All.base"]
    assert "v/Templates/Daily.md" in {d.path for d in parsed.documents}


def test_templates_folder_is_configurable_and_checked(tmp_path):
    (tmp_path / "v").mkdir()
    config = tmp_path / "rag.yaml"
    base = "content_dir: .\nidentity_map: null\nvaults:\n  - {name: v, path: v, tier: private, templates_folder: %s}\n"
    config.write_text(base % "Meta/Templates")
    assert load_config(config, environ={}).vaults[0].templates_folder == "Meta/Templates"
    config.write_text(base % "null")
    assert load_config(config, environ={}).vaults[0].templates_folder is None
    config.write_text(base % "../elsewhere")
    with pytest.raises(ConfigError, match="templates_folder"):
        load_config(config, environ={})


def chunk_texts(db: Path) -> str:
    with closing(sqlite3.connect(db)) as conn:
        return "\n".join(row[0] for row in conn.execute("SELECT text FROM chunks"))


def test_safe_tier_sanitises_link_targets_and_display_text(write_tree, make_config):
    content = write_tree(
        {"vaults/v/CI.md": f"# CI\n\nThe runner uses [[Gitea|{GITHUB_TOKEN}]] and ![[{GITHUB_TOKEN}.png]].\n"}
    )
    vault = VaultConfig("v", content / "vaults" / "v", "safe")
    cfg = vault_config(make_config, content, vault)
    sanitizer = Sanitizer.from_file(None)
    parsed = parse_collection(
        content / "vaults", "v", "", root=vault.path, policy=vault_policy(cfg, vault), obsidian=True
    )
    clean, tally = sanitizer.collection(parsed)
    links = clean.documents[0].links
    assert [link.display for link in links] == ["[REDACTED:github_pat_classic]", ""]
    assert links[1].target == "[REDACTED:github_pat_classic].png" and tally.secrets
    build = build_vault_tier(cfg, vault, "safe", HashingEmbedder(), provider="hashing", sanitizer=sanitizer)
    text = chunk_texts(cfg.store_path("safe"))
    assert build.documents == 1 and GITHUB_TOKEN not in text and "uses [REDACTED:github_pat_classic] and" in text


def test_a_wikilink_never_pulls_text_from_another_vault(write_tree, make_config):
    content = write_tree(
        {
            "vaults/a/Note.md": "# Note\n\n![[../b/Secret]] ![[Secret]] [[../../etc/passwd]] [[../b/Secret|see it]]\n",
            "vaults/b/Secret.md": "# Secret\n\nThe vault b passphrase is marmalade-orbit.\n",
        }
    )
    a, b = VaultConfig("a", content / "vaults" / "a", "private"), VaultConfig("b", content / "vaults" / "b", "safe")
    cfg = vault_config(make_config, content, a, b)
    build_vault_tier(cfg, a, "private", HashingEmbedder(), provider="hashing")
    text = chunk_texts(cfg.store_path("private"))
    assert "marmalade" not in text and "[[" not in text and "see it" in text
    parsed = parse_collection(content / "vaults", "a", "", root=a.path, policy=vault_policy(cfg, a), obsidian=True)
    assert [link.target for link in parsed.documents[0].links] == [
        "../b/Secret",
        "Secret",
        "../../etc/passwd",
        "../b/Secret",
    ]


@pytest.mark.skipif(not SHARED_VAULT.is_dir(), reason="the shared corpora are not next to the repository")
def test_the_shared_vault_builds_with_every_skip_reported(tmp_path, capsys):
    config = tmp_path / "rag.yaml"
    config.write_text(
        f"content_dir: content\noutput_dir: out\nidentity_map: null\n"
        f"vaults:\n  - {{name: shared, path: '{SHARED_VAULT.resolve()}', tier: private}}\n"
    )
    (tmp_path / "content").mkdir()
    assert rag(["build", "--config", str(config), "--embedder", "hashing", "--private-embedder", "hashing"]) == 0
    printed = capsys.readouterr().out
    skips = [line.strip() for line in printed.splitlines() if line.strip().startswith("[vault shared] skipped")]
    assert skips == [
        "[vault shared] skipped shared/Attachments/out-of-control.jpg: not a Markdown file (.jpg); "
        "only .md, .markdown, .mdx are indexed",
        "[vault shared] skipped shared/LICENSE: not a Markdown file (no extension); only .md, .markdown, .mdx are indexed",
        "[vault shared] skipped shared/Templates: the vault's templates folder (templates_folder: Templates): note "
        "templates, not notes; never read (set templates_folder: null to index it)",
    ]
    assert "3 skipped" in printed
    text = chunk_texts(tmp_path / "out" / "data" / "rag-store.db")
    # The only brackets left are the ones SOURCE.md quotes in code spans.
    assert text.count("[[") == 3 and "`[[wikilinks]]`" in text and "%%" not in text
    assert "Discussed the book Out of Control on the topic of Emergence" in text


def test_a_vault_built_before_the_obsidian_reading_is_rebuilt_once(write_tree, make_config):
    """The previous code recorded a Private vault's bare content hash: its raw `[[...]]` chunks
    must not pass for fresh, and after one rebuild the vault is unchanged again."""
    content = write_tree({"vaults/v/Note.md": "# Note\n\nSee [[Other note|the other one]].\n"})
    vault = VaultConfig("v", content / "vaults" / "v", "private")
    cfg = vault_config(make_config, content, vault)
    build_vault_tier(cfg, vault, "private", HashingEmbedder(), provider="hashing")
    assert [c.status for c in detect_vault_changes(cfg)] == ["unchanged"]
    with closing(sqlite3.connect(cfg.store_path("private"))) as conn, conn:
        conn.execute(
            "UPDATE sources SET content_hash = ? WHERE collection = 'v'", (snapshot_vault(cfg, vault).content_hash,)
        )
    assert [c.status for c in detect_vault_changes(cfg)] == ["changed"]
