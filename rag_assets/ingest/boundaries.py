"""Which folders each privacy tier may read: the walk policies of collections and vaults.

A public collection may read the content folder, minus the note vaults (``content/vaults``
and every configured vault path). A vault may read its own folder; a Safe vault never a
Private vault's folder. ``follow_symlinks: true`` widens the boundary to wherever a symlink
leads, but never into those other tiers' folders.
"""

from __future__ import annotations

import os
from pathlib import Path

from rag_assets.config import VAULTS_FOLDER, RagConfig, VaultConfig
from rag_assets.ingest.walker import (
    ForbiddenFolder,
    WalkPolicy,
    folder_problem,
    is_within,
)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def public_forbidden(cfg: RagConfig) -> tuple[ForbiddenFolder, ...]:
    """The folders no public collection may read: every vault, configured or merely present."""
    vaults_folder = ForbiddenFolder(_real(cfg.content_dir / VAULTS_FOLDER), "the note vaults folder")
    configured = tuple(ForbiddenFolder(_real(v.path), f"the note vault {v.name!r}") for v in cfg.vaults)
    return (vaults_folder, *configured)


def collection_policy(cfg: RagConfig) -> WalkPolicy:
    return WalkPolicy(
        boundary=_real(cfg.content_dir),
        boundary_label="the content folder",
        forbidden=public_forbidden(cfg),
        follow_symlinks=cfg.follow_symlinks,
        max_file_bytes=cfg.max_file_bytes,
        outputs=output_folders(cfg),
    )


def output_folders(cfg: RagConfig) -> tuple[str, ...]:
    """The folders a build writes (resolved), never walked as content."""
    return (str(_real(cfg.data_dir)), str(_real(cfg.public_dir)))


def vault_policy(cfg: RagConfig, vault: VaultConfig) -> WalkPolicy:
    """A vault reads its own folder; a Safe vault never a Private one (the Private tier holds
    every vault, so a Private vault has no such limit)."""
    forbidden: tuple[ForbiddenFolder, ...] = ()
    if vault.tier == "safe":
        own = _real(vault.path)
        forbidden = tuple(
            ForbiddenFolder(_real(v.path), f"the Private vault {v.name!r}")
            for v in cfg.vaults
            # A private vault that contains this one would forbid the vault itself.
            if v.tier == "private" and not is_within(own, _real(v.path))
        )
    return WalkPolicy(
        boundary=_real(vault.path),
        boundary_label="the vault's folder",
        forbidden=forbidden,
        follow_symlinks=cfg.follow_symlinks,
        max_file_bytes=cfg.max_file_bytes,
        excluded_folders=vault_excluded_folders(vault),
        excluded_suffixes=OBSIDIAN_NON_NOTES,
    )


# Obsidian files that are views over the notes, not notes: never read, reported.
OBSIDIAN_NON_NOTES = (
    (".base", "Obsidian Bases file (a table view over the vault's notes, not a note); not indexed"),
    (".canvas", "Obsidian canvas (JSON cards and arrows, not a note); not indexed"),
)


def vault_excluded_folders(vault: VaultConfig) -> tuple[tuple[str, str], ...]:
    """The vault's templates folder (``templates_folder``): templates hold placeholders, not notes."""
    if not vault.templates_folder:
        return ()
    return (
        (
            vault.templates_folder,
            f"the vault's templates folder (templates_folder: {vault.templates_folder}): note templates, "
            "not notes; never read (set templates_folder: null to index it)",
        ),
    )


def collection_name_problem(cfg: RagConfig, name: str) -> str | None:
    """Why a configured or discovered collection name may not be indexed publicly, or None.

    A name is one folder of the content folder: a path (``/``, ``..``) is refused, and the
    folder, once symlinks are resolved, must pass the public policy.
    """
    if "/" in name or "\\" in name or name in (".", ".."):
        return "a collection is one folder directly in the content folder, not a path; use the folder's name"
    if name == VAULTS_FOLDER:
        return "note vault folder (indexed by the vault tiers, never public)"
    return folder_problem(os.path.realpath(cfg.content_dir / name), collection_policy(cfg))
