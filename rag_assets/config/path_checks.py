"""Checks on the folders and files ``rag.yaml`` names, before a build reads or writes them.

A vault of ``/`` once made the build walk the whole machine, and ``identity_map: /etc/shadow``
failed with a traceback in the middle of one. So each path is refused here, with the key that
names it: a system folder (``/etc``, ``/usr``... or a folder as broad as ``/`` or ``/home``),
a folder that is a file or a file that is a folder, a vault that holds the build's own
outputs (it would index them; the content folder may, as many sites keep both side by side
in one folder, and a collection of outputs holds no Markdown), and a vault that holds another vault or the content folder
(its notes would be indexed under two tiers).  A vault folder that does not exist is left
to the build, which reports it and keeps the vault's rows (a removable disk may be absent).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from rag_assets.config.schema import Loc
from rag_assets.config.settings import RagConfig

# Folders of the operating system: nothing under them is notes, or a place for outputs.
SYSTEM_TREES = tuple(
    Path(p)
    for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/sbin", "/sys", "/usr")
)
# Folders that hold far more than notes (the whole machine, every user): never read whole.
# Folders inside them (/home/me/notes, /tmp/x, /var/www/site) are fine.
BROAD_FOLDERS = tuple(
    Path(p) for p in ("/", "/home", "/media", "/mnt", "/opt", "/root", "/run", "/srv", "/tmp", "/var")
)
# An identity map is a small JSON file; a larger one is surely the wrong file.
MAX_IDENTITY_MAP_BYTES = 10 << 20


def is_inside(path: Path, folder: Path) -> bool:
    """Is ``path`` the folder itself or somewhere under it (both resolved)?"""
    return path == folder or folder in path.parents


def system_folder_problem(path: Path, *, reading: bool = True) -> str | None:
    """Why ``path`` (resolved) may not be read (``reading``) or written by a build, or None."""
    for tree in SYSTEM_TREES:
        if is_inside(path, tree):
            return f"{path} is in {tree}, a system folder; point it at your own files"
    if path == Path(path.anchor) or (reading and path in BROAD_FOLDERS):
        return f"{path} holds far more than notes (the whole system or every user's files); name the folder that holds them"
    return None


def path_problems(cfg: RagConfig) -> list[tuple[Loc, str]]:
    """Every problem with the paths of ``cfg``, each with the key path that names it."""
    problems: list[tuple[Loc, str]] = []
    loc: Loc  # the key path of each problem, in both loops
    for loc, problem in (
        (("content_dir",), system_folder_problem(cfg.content_dir)),
        (("content_dir",), _not_a_folder(cfg.content_dir)),
        (("output_dir",), system_folder_problem(cfg.output_dir, reading=False)),
    ):
        if problem:
            problems.append((loc, f"{loc[0]}: {problem}"))
    for index, vault in enumerate(cfg.vaults):
        loc = ("vaults", index, "path")
        problem = (
            system_folder_problem(vault.path)
            or _not_a_folder(vault.path)
            or _holds_other_tier(cfg, index)
            or _holds_outputs(vault.path, cfg.output_dir)
        )
        if problem:
            problems.append((loc, f"vault {vault.name!r}: {problem}"))
    if cfg.identity_map_path is not None and cfg.tier_vaults("safe"):  # only the Safe tier reads it
        problem = identity_map_problem(cfg.identity_map_path)
        if problem:
            problems.append((("identity_map",), f"identity_map: {problem}"))
    return problems


def _not_a_folder(path: Path) -> str | None:
    if not path.exists():
        return None  # reported where it matters: an empty collection list, a missing vault
    if not path.is_dir():
        return f"{path} is not a folder"
    if not os.access(path, os.R_OK | os.X_OK):
        return f"{path} cannot be read (permission denied)"
    return None


def _holds_outputs(folder: Path, output_dir: Path) -> str | None:
    if is_inside(output_dir, folder):
        return (
            f"{folder} holds the output folder {output_dir}; the build would index its own outputs: "
            "set output_dir outside it"
        )
    return None


def _holds_other_tier(cfg: RagConfig, index: int) -> str | None:
    """A vault may not hold the content folder or another vault (or share its folder)."""
    own = cfg.vaults[index].path
    if is_inside(cfg.content_dir, own):
        return f"{own} holds the content folder {cfg.content_dir}, whose pages are public; name the vault's own folder"
    for other_index, other in enumerate(cfg.vaults):
        if other_index != index and is_inside(other.path, own):
            return f"{own} holds the folder of vault {other.name!r} ({other.path}); give each vault its own folder"
    return None


def identity_map_problem(path: Path) -> str | None:
    """Why the identity map at ``path`` cannot be read as one, or None (a missing one is
    reported by the loader).  Its rules are checked where they are used, by the privacy layer."""
    problem = system_folder_problem(path)
    if problem or not path.exists():
        return problem
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file; the identity map is a JSON file"
    if info.st_size > MAX_IDENTITY_MAP_BYTES:
        return f"{path} is {info.st_size:,} bytes, more than {MAX_IDENTITY_MAP_BYTES:,}; the identity map is a small JSON file"
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))  # as the privacy layer reads it
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    except UnicodeDecodeError:
        return f"{path} is not UTF-8 text; the identity map is a JSON file"
    except json.JSONDecodeError as exc:
        return f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
    if not isinstance(data, dict):
        return f"{path} must hold a JSON object with a 'rules' list"
    return None
