"""Adding a vault to rag.yaml or removing one, as text in and text out (no file is written here).

The edit is a ruamel.yaml round trip, so the file's comments, key order and flow style stay
as they were; the result goes through the same validation as :func:`load_config`
(:func:`config_from_text`) before anyone may write it. A vault the admin console adds must also
lie under an allowed root (rag.yaml's folder, or a folder of ``serve.admin_vault_roots``) and
away from what other tiers or the build own: the content folder (Public), the output folders
and every other vault. Each refusal is a :class:`VaultEditRefused` that says why.
"""

from __future__ import annotations

import io
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from rag_assets.config.errors import ConfigError
from rag_assets.config.loading import config_from_text
from rag_assets.config.settings import RagConfig

VAULT_TIERS = ("safe", "private")


class VaultEditRefused(ValueError):
    """The edit is refused; the message says why and what to do instead (rag.yaml is unchanged)."""


@dataclass(frozen=True)
class VaultEdit:
    """A would-be rag.yaml: its text and the configuration it gives (already validated)."""

    text: str
    cfg: RagConfig
    vault: str
    action: str  # add | remove


def add_vault(
    config_path: Path,
    text: str,
    *,
    name: str,
    path: str,
    tier: str,
    running: RagConfig | None = None,
    environ: Mapping[str, str] | None = None,
) -> VaultEdit:
    """``text`` (rag.yaml as it is) with the vault appended to ``vaults:``, validated and checked
    against the allowed roots and the folders the vault may not overlap. ``running``: the
    server's configuration, whose folders (set perhaps by overrides) are refused too."""
    check_vault_name(name)
    if tier not in VAULT_TIERS:
        raise VaultEditRefused(f"tier must be one of {', '.join(VAULT_TIERS)} (got {tier!r})")
    if not path.strip():
        raise VaultEditRefused("give the vault's folder (a path relative to rag.yaml's folder, or absolute)")
    if has_control_character(path):  # a NUL byte would fail deep in the path functions
        raise VaultEditRefused("the vault's path may not contain a control character (a NUL byte, a newline, ...)")
    current = _validated(config_path, text, environ, "the current rag.yaml does not validate; fix it first")
    if any(v.name == name for v in current.vaults):
        raise VaultEditRefused(f"a vault named {name!r} exists already; pick another name or remove it first")
    # Checked before the would-be file is validated, so the refusal names the console's rule.
    check_vault_folder(_resolved(config_path, path), current, running, name=name)
    yaml, document = _load(text)
    entry = CommentedMap([("name", name), ("path", path), ("tier", tier)])
    entry.fa.set_flow_style()  # one line per vault, as rag.yaml writes them
    vaults = document.get("vaults")
    if vaults is None:
        document["vaults"] = CommentedSeq([entry])
    else:
        vaults.append(entry)
    new_text = _dump(yaml, document)
    cfg = _validated(config_path, new_text, environ, "rag.yaml would not validate with this vault")
    added = next(v for v in cfg.vaults if v.name == name)
    check_vault_folder(added.path, cfg, running, name=name)
    return VaultEdit(new_text, cfg, name, "add")


def remove_vault(config_path: Path, text: str, *, name: str, environ: Mapping[str, str] | None = None) -> VaultEdit:
    """``text`` without the vault named ``name``, validated (its notes stay on disk)."""
    check_vault_name(name)
    yaml, document = _load(text)
    vaults = document.get("vaults") or []
    index = next((i for i, v in enumerate(vaults) if isinstance(v, Mapping) and str(v.get("name")) == name), None)
    if index is None:
        known = ", ".join(str(v.get("name")) for v in vaults if isinstance(v, Mapping)) or "none"
        raise VaultEditRefused(f"no vault named {name!r} in rag.yaml (vaults: {known})")
    del vaults[index]
    if not vaults and isinstance(vaults, CommentedSeq):  # it had the vault: rag.yaml's own list
        _keep_end_comments(document, vaults)
    new_text = _dump(yaml, document)
    cfg = _validated(config_path, new_text, environ, "rag.yaml would not validate without this vault")
    return VaultEdit(new_text, cfg, name, "remove")


def _resolved(config_path: Path, path: str) -> Path:
    """``path`` as rag.yaml's loader resolves it: ``~`` expanded, relative to the file's folder."""
    folder = Path(os.path.expanduser(path))
    return (folder if folder.is_absolute() else config_path.parent / folder).resolve()


def check_vault_name(name: str) -> None:
    """A vault name is one plain folder-like word: no path separators, no ``..``."""
    if not name or not name.strip():
        raise VaultEditRefused("give the vault a name")
    if "/" in name or "\\" in name or ".." in name:
        raise VaultEditRefused(
            f"vault name {name!r} may not contain '/', '\\' or '..'; use a plain name such as 'notes'"
        )
    if has_control_character(name):
        raise VaultEditRefused(
            f"vault name {name!r} may not contain a control character; use a plain name such as 'notes'"
        )


def has_control_character(text: str) -> bool:
    """Whether ``text`` holds a control character (NUL, newline, tab, escape, ...)."""
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def allowed_roots(cfg: RagConfig) -> list[Path]:
    """rag.yaml's folder and below, plus ``serve.admin_vault_roots``."""
    roots = list(cfg.serve.admin_vault_roots)
    if cfg.config_path is not None:
        roots.insert(0, cfg.config_path.parent.resolve())
    return roots


def check_vault_folder(folder: Path, cfg: RagConfig, running: RagConfig | None = None, *, name: str = "") -> None:
    """Refuse the folder of vault ``name`` when it is missing, outside the allowed roots, or
    overlaps a folder another tier or the build owns (either inside it or holding it)."""
    real = Path(os.path.realpath(folder))
    if not real.is_dir():
        raise VaultEditRefused(f"vault folder {folder} does not exist or is not a folder; create it first")
    roots = allowed_roots(cfg)
    if not any(_within(real, root) for root in roots):
        listed = ", ".join(str(r) for r in roots) or "none"
        raise VaultEditRefused(
            f"vault folder {real} is outside the allowed roots ({listed}); move it there or add its parent to "
            "serve.admin_vault_roots in rag.yaml"
        )
    for label, other in _owned_folders(cfg, running, exclude=name):
        if _within(real, other) or _within(other, real):
            raise VaultEditRefused(f"vault folder {real} overlaps {label} ({other}); pick a folder of its own")


def _owned_folders(cfg: RagConfig, running: RagConfig | None, exclude: str) -> Iterable[tuple[str, Path]]:
    """(what, folder) of every folder a vault may not overlap; ``exclude``: the vault's own name."""
    for c in (cfg, running) if running is not None else (cfg,):
        yield "the content folder (the Public tier)", c.content_dir
        yield "the output's data folder", c.data_dir
        yield "the output's public folder", c.public_dir
        if c.config_path is None or not _within(c.config_path.parent.resolve(), c.output_dir.resolve()):
            yield "the output folder", c.output_dir  # one apart from rag.yaml's folder: all of it is output
        for vault in c.vaults:
            if vault.name != exclude:
                yield f"the {vault.tier} vault {vault.name!r}", vault.path


def _within(path: Path, folder: Path) -> bool:
    real_folder = Path(os.path.realpath(folder))
    return path == real_folder or real_folder in path.parents


def _validated(config_path: Path, text: str, environ: Mapping[str, str] | None, what: str) -> RagConfig:
    try:
        return config_from_text(config_path, text, environ)
    except ConfigError as exc:
        raise VaultEditRefused(f"{what}: {exc}") from None


def _load(text: str) -> tuple[YAML, CommentedMap]:
    yaml = YAML()  # round trip: comments, order and styles kept
    yaml.preserve_quotes = True
    offset = _sequence_offset(text)
    yaml.indent(mapping=2, sequence=offset + 2, offset=offset)
    try:
        document = yaml.load(text)
    except YAMLError as exc:
        raise VaultEditRefused(f"rag.yaml is not valid YAML: {exc}") from None
    if document is None:
        document = CommentedMap()
    if not isinstance(document, CommentedMap):
        raise VaultEditRefused("rag.yaml must hold a mapping of settings")
    vaults = document.get("vaults")
    if vaults is not None and not isinstance(vaults, CommentedSeq):
        raise VaultEditRefused("vaults in rag.yaml must be a list; fix it by hand first")
    return yaml, document


def _keep_end_comments(document: CommentedMap, vaults: CommentedSeq) -> None:
    """An emptied list is written ``vaults: []``, which drops the comments ruamel keeps after its
    last item (the comment that opens the next setting): move them before the next key."""
    lines = "".join(token.value for token in vaults.ca.end or () if token is not None).splitlines()
    keys = list(document.keys())
    following = keys[keys.index("vaults") + 1 :]
    if not lines or not following:
        return
    vaults.ca.end = []
    text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in lines)
    document.yaml_set_comment_before_after_key(following[0], before=text)


def _sequence_offset(text: str) -> int:
    """How far the file indents a block list's dashes under their key (rag.yaml: 2), so the
    rewritten lists keep the file's look."""
    match = re.search(r"^[\w-]+:[ \t]*(?:#.*)?\n(?:[ \t]*#.*\n)*( *)- ", text, re.MULTILINE)
    return len(match.group(1)) if match else 2


def _dump(yaml: YAML, document: CommentedMap) -> str:
    out = io.StringIO()
    yaml.dump(document, out)
    return out.getvalue()
