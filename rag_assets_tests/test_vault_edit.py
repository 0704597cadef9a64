"""rag.yaml's vaults edited by the admin console: comments kept, validated, written atomically,
and every refusal leaving the file as it was, byte for byte (rag_assets.config.vault_edit,
rag_assets.privacy.vault_file)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rag_assets.config import load_config
from rag_assets.config.vault_edit import VaultEditRefused
from rag_assets.privacy.vault_file import add_vault_to_file, remove_vault_from_file

RAG_YAML = """\
# My notes. Paths are relative to this file.
content_dir: content
output_dir: out

# Note vaults: keep this comment.
vaults:
  - {name: lab, path: vaults/lab, tier: safe}   # the homelab notes
  - {name: me, path: vaults/me, tier: private}

# Identifying values: this comment opens the next setting.
identity_map: identity_map.json

automation:
  nightly_cron: "0 3 * * *"   # quoted, and stays quoted
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    for folder in ("content/docs", "vaults/lab", "vaults/me", "vaults/new", "out/data", "elsewhere/notes"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "identity_map.json").write_text(json.dumps({"version": 1, "salt": "t", "rules": []}), encoding="utf-8")
    (tmp_path / "rag.yaml").write_text(RAG_YAML, encoding="utf-8")
    return tmp_path / "rag.yaml"


def added_lines(before: str, after: str) -> list[str]:
    return [line for line in after.splitlines() if line not in before.splitlines()]


def test_adding_a_vault_appends_one_line_and_keeps_every_comment(site):
    edit = add_vault_to_file(site, name="new", path="vaults/new", tier="safe", environ={})
    after = site.read_text(encoding="utf-8")
    assert added_lines(RAG_YAML, after) == ["  - {name: new, path: vaults/new, tier: safe}"]
    assert [line for line in RAG_YAML.splitlines() if line not in after.splitlines()] == []  # nothing lost
    cfg = load_config(site, environ={})
    assert [(v.name, v.tier) for v in cfg.vaults] == [("lab", "safe"), ("me", "private"), ("new", "safe")]
    assert cfg.tier_vaults("safe")[-1].path == site.parent / "vaults" / "new"
    assert edit.action == "add" and [v.name for v in edit.cfg.vaults] == ["lab", "me", "new"]


def test_removing_vaults_keeps_the_comments_around_them(site):
    remove_vault_from_file(site, name="lab", environ={})
    assert "lab" not in [v.name for v in load_config(site, environ={}).vaults]
    remove_vault_from_file(site, name="me", environ={})  # the list is empty now: `vaults: []`
    after = site.read_text(encoding="utf-8")
    assert load_config(site, environ={}).vaults == ()
    for comment in (
        "# Note vaults: keep this comment.",
        "# Identifying values: this comment opens the next setting.",
        "# My notes. Paths are relative to this file.",
        '  nightly_cron: "0 3 * * *"   # quoted, and stays quoted',
    ):
        assert comment in after.splitlines()
    # Added again after the emptying: a vault list that works as before.
    add_vault_to_file(site, name="lab", path="vaults/lab", tier="safe", environ={})
    assert [v.name for v in load_config(site, environ={}).vaults] == ["lab"]


def test_a_file_without_vaults_gets_the_list(site):
    site.write_text("content_dir: content\noutput_dir: out\n", encoding="utf-8")
    add_vault_to_file(site, name="me", path="vaults/me", tier="private", environ={})
    assert [v.name for v in load_config(site, environ={}).vaults] == ["me"]


REFUSALS = {
    "a name with a slash": (dict(name="a/b", path="vaults/new", tier="safe"), "may not contain"),
    "a name with ..": (dict(name="..", path="vaults/new", tier="safe"), "may not contain"),
    "the public tier": (dict(name="new", path="vaults/new", tier="public"), "tier must be one of safe, private"),
    "a folder outside the allowed roots": (
        dict(name="new", path="{outside}", tier="safe"),
        "outside the allowed roots",
    ),
    "a folder that does not exist": (dict(name="new", path="vaults/nope", tier="safe"), "does not exist"),
    "inside the content folder": (dict(name="new", path="content/docs", tier="safe"), "overlaps the content folder"),
    "inside the output folder": (dict(name="new", path="out/data", tier="private"), "overlaps the output"),
    "inside another tier's vault": (dict(name="new", path="vaults/me", tier="safe"), "overlaps the private vault 'me'"),
    "a folder holding another vault": (
        dict(name="new", path="vaults", tier="private"),
        "overlaps the safe vault 'lab'",
    ),
    "a name taken": (dict(name="lab", path="vaults/new", tier="safe"), "exists already"),
    "a path reaching out with ..": (dict(name="new", path="../", tier="safe"), "outside the allowed roots"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_vault_leaves_rag_yaml_byte_for_byte(site, tmp_path_factory, case):
    kwargs, reason = REFUSALS[case]
    outside = tmp_path_factory.mktemp("outside")
    kwargs = {k: v.format(outside=outside) for k, v in kwargs.items()}
    before = site.read_bytes()
    with pytest.raises(VaultEditRefused, match=reason):
        add_vault_to_file(site, environ={}, **kwargs)
    assert site.read_bytes() == before
    assert [p.name for p in site.parent.iterdir() if p.name.endswith(".tmp")] == []  # no temporary file left


def test_a_write_that_would_not_validate_is_refused_and_changes_nothing(site):
    # The first Safe vault needs the identity map: without it the new rag.yaml does not validate.
    site.write_text(
        RAG_YAML.replace("  - {name: lab, path: vaults/lab, tier: safe}   # the homelab notes\n", ""), encoding="utf-8"
    )
    (site.parent / "identity_map.json").unlink()
    before = site.read_bytes()
    with pytest.raises(VaultEditRefused, match="would not validate with this vault.*identity map"):
        add_vault_to_file(site, name="lab", path="vaults/lab", tier="safe", environ={})
    assert site.read_bytes() == before


def test_removing_an_unknown_vault_is_refused_and_changes_nothing(site):
    before = site.read_bytes()
    with pytest.raises(VaultEditRefused, match=r"no vault named 'nope' in rag.yaml \(vaults: lab, me\)"):
        remove_vault_from_file(site, name="nope", environ={})
    with pytest.raises(VaultEditRefused, match="may not contain"):
        remove_vault_from_file(site, name="../lab", environ={})
    assert site.read_bytes() == before


def test_a_broken_rag_yaml_is_not_touched(site):
    broken = RAG_YAML.replace("output_dir: out", "output_dir: out\nembeder: hashing")
    site.write_text(broken, encoding="utf-8")
    with pytest.raises(VaultEditRefused, match="current rag.yaml does not validate.*embeder"):
        add_vault_to_file(site, name="new", path="vaults/new", tier="safe", environ={})
    assert site.read_text(encoding="utf-8") == broken


def test_serve_admin_vault_roots_allow_a_folder_elsewhere(site, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("roots")
    (elsewhere / "notes").mkdir()
    with pytest.raises(VaultEditRefused, match="outside the allowed roots"):
        add_vault_to_file(site, name="far", path=str(elsewhere / "notes"), tier="private", environ={})
    site.write_text(RAG_YAML + f"serve:\n  admin_vault_roots: [{elsewhere}]\n", encoding="utf-8")
    add_vault_to_file(site, name="far", path=str(elsewhere / "notes"), tier="private", environ={})
    cfg = load_config(site, environ={})
    assert cfg.vaults[-1].path == elsewhere / "notes" and cfg.serve.admin_vault_roots == (elsewhere,)


def test_a_symlink_inside_the_root_to_a_folder_outside_is_refused(site, tmp_path_factory):
    outside = tmp_path_factory.mktemp("linked")
    os.symlink(outside, site.parent / "vaults" / "link")
    before = site.read_bytes()
    with pytest.raises(VaultEditRefused, match="outside the allowed roots"):
        add_vault_to_file(site, name="link", path="vaults/link", tier="private", environ={})
    assert site.read_bytes() == before


def test_the_rewritten_file_keeps_its_permissions(site):
    site.chmod(0o600)  # a private rag.yaml stays private
    add_vault_to_file(site, name="new", path="vaults/new", tier="safe", environ={})
    assert site.stat().st_mode & 0o777 == 0o600
    remove_vault_from_file(site, name="new", environ={})
    assert site.stat().st_mode & 0o777 == 0o600
