"""A small site built for real for the admin console's tests: Public content, a Safe vault
(with an Obsidian settings folder and a trash folder the counts must skip) and a Private
vault, built once per test module; each test works on a copy of it, so the rag.yaml edits and
ingests of one test never reach another."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rag_assets.config import RagConfig, load_config
from rag_assets.defs.runner import run_build

from .conftest import instance_for_test

FILLER = "Ordinary prose about the homelab, long enough to make a chunk of a realistic size. " * 12

CONTENT = {
    "content/docs/zigbee.md": f"# Zigbee coordinator\n\n## Flashing\n\nFlash the coordinator with cc2538-bsl.\n{FILLER}\n",
    "content/posts/proxmox.md": f"# Proxmox\n\n## Network\n\nMake the bridge vlan-aware.\n{FILLER}\n",
    "vaults/lab/restore-vm.md": f"# Restore a VM\n\nRestore it with qmrestore from the nightly backup.\n{FILLER}\n",
    "vaults/lab/dns.md": f"# DNS\n\nThe resolver forwards to the ISP.\n{FILLER}\n",
    "vaults/lab/.obsidian/workspace.md": "# not a note\n",
    "vaults/lab/.trash/old.md": "# deleted note\n",
    "vaults/lab/image.png": "not markdown",
    "vaults/me/garden.md": f"# Garden\n\nPlanted tomatoes along the fence.\n{FILLER}\n",
    "vaults/new/one.md": f"# One\n\nThe first note of the new vault about the boiler.\n{FILLER}\n",
    "vaults/new/two.md": f"# Two\n\nThe second note of the new vault.\n{FILLER}\n",
    "vaults/new/sub/three.md": f"# Three\n\nA note in a subfolder.\n{FILLER}\n",
    "vaults/new/.obsidian/app.md": "# settings, not a note\n",
}

RAG_YAML = """\
# The admin tests' configuration; this comment must survive every edit.
content_dir: content
output_dir: out

# Note vaults.
vaults:
  - {name: lab, path: vaults/lab, tier: safe}
  - {name: me, path: vaults/me, tier: private}

identity_map: identity_map.json
"""
# Planted in a stored Safe chunk for the leak audit (a format the detector knows, not a real key).
PLANTED_KEY = "AKIAQ7RT2LPX9WMB4KDN"


def build_admin_site(root: Path) -> None:
    for rel, text in CONTENT.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "identity_map.json").write_text(json.dumps({"version": 1, "salt": "test", "rules": []}), encoding="utf-8")
    (root / "rag.yaml").write_text(RAG_YAML, encoding="utf-8")
    with instance_for_test() as instance:
        outcome = run_build(site_config(root), instance)
    assert outcome.success, outcome.error or outcome.failed_checks


def site_config(root: Path) -> RagConfig:
    return load_config(root / "rag.yaml", embedder="hashing", private_embedder="hashing", environ={})


def copy_site(built: Path, dest: Path) -> RagConfig:
    """A copy of the built site (links kept: data/current is relative) and its configuration."""
    shutil.copytree(built, dest, symlinks=True)
    return site_config(dest)


def dagster_home(folder: Path) -> Path:
    """An empty instance folder for DAGSTER_HOME (runs in SQLite under it)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dagster.yaml").write_text("", encoding="utf-8")
    return folder
