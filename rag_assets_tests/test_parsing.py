"""Parsing Markdown files: frontmatter, encodings, and every way a file can be unusable."""

from __future__ import annotations

from rag_assets.ingest.parsing import parse_collection
from rag_assets.records import Document, SkippedFile

from .conftest import PROXMOX_POST


def parse(write_tree, files):
    root = write_tree(files)
    return parse_collection(root, "posts", "hash")


def test_frontmatter_becomes_metadata_and_leaves_the_body(write_tree):
    parsed = parse(write_tree, {"posts/homelab-proxmox-setup.md": PROXMOX_POST})
    [doc] = parsed.documents
    assert doc.title == "Proxmox on a small box"
    assert doc.tags == ["proxmox", "vlan"]
    assert doc.description.startswith("Installing Proxmox")
    assert doc.frontmatter["date"] == "2026-01-10"
    assert doc.updated_at == "2026-01-10"
    assert "title:" not in doc.body and doc.body.lstrip().startswith("# Proxmox")
    assert doc.slug == "homelab-proxmox-setup" and doc.id == "posts/homelab-proxmox-setup"


def test_nested_slug_uses_forward_slashes_and_drops_the_extension(write_tree):
    parsed = parse(write_tree, {"posts/2026/net/vlans.markdown": "# VLANs\n\ntext"})
    assert [d.slug for d in parsed.documents] == ["2026/net/vlans"]


def test_bom_and_crlf_are_normalised(write_tree):
    raw = ("\ufeff---\r\ntitle: Windows note\r\ntags: a, b\r\n---\r\nLine one.\r\nLine two.\r\n").encode("utf-8")
    [doc] = parse(write_tree, {"posts/win.md": raw}).documents
    assert doc.title == "Windows note"
    assert doc.tags == ["a", "b"]
    assert "\r" not in doc.body and doc.body.startswith("Line one.\nLine two.")


def test_unusable_files_are_skipped_with_a_reason_and_the_rest_is_indexed(write_tree):
    parsed = parse(
        write_tree,
        {
            "posts/good.md": "# Good\n\nfine text",
            "posts/bad-yaml.md": "---\ntitle: [unclosed\n---\nbody",
            "posts/latin1.md": "caf\xe9".encode("latin-1"),
            "posts/empty.md": "",
            "posts/blank.md": "   \n\n",
            "posts/image.png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
            "posts/binary.md": b"abc\0def",
            "posts/list-frontmatter.md": "---\n- a\n- b\n---\nbody",
            "posts/unclosed.md": "---\ntitle: x\nbody without end",
            "posts/notes.txt": "plain text",
        },
    )
    assert [d.slug for d in parsed.documents] == ["good"]
    reasons = {s.path.split("/")[-1]: s.reason for s in parsed.skipped}
    assert "invalid YAML frontmatter" in reasons["bad-yaml.md"]
    assert "UTF-8" in reasons["latin1.md"] and "offset 3" in reasons["latin1.md"]
    assert reasons["empty.md"] == "empty file"
    assert reasons["blank.md"] == "empty file"
    assert "not a Markdown file (.png)" in reasons["image.png"]
    assert "binary" in reasons["binary.md"]
    assert "mapping" in reasons["list-frontmatter.md"]
    assert "never closed" in reasons["unclosed.md"]
    assert "not a Markdown file (.txt)" in reasons["notes.txt"]
    assert len(parsed.skipped) == 9


def test_empty_frontmatter_block_is_fine(write_tree):
    [doc] = parse(write_tree, {"posts/x.md": "---\n---\n# Heading\n\nSome text."}).documents
    assert doc.title == "Heading" and doc.frontmatter == {}


def test_title_falls_back_to_the_file_name(write_tree):
    [doc] = parse(write_tree, {"posts/my-first_note.md": "no heading here"}).documents
    assert doc.title == "my first note"


def test_mdx_import_lines_are_dropped_outside_code(write_tree):
    text = "import Calc from './Calc'\n\n# Subnets\n\n<Calc cidr=\"10.0.0.0/24\" />\n\n```js\nimport x from 'y'\n```\n"
    [doc] = parse(write_tree, {"posts/calc.mdx": text}).documents
    assert "import Calc" not in doc.body
    assert "import x from 'y'" in doc.body
    assert "<Calc" in doc.body


def test_same_slug_from_two_extensions_is_reported(write_tree):
    parsed = parse(write_tree, {"posts/a.md": "# A\n\ntext", "posts/a.mdx": "# A\n\nother"})
    assert len(parsed.documents) == 1
    [skip] = parsed.skipped
    assert "same slug 'a'" in skip.reason


def test_hidden_files_and_folders_are_not_content(write_tree):
    parsed = parse(write_tree, {"posts/.draft.md": "# Draft", "posts/.obsidian/x.md": "# X", "posts/a.md": "# A\n\nx"})
    assert [d.slug for d in parsed.documents] == ["a"] and parsed.skipped == []


def test_missing_collection_folder_is_reported(write_tree, tmp_path):
    root = write_tree({"posts/a.md": "# A"})
    parsed = parse_collection(root, "journal", "hash")
    assert parsed.documents == []
    assert parsed.skipped == [SkippedFile(path="journal", reason="collection folder does not exist")]


def test_dates_in_frontmatter_become_iso_strings(write_tree):
    [doc] = parse(write_tree, {"posts/d.md": "---\ntitle: D\nupdated: 2026-02-03 04:05:06\n---\ntext"}).documents
    assert isinstance(doc, Document)
    assert doc.frontmatter["updated"] == "2026-02-03T04:05:06"


def test_a_date_that_does_not_exist_skips_its_file_not_the_collection(write_tree):
    """YAML reads `2024-02-30` as a date and Python refuses it (ValueError, not a YAMLError):
    one file is skipped with the reason, the rest is indexed (found by an attack run)."""
    parsed = parse(
        write_tree,
        {
            "posts/bad.md": "---\ntitle: Bad\ndate: 2024-02-30\n---\ntext",
            "posts/good.md": "---\ntitle: Good\ndate: 2024-02-28\n---\ntext",
        },
    )
    assert [d.title for d in parsed.documents] == ["Good"]
    [skipped] = parsed.skipped
    assert skipped.path == "posts/bad.md"
    assert skipped.reason == "invalid YAML frontmatter: day is out of range for month; fix the value"


def test_one_long_string_aliased_many_times_is_refused_before_it_expands(write_tree):
    """Under the value count but not under the size: 9,000 characters referenced 500 times
    would be 4.5 MB in every copy (cache, store, index); the file is skipped, not expanded."""
    aliases = ", ".join(["*s"] * 500)
    content = write_tree({"posts/bomb.md": f'---\ns: &s "{"x" * 9000}"\nl: [{aliases}]\n---\nBody text.\n'})
    parsed = parse_collection(content, "posts", "h")
    assert parsed.documents == []
    assert "characters through YAML aliases" in parsed.skipped[0].reason
