"""Which top-level folders of the content folder are collections, and why others are not."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rag_assets.config import (
    VAULTS_FOLDER,
    RagConfig,
    VaultConfig,
    invalid_collection_reason,
    shard_mark_problem,
)
from rag_assets.ingest.boundaries import collection_name_problem, output_folders
from rag_assets.ingest.walker import is_within, readable_name


def holds_configured_vault(folder: Path, vaults: tuple[VaultConfig, ...]) -> bool:
    """True when the folder is a vault or contains one (vaults never enter the public index)."""
    folder = folder.resolve()
    return any(v.path == folder or folder in v.path.parents for v in vaults)


VAULT_FOLDER_REASON = "note vault (indexed by the vault tiers, never public)"


def output_folder_reason(cfg: RagConfig, folder: Path) -> str | None:
    """Why a top-level content folder cannot be a collection because it is where builds write:
    the output folder itself, or its ``data/`` or ``public/`` (an output folder that is the
    content folder). Its files change with every build, so the index would hold its own
    outputs and never match the content. Deeper in a collection, the walk passes over the
    written folders (:attr:`rag_assets.ingest.walker.WalkPolicy.outputs`). None for any other folder."""
    real = os.path.realpath(folder)
    if real == os.path.realpath(cfg.output_dir) or any(is_within(real, out) for out in output_folders(cfg)):
        return f"it is where builds write (output_dir {cfg.output_dir}): its files change with every build, so it is never content"
    return None


@dataclass(frozen=True)
class CollectionDiscovery:
    """The collections to index, and the folders left out with a reason."""

    collections: tuple[str, ...]
    excluded: tuple[tuple[str, str], ...]  # (folder, reason)
    missing: tuple[str, ...]  # configured collections with no folder
    loose_files: tuple[str, ...] = ()  # files directly in the content dir, outside any collection


def holds_only_vaults(cfg: RagConfig) -> bool:
    """True when the content folder has vaults but no collection: nothing public to index, so
    there is no public store to search, and no build would make one."""
    return bool(cfg.vaults) and not discover_collections(cfg).collections


def only_vaults_message(cfg: RagConfig) -> str:
    """What to tell someone who asks the public tier of a folder of vaults only."""
    return (
        f"No public index: {cfg.content_dir} holds no collections, only vaults; "
        "their notes are in the Safe and Private stores (`rag search QUERY --tier safe`)."
    )


def discover_collections(cfg: RagConfig) -> CollectionDiscovery:
    """The top-level folders of the content dir that form collections.

    Hidden folders and folders that are (or hold) configured vaults are left out, and so
    is a folder that is a symlink out of the content folder (or into a vault; see
    :mod:`rag_assets.ingest.boundaries`). When the config lists collections explicitly, only
    those are used; a listed collection whose folder is missing is reported, not fatal,
    so that the other collections still build, but a listed name that is a path or a
    folder discovery excludes is excluded with its reason.
    """
    excluded: list[tuple[str, str]] = []
    found: list[str] = []
    loose: list[str] = []
    if cfg.content_dir.is_dir():
        for entry in sorted(cfg.content_dir.iterdir(), key=lambda p: p.name):
            if not entry.is_dir():
                if entry.is_file() and not entry.name.startswith("."):
                    loose.append(readable_name(entry.name))
                continue
            if entry.name.startswith("."):
                continue
            if entry.name == VAULTS_FOLDER or holds_configured_vault(entry, cfg.vaults):
                excluded.append((entry.name, VAULT_FOLDER_REASON))
                continue
            reason = (
                output_folder_reason(cfg, entry)
                or invalid_collection_reason(entry.name)
                or shard_mark_problem(entry.name)
                or collection_name_problem(cfg, entry.name)
            )
            if reason:
                excluded.append((readable_name(entry.name), reason))
                continue
            found.append(entry.name)
    if cfg.collections is None:
        return CollectionDiscovery(tuple(found), tuple(excluded), (), tuple(loose))
    # A listed collection whose folder is missing stays a partition: its run reports the
    # missing folder in the UI instead of the collection silently vanishing.
    listed = []
    refused = dict(excluded)
    for name in cfg.collections:
        reason = (
            output_folder_reason(cfg, cfg.content_dir / name)
            or invalid_collection_reason(name)
            or shard_mark_problem(name)
            or refused.get(name)
            or collection_name_problem(cfg, name)
        )
        if reason:
            if name not in refused:
                excluded.append((name, reason))
        elif name not in listed:
            listed.append(name)
    missing = tuple(c for c in listed if c not in found)
    return CollectionDiscovery(tuple(listed), tuple(excluded), missing, tuple(loose))
