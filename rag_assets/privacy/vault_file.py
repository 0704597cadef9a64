"""Rewriting rag.yaml's list of vaults: one vault added or removed, validated, written atomically.

The edit itself (comments kept, the new file validated, the vault's folder checked) is
:mod:`rag_assets.config.vault_edit`; this module adds what the config layer may not do:
the write, by a temporary file renamed over rag.yaml (the staged write of
:mod:`rag_assets.base.atomic`, keeping the file's permissions), under a lock (the caller's,
e.g. in the output's data folder; else one beside rag.yaml), so two admins editing at once
never lose each other's vault. Nothing is written when the edit is refused or the write
fails: rag.yaml stays as it was, byte for byte.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from rag_assets.base.atomic import commit_staged, discard_staged, stage_bytes
from rag_assets.base.file_lock import exclusive_lock
from rag_assets.config.settings import RagConfig
from rag_assets.config.vault_edit import VaultEdit, VaultEditRefused, add_vault, remove_vault

__all__ = ["VaultEditRefused", "add_vault_to_file", "remove_vault_from_file"]


def add_vault_to_file(
    config_path: Path,
    *,
    name: str,
    path: str,
    tier: str,
    running: RagConfig | None = None,
    environ: Mapping[str, str] | None = None,
    lock: Path | None = None,
) -> VaultEdit:
    """Append the vault to ``config_path``'s ``vaults:``; VaultEditRefused (file untouched) when refused."""
    with exclusive_lock(lock or _default_lock(config_path)):
        text = _read(config_path)
        edit = add_vault(config_path, text, name=name, path=path, tier=tier, running=running, environ=environ)
        _replace(config_path, edit.text)
    return edit


def remove_vault_from_file(
    config_path: Path, *, name: str, environ: Mapping[str, str] | None = None, lock: Path | None = None
) -> VaultEdit:
    """Drop the vault from ``config_path``'s ``vaults:`` (its notes stay on disk; the next
    ingest of its tier purges its rows); VaultEditRefused (file untouched) when refused."""
    with exclusive_lock(lock or _default_lock(config_path)):
        edit = remove_vault(config_path, _read(config_path), name=name, environ=environ)
        _replace(config_path, edit.text)
    return edit


def _default_lock(config_path: Path) -> Path:
    return config_path.with_name(f".{config_path.name}.lock")


def _read(config_path: Path) -> str:
    try:
        return config_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise VaultEditRefused(f"cannot read {config_path}: {exc.strerror or exc}") from None


def _replace(config_path: Path, text: str) -> None:
    """Write ``text`` over rag.yaml atomically, with the permissions the file had (a private
    rag.yaml stays private); a failed write leaves the old file and is a refusal."""
    try:
        mode = stat.S_IMODE(config_path.stat().st_mode)
        staged = stage_bytes(config_path, text.encode("utf-8"))
        try:
            os.chmod(staged, mode)
            commit_staged(staged, config_path)
        except BaseException:
            discard_staged(staged)
            raise
    except OSError as exc:
        raise VaultEditRefused(f"cannot write {config_path}: {exc.strerror or exc}; it is unchanged") from None
