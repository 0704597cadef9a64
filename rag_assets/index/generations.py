"""Published generations: each build's public outputs in a folder of their own, made current
by one atomic symlink swap, so that a reader never sees outputs of two builds side by side.

Layout under the output folder::

    data/generations/<id>/embeddings-index.json   the files of one build (one folder a build)
                          embeddings-meta.json     (names its generation and the index's digest)
                          rag-manifest.json
                          rag-store-public.db -> ../../stores/rag-store-public.<k>.db  (its slot)
    data/stores/rag-store-public.{0,1,2}.db        the rotating store slots (rag_assets.index.store_slots)
    data/current -> generations/<id>               swapped by one rename at the end of a publish
    public/embeddings-index.json -> ../data/current/embeddings-index.json     fixed links: the
    public/embeddings-meta.json  -> ../data/current/embeddings-meta.json      published paths stay
    public/embeddings-bm25.json, rag-search.js, rag-vectors.js, search.html -> ../data/current/...  (the browser search)
    public/embeddings-vectors.bin -> ../data/current/...   (only while the current build has one: int16-bin)
    data/rag-manifest.json       -> current/rag-manifest.json                 stable for static
    data/rag-store-public.db     -> current/rag-store-public.db               hosting and readers

A build writes a whole new generation (its store is the slot no generation on disk names,
synced by diff, never a copy of the current store), syncs it, and only then swaps
``data/current``. A kill before the swap
leaves the previous generation current and whole; a kill after it, the new one. The next
publish removes unfinished generations and all but the previous one (kept so that a reader
that resolved the old generation a moment before the swap can finish reading it).

A reader that reads several outputs resolves the generation once (:func:`published`) and
reads every file from that folder.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rag_assets.base.file_lock import exclusive_lock
from rag_assets.config import RagConfig

INDEX_NAME = "embeddings-index.json"
META_NAME = "embeddings-meta.json"
MANIFEST_NAME = "rag-manifest.json"
STORE_NAME = "rag-store-public.db"
GENERATIONS_FOLDER = "generations"
CURRENT_LINK = "current"
LOCK_NAME = "publish.lock"
# The browser search (rag_assets.index.browser): published beside the index in every generation,
# so the script, its BM25 data and the index always come from one build.
BROWSER_NAMES = ("rag-search.js", "rag-vectors.js", "search.html")
# The index's segment files (rag_assets.index.segments) are shared by the generations that name
# them: public/segments links to data/segments itself, not through data/current.
SEGMENTS_NAME = "segments"
# Published by older versions, gone from the layout: their public/ links are removed.
RETIRED_NAMES = ("embeddings-bm25.json", "embeddings-vectors.bin")
# Written only by some builds (embeddings-vectors.bin: vector_encoding int16-bin, see
# rag_assets.index.vector_file), so linked from public/ only while the current generation has
# them: a link to nothing would break a copy with links followed (cp -rL, shutil.copytree).
OPTIONAL_NAMES: tuple[str, ...] = ()


@dataclass(frozen=True)
class Generation:
    """The files of one published build (or of the single-folder layout of older versions)."""

    id: str | None
    index_path: Path
    meta_path: Path
    manifest_path: Path
    store_path: Path

    @classmethod
    def in_folder(cls, folder: Path) -> Generation:
        return cls(
            id=folder.name,
            index_path=folder / INDEX_NAME,
            meta_path=folder / META_NAME,
            manifest_path=folder / MANIFEST_NAME,
            store_path=folder / STORE_NAME,
        )

    @property
    def folder(self) -> Path:
        return self.index_path.parent


def generations_dir(cfg: RagConfig) -> Path:
    return cfg.data_dir / GENERATIONS_FOLDER


def current_link(cfg: RagConfig) -> Path:
    return cfg.data_dir / CURRENT_LINK


def published(cfg: RagConfig) -> Generation:
    """The generation readers see now, resolved once; the paths of the older single-folder
    layout when no generation was published yet."""
    link = current_link(cfg)
    try:
        target = os.readlink(link)
    except OSError:
        return Generation(None, cfg.index_path, cfg.meta_path, cfg.manifest_path, cfg.public_store_path)
    return Generation.in_folder((link.parent / target).resolve())


def new_generation_id(built_at: str) -> str:
    """Sortable by time, unique within a second."""
    stamp = "".join(ch for ch in built_at if ch.isalnum())
    return f"{stamp}-{secrets.token_hex(3)}"


@contextlib.contextmanager
def publish_lock(cfg: RagConfig) -> Iterator[None]:
    """One publisher at a time (a CLI build and a `dagster dev` run could otherwise meet)."""
    with exclusive_lock(cfg.data_dir / LOCK_NAME):
        yield


def next_generation_id(cfg: RagConfig, built_at: str) -> str:
    """A new generation ID that sorts after every generation folder on disk. The previous
    generation is found by that order (:func:`remove_old_generations`), and its store slot
    must not be taken while readers may use it: two publishes within one second (whose random
    parts may sort either way) or a clock set back must still sort in publish order."""
    gen_id = new_generation_id(built_at)
    folder = generations_dir(cfg)
    latest = max((p.name for p in folder.iterdir()), default="") if folder.is_dir() else ""
    if gen_id > latest:
        return gen_id
    stamp, _, token = latest.rpartition("-")
    try:
        return f"{stamp}-{int(token, 16) + 1:06x}"
    except ValueError:
        return f"{latest}-{secrets.token_hex(3)}"


def start_generation(cfg: RagConfig, built_at: str) -> Generation:
    """A new, empty generation folder (not current until :func:`make_current`)."""
    folder = generations_dir(cfg) / next_generation_id(cfg, built_at)
    folder.mkdir(parents=True)
    return Generation.in_folder(folder)


def make_current(cfg: RagConfig, generation: Generation) -> None:
    """Make ``generation`` what every reader sees, in one atomic rename; then make sure the
    fixed links point through ``data/current`` and remove what earlier publishes left."""
    _fsync_tree(generation.folder)
    previous = published(cfg).id
    # Before the swap, so the link is there when the new sidecar names the file.
    _link_optional_files(cfg, generation)
    link = current_link(cfg)
    _move_aside_if_not_a_link(link)
    tmp = link.with_name(f".{CURRENT_LINK}.{secrets.token_hex(4)}.tmp")
    os.symlink(os.path.join(GENERATIONS_FOLDER, generation.folder.name), tmp)
    os.replace(tmp, link)
    _fsync_dir(link.parent)
    _ensure_fixed_links(cfg)
    _unlink_absent_optional_files(cfg, generation)
    remove_old_generations(cfg, previous=previous)


def _move_aside_if_not_a_link(link: Path) -> None:
    """An output folder copied with its links dereferenced (``cp -rL``, ``shutil.copytree``)
    holds a real folder where ``data/current`` should be a link: readers then use the copied
    files (the older single-folder paths), and the swap needs the name back."""
    if link.is_symlink() or not link.exists():
        return
    aside = link.with_name(f".{CURRENT_LINK}.copied.{secrets.token_hex(4)}.tmp")
    os.replace(link, aside)
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink()


def fixed_links(cfg: RagConfig) -> dict[Path, str]:
    """Published path -> the relative link target through ``data/current``."""
    current = current_link(cfg)
    links = {
        path: os.path.relpath(current / name, path.parent)
        for path, name in (
            (cfg.index_path, INDEX_NAME),
            (cfg.meta_path, META_NAME),
            (cfg.manifest_path, MANIFEST_NAME),
            (cfg.public_store_path, STORE_NAME),
            *((cfg.public_dir / name, name) for name in BROWSER_NAMES),
        )
    }
    links[cfg.public_dir / SEGMENTS_NAME] = os.path.relpath(cfg.data_dir / SEGMENTS_NAME, cfg.public_dir)
    return links


def expected_links(cfg: RagConfig, generation: Generation) -> dict[Path, str]:
    """Every link a publish of ``generation`` leaves, with its relative target: ``data/current``,
    the fixed links and the optional files' links (those ``generation`` has)."""
    links = {current_link(cfg): os.path.join(GENERATIONS_FOLDER, generation.folder.name), **fixed_links(cfg)}
    for name in OPTIONAL_NAMES:
        if (generation.folder / name).is_file():
            path = cfg.public_dir / name
            links[path] = os.path.relpath(current_link(cfg) / name, path.parent)
    return links


def stray_links(cfg: RagConfig, generation: Generation) -> list[Path]:
    """The public/ links of optional files that ``generation`` does not have, and of files
    older versions published (dangling)."""
    return [
        cfg.public_dir / name
        for name in (*OPTIONAL_NAMES, *RETIRED_NAMES)
        if (cfg.public_dir / name).is_symlink() and not (generation.folder / name).is_file()
    ]


def candidates(cfg: RagConfig) -> list[Generation]:
    """The generation folders on disk, newest first (the current one, the previous one, and
    any a killed publish left)."""
    folder = generations_dir(cfg)
    if not folder.is_dir():
        return []
    return [Generation.in_folder(p) for p in sorted(folder.iterdir(), reverse=True) if p.is_dir()]


def relink_current(cfg: RagConfig, generation: Generation) -> None:
    """Point a lost ``data/current`` at ``generation`` again, in one rename."""
    _ensure_link(current_link(cfg), os.path.join(GENERATIONS_FOLDER, generation.folder.name))


def restore_links(cfg: RagConfig, generation: Generation) -> list[Path]:
    """Put back the links of the current ``generation`` that are missing or point elsewhere
    (not ``data/current``, which names the generation: a republish swaps it) and remove stray
    ones, each in one rename; the links changed."""
    changed = []
    for path, target in expected_links(cfg, generation).items():
        if path != current_link(cfg) and not (path.is_symlink() and os.readlink(path) == target):
            _ensure_link(path, target)
            changed.append(path)
    for path in stray_links(cfg, generation):
        path.unlink()
        changed.append(path)
    return changed


def _ensure_fixed_links(cfg: RagConfig) -> None:
    """Create the fixed links; a file of the older single-folder layout is replaced by its
    link in one rename each (the only publish in which files can switch one at a time)."""
    for path, target in fixed_links(cfg).items():
        _ensure_link(path, target)
        if path.name == STORE_NAME:
            # The old single-file store's WAL and index must not be mistaken for the new one's.
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    path.with_name(path.name + suffix).unlink()


def _ensure_link(path: Path, target: str) -> None:
    """``path`` a symbolic link to ``target``, replaced in one rename when it is anything else."""
    if path.is_symlink() and os.readlink(path) == target:
        return
    if path.is_dir() and not path.is_symlink():
        _move_aside_if_not_a_link(path)  # public/segments copied as a folder (cp -rL): a link again
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    os.symlink(target, tmp)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _link_optional_files(cfg: RagConfig, generation: Generation) -> None:
    """Link from public/ the optional files ``generation`` has (through ``data/current``)."""
    for name in OPTIONAL_NAMES:
        if (generation.folder / name).is_file():
            path = cfg.public_dir / name
            _ensure_link(path, os.path.relpath(current_link(cfg) / name, path.parent))


def _unlink_absent_optional_files(cfg: RagConfig, generation: Generation) -> None:
    """Remove the public/ links of optional files the now current ``generation`` does not have
    (and of the files older versions published)."""
    for name in (*OPTIONAL_NAMES, *RETIRED_NAMES):
        path = cfg.public_dir / name
        if not (generation.folder / name).is_file() and path.is_symlink():
            path.unlink()
            _fsync_dir(path.parent)


def remove_old_generations(cfg: RagConfig, previous: str | None = None) -> list[str]:
    """Delete every generation but the current and the previous one (by default the newest
    older than the current): unfinished ones a killed build left, and superseded ones. Also
    the temporary links a killed swap left. Returns the generation IDs removed."""
    folder = generations_dir(cfg)
    if not folder.is_dir():
        return []
    current = published(cfg).id
    if previous is None and current is not None:
        older = sorted(p.name for p in folder.iterdir() if p.name < current)
        previous = older[-1] if older else None
    removed = []
    for entry in sorted(folder.iterdir()):
        if entry.name in (current, previous):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry.name)
    for leftover in cfg.data_dir.glob(f".{CURRENT_LINK}.*.tmp"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    return removed


def tidy(cfg: RagConfig) -> list[str]:
    """Remove what killed publishes left (old and unfinished generations, temporary links)
    without publishing: for a build that finds nothing to do."""
    if not generations_dir(cfg).is_dir():
        return []
    with publish_lock(cfg):
        return remove_old_generations(cfg)


def discard_generation(generation: Generation) -> None:
    """Remove a generation whose publish failed before it became current."""
    shutil.rmtree(generation.folder, ignore_errors=True)


def _fsync_tree(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_file():
            fd = os.open(entry, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
