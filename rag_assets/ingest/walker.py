"""Listing a content folder: which files a build may read, and why the others are skipped.

Every collection and vault is listed by :func:`list_folder`, for hashing (the content hash,
the change sensor, ``rag check``) and for parsing alike, so the files that are hashed are
exactly the files that are indexed. A :class:`WalkPolicy` says where the folder's content
may come from:

* a symlink whose target lies outside the boundary (the content folder for a collection,
  the vault's own folder for a vault) is skipped unless ``follow_symlinks`` is set;
* a symlink into another privacy tier's folder (a note vault for a public collection, a
  Private vault for a Safe one) is never followed, whatever the settings;
* symlink loops are detected, and a folder reached through symlinks is walked once;
* FIFOs, sockets and device files are never opened (reading a FIFO blocks forever);
* files larger than ``max_file_bytes`` are skipped from their ``stat``, before any read;
* names that are not valid UTF-8 are skipped (they cannot go into JSON, SQLite or a hash
  of UTF-8 names) and shown with backslash escapes;
* the policy's excluded folders and file suffixes (a vault's templates folder, ``.base`` and
  ``.canvas`` files) are skipped with the policy's reason.

Each skip is a :class:`SkippedFile` with the path and a reason a site owner can act on.
Hidden entries (a leading dot) are not content and are left out silently, as before: so a
vault's ``.obsidian/`` settings and ``.trash/`` are never read.
"""

from __future__ import annotations

import errno
import os
import stat as stat_module
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_assets.records import SkippedFile

DEFAULT_MAX_FILE_BYTES = 20_000_000
MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdx")
_READ_BLOCK = 1 << 20
# O_NONBLOCK: opening a FIFO that was swapped in after the listing returns at once instead
# of waiting for a writer; O_NOCTTY: a terminal device never becomes our controlling tty.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)


class FileRefused(Exception):
    """A listed file that must not be read after all (it changed since the listing); carries the reason."""


@dataclass(frozen=True)
class ForbiddenFolder:
    """A folder of another privacy tier: never entered from the folder being walked."""

    path: Path  # resolved
    label: str  # e.g. "the note vaults folder", "the Private vault 'personal'"


@dataclass(frozen=True)
class WalkPolicy:
    """Where a walked folder's content may come from, and how large one file may be."""

    boundary: Path  # resolved; symlink targets must stay inside it unless follow_symlinks
    boundary_label: str = "the content folder"
    forbidden: tuple[ForbiddenFolder, ...] = ()
    follow_symlinks: bool = False
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    # Entries that are not content (a vault's templates folder, Obsidian's .base and .canvas
    # files): never read, reported with the reason. Folders by path relative to the walked
    # folder, files by suffix (lower case, with the dot).
    excluded_folders: tuple[tuple[str, str], ...] = ()
    excluded_suffixes: tuple[tuple[str, str], ...] = ()
    # The folders builds write (resolved): an output folder inside the content folder is
    # never content, or the index would hold its own outputs and never match the content.
    # Passed over without a word, as hidden folders are: reported, the skip itself would be a
    # change the next build sees (the folders appear during the first build).
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ListedFile:
    """A regular file the build may read: path relative to the walked folder, and its stat."""

    rel: str
    where: str  # the file's path as the walk reached it
    stat: os.stat_result

    @property
    def path(self) -> Path:
        # Made when asked for: most listed files are only looked up in the stat cache, and a
        # Path per file was a third of a walk's time.
        return Path(self.where)


@dataclass
class Listing:
    files: list[ListedFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    # Each folder listed, with its stat taken before it was listed (None: it could not be
    # stat'ed): an entry added or removed since changes the folder's mtime (ingest/watch.py).
    folders: list[tuple[str, os.stat_result | None]] = field(default_factory=list)
    # Whether the walk met a symlink (followed or skipped), and a file with a second hard
    # link: a change through the other name is not a change under this folder, so the change
    # journal cannot vouch for it (rag_assets.ingest.journal_snapshots).
    links: bool = False
    hard_links: bool = False


def default_policy(boundary: Path) -> WalkPolicy:
    """The policy without a config: stay inside ``boundary``, never enter its ``vaults`` folder."""
    real = Path(os.path.realpath(boundary))
    return WalkPolicy(boundary=real, forbidden=(ForbiddenFolder(real / "vaults", "the note vaults folder"),))


def readable_name(name: str) -> str:
    """A file name as text that JSON, SQLite and a terminal accept: undecodable bytes (which
    Python keeps as lone surrogates) become backslash escapes such as ``\\xff``."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def is_valid_utf8_name(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_within(path: str | Path, folder: str | Path) -> bool:
    """True when ``path`` is ``folder`` or lies under it (both already resolved)."""
    path, folder = str(path), str(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def symlink_outside_reason(policy: WalkPolicy) -> str:
    return f"symlink to a target outside {policy.boundary_label}; set follow_symlinks: true to follow it"


def forbidden_folder(real_target: str, policy: WalkPolicy) -> ForbiddenFolder | None:
    """The other tier's folder that ``real_target`` lies in, if any."""
    return next((f for f in policy.forbidden if is_within(real_target, f.path)), None)


def holds_outputs(real_target: str, policy: WalkPolicy) -> bool:
    """Whether ``real_target`` is (or lies in) a folder builds write."""
    return any(is_within(real_target, folder) for folder in policy.outputs)


def symlink_problem(real_target: str, policy: WalkPolicy) -> str | None:
    """Why a symlink to ``real_target`` may not be followed under ``policy``, or None."""
    other_tier = forbidden_folder(real_target, policy)
    if other_tier:
        return f"symlink into {other_tier.label}, another privacy tier's folder; never followed"
    if not policy.follow_symlinks and not is_within(real_target, policy.boundary):
        return symlink_outside_reason(policy)
    return None


def folder_problem(real_folder: str, policy: WalkPolicy) -> str | None:
    """Why a folder (reached without a symlink, or the walked folder itself) may not be read."""
    other_tier = forbidden_folder(real_folder, policy)
    if other_tier:
        return f"folder is inside {other_tier.label}, another privacy tier's folder; not indexed here"
    if not policy.follow_symlinks and not is_within(real_folder, policy.boundary):
        return (
            f"folder is a symlink to a target outside {policy.boundary_label}; set follow_symlinks: true to follow it"
        )
    return None


def list_folder(root: Path, policy: WalkPolicy | None = None, *, prefix: str = "") -> Listing:
    """Every readable regular file under ``root`` (sorted by relative path) and every skipped entry.

    ``prefix`` (e.g. ``"docs/"``) is put before the paths of skipped entries so they read
    as the rest of the build's paths. ``os.scandir`` returns each entry's type with the
    directory read, so walking 10,000 plain files costs one ``stat`` per file.
    """
    policy = policy or default_policy(root)
    listing = Listing()
    root_real = os.path.realpath(root)
    problem = folder_problem(root_real, policy)
    if problem:
        # The folder itself (a symlinked collection or vault) leads somewhere it must not.
        listing.skipped.append(SkippedFile(prefix.rstrip("/") or readable_name(str(root)), problem))
        return listing
    walker = _Walk(policy, listing, prefix)
    walker.walk(root, root_real)
    listing.files.sort(key=lambda item: item.rel)
    listing.skipped.sort(key=lambda item: item.path)
    return listing


class _Walk:
    """One walk's state: the folders still to list and the symlinked folders already entered."""

    def __init__(self, policy: WalkPolicy, listing: Listing, prefix: str) -> None:
        self.policy = policy
        self.listing = listing
        self.prefix = prefix
        # Each symlinked folder is entered once: two links to one folder (or links that
        # fan out to each other) would otherwise multiply the walk.
        self.followed: set[str] = set()

    def skip(self, rel: str, reason: str) -> None:
        self.listing.skipped.append(SkippedFile(self.prefix + rel, reason))

    def walk(self, root: Path, root_real: str) -> None:
        # (folder, its path relative to root with a trailing '/', real paths of it and its ancestors)
        pending: list[tuple[Path, str, tuple[str, ...]]] = [(root, "", (root_real,))]
        while pending:
            folder, rel_folder, chain = pending.pop()
            try:
                info: os.stat_result | None = os.stat(folder)
            except OSError:
                info = None
            self.listing.folders.append((str(folder), info))
            try:
                entries = list(os.scandir(folder))
            except OSError as exc:
                if rel_folder:
                    self.skip(rel_folder.rstrip("/"), f"cannot list folder: {exc.strerror or exc}")
                continue
            for entry in entries:
                if not entry.name.startswith(".") and not self.plain_file(entry, rel_folder):
                    pending.extend(self.visit(entry, rel_folder, chain))

    def plain_file(self, entry: os.DirEntry, rel_folder: str) -> bool:
        """List ``entry`` when it is the common case, a regular file reached without a link,
        with an ASCII name, no exclusions and within the size limit; False: ask :meth:`visit`
        (which decides these same files alike, with every other check on the way: a
        walk of 71,111 files spent twice its system calls' time in them)."""
        policy = self.policy
        if policy.excluded_folders or policy.excluded_suffixes or not entry.name.isascii():
            return False
        try:
            if not entry.is_file(follow_symlinks=False):  # the folder's entry type: no system call
                return False
            info = entry.stat(follow_symlinks=False)
        except OSError:
            return False
        if not stat_module.S_ISREG(info.st_mode) or info.st_size > policy.max_file_bytes:
            return False  # changed type since the folder was read, or too large: visit says so
        self.listing.files.append(ListedFile(rel_folder + entry.name, entry.path, info))
        if info.st_nlink > 1:
            self.listing.hard_links = True
        return True

    def visit(self, entry: os.DirEntry, rel_folder: str, chain: tuple[str, ...]) -> list:
        """Record one entry; return the folder to list next, if it is one."""
        try:
            is_link = entry.is_symlink()
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError as exc:
            self.skip(rel_folder + readable_name(entry.name), f"cannot read entry: {exc.strerror or exc}")
            return []
        if not is_valid_utf8_name(entry.name):
            what = "folder" if is_dir else "file"
            tail = "; its files are not indexed" if is_dir else ""
            self.skip(rel_folder + readable_name(entry.name), f"{what} name is not valid UTF-8{tail}; rename it")
            return []
        rel = rel_folder + entry.name
        if is_link:
            self.listing.links = True
            real = os.path.realpath(entry.path)
        else:
            real = os.path.join(chain[-1], entry.name)
        if self.policy.outputs and holds_outputs(real, self.policy):
            return []  # what builds write (see WalkPolicy.outputs)
        if is_link:
            problem = symlink_problem(real, self.policy) or _loop_problem(real, chain)
        else:
            # A plain subfolder can still be another tier's: a vault nested in the walked folder.
            problem = folder_problem(real, self.policy) if is_dir else None
        if problem:
            self.skip(rel, problem)
            return []
        try:
            info = os.stat(entry.path) if is_link else entry.stat(follow_symlinks=False)
        except OSError as exc:
            self.skip(rel, _stat_failure(exc, is_link))
            return []
        return self.classify(entry, rel, real, info, is_link, chain)

    def classify(self, entry: os.DirEntry, rel: str, real: str, info: os.stat_result, is_link: bool, chain) -> list:
        mode = info.st_mode
        excluded = excluded_reason(self.policy, rel, stat_module.S_ISDIR(mode))
        if excluded:
            self.skip(rel, excluded)
            return []
        if stat_module.S_ISDIR(mode):
            if is_link:
                if real in self.followed:
                    self.skip(rel, "symlink to a folder already indexed through another symlink")
                    return []
                self.followed.add(real)
            if entry.name.lower().endswith(MARKDOWN_SUFFIXES):
                self.skip(rel, "a folder named like a Markdown file is not a document (the files in it are indexed)")
            return [(Path(entry.path), f"{rel}/", (*chain, real))]
        if stat_module.S_ISREG(mode):
            if info.st_size > self.policy.max_file_bytes:
                self.skip(rel, too_large_reason(info.st_size, self.policy.max_file_bytes))
            else:
                self.listing.files.append(ListedFile(rel, entry.path, info))
                if info.st_nlink > 1:
                    self.listing.hard_links = True
            return []
        self.skip(rel, f"{_special_kind(mode)}, not a regular file; never read")
        return []


def excluded_reason(policy: WalkPolicy, rel: str, is_dir: bool) -> str | None:
    """The policy's reason for leaving out this folder or file, or None."""
    if not (policy.excluded_folders or policy.excluded_suffixes):
        return None  # a collection's policy: nothing excluded (asked once per file of a walk)
    if is_dir:
        return next((reason for folder, reason in policy.excluded_folders if folder == rel), None)
    lowered = rel.lower()
    return next((reason for suffix, reason in policy.excluded_suffixes if lowered.endswith(suffix)), None)


def _loop_problem(real_target: str, chain: tuple[str, ...]) -> str | None:
    if any(is_within(ancestor, real_target) for ancestor in chain):
        return "symlink loop: it points to a folder that contains it"
    return None


def _stat_failure(exc: OSError, is_link: bool) -> str:
    if is_link and exc.errno == errno.ELOOP:
        return "symlink loop: the link resolves to itself"
    if is_link and exc.errno == errno.ENOENT:
        return "broken symlink: its target does not exist"
    return f"cannot read file: {exc.strerror or exc}"


def _special_kind(mode: int) -> str:
    if stat_module.S_ISDIR(mode):
        return "a folder"
    if stat_module.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat_module.S_ISSOCK(mode):
        return "a socket"
    if stat_module.S_ISCHR(mode) or stat_module.S_ISBLK(mode):
        return "a device file"
    return "a special file"


def too_large_reason(size: int, limit: int) -> str:
    return f"file is {size:,} bytes, more than max_file_bytes ({limit:,}); split it or raise max_file_bytes"


def open_regular_file(path: str | Path, max_bytes: int) -> tuple[int, os.stat_result]:
    """A file descriptor for reading ``path``, refusing anything that is not (any longer) a
    regular file within the size limit. The caller closes it."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat_module.S_ISREG(info.st_mode):
            raise FileRefused(f"{_special_kind(info.st_mode)}, not a regular file; never read")
        if info.st_size > max_bytes:
            raise FileRefused(too_large_reason(info.st_size, max_bytes))
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def iter_blocks(path: str | Path, max_bytes: int) -> Iterator[Any]:  # os.stat_result, then bytes
    """The file's bytes in blocks, never more than ``max_bytes`` (a file growing while it is
    read is refused rather than read without end); yields the fstat first."""
    fd, info = open_regular_file(path, max_bytes)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        yield info
        total = 0
        while block := handle.read(_READ_BLOCK):
            total += len(block)
            if total > max_bytes:
                raise FileRefused(too_large_reason(total, max_bytes))
            yield block


def read_bounded(path: Path, max_bytes: int) -> tuple[bytes, os.stat_result]:
    """The whole file (at most ``max_bytes``) and its stat."""
    blocks = iter_blocks(path, max_bytes)
    info = next(blocks)
    return b"".join(blocks), info
