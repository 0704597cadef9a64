"""Whether anything a walk of the content read has changed since, by ``stat`` alone.

The content hash of a walk depends on the folders it listed (their entries), the files it
hashed (by their stat, through the stat cache) and the entries it skipped (by what they
are). A :class:`ContentWatch` keeps those paths and one digest of their stats as the walk saw
them: a folder is stat'ed before it is listed, so an entry added or removed after its stat
changes the folder's mtime; a file or skipped entry by the stat the walk took (skipped ones
stat'ed again, with and without following a link: a broken link whose target appears is a
change). :meth:`ContentWatch.unchanged` stats the same paths again, with none of a walk's
per-entry policy work and no hashing: the check after a publish (is the published content
hash the content's now?) costs about a quarter of the second walk it replaces (0.37 CPU s
against about 1.4 for 72,112 paths at 100,000 chunks).

The verification record's racy rule (rag_assets.base.verified) applies, from the start of
the walk: when any of those paths changed later than :data:`~rag_assets.base.verified.RACY_MARGIN_NS`
before the walk began, no watch is made. So no path changed while the walk read it (a skipped
entry, stat'ed after the walk, was as the walk saw it), and any later change gives it a ctime
of its own, which no ``utime`` can set back. A watch answers "unchanged" only when every stat
is as the walk saw it; anything else (a hidden file added to a folder, a touched file) only
sends the caller back to a walk.
"""

from __future__ import annotations

import hashlib
import os
import time
from array import array
from dataclasses import dataclass
from pathlib import Path

from rag_assets.base.verified import RACY_MARGIN_NS
from rag_assets.ingest.walker import Listing

_MISSING = (-1, -1, -1, -1, -1, -1)  # no such path, or it could not be stat'ed


def stat_key(info: os.stat_result) -> tuple[int, int, int, int, int, int]:
    """What changes whenever a file's or folder's bytes, entries, type or identity do."""
    return (info.st_mode, info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)


def _key_now(path: str, follow: bool) -> tuple[int, ...]:
    try:
        return stat_key(os.stat(path, follow_symlinks=follow))
    except (OSError, ValueError):  # ValueError: a name with a NUL byte
        return _MISSING


def _digest(keys: array) -> bytes:
    return hashlib.blake2b(keys.tobytes(), digest_size=32).digest()


@dataclass(frozen=True)
class ContentWatch:
    """The paths a walk depended on (with whether their link is followed), and one digest of
    their stats as the walk saw them."""

    paths: tuple[tuple[str, bool], ...]
    digest: bytes

    def unchanged(self) -> bool:
        """Whether every path's stat is still the one the walk saw (False: walk again)."""
        keys = array("q")
        for path, follow in self.paths:
            keys.extend(_key_now(path, follow))
        return _digest(keys) == self.digest


class WatchBuilder:
    """Collects a walk's paths and stats in the order they are seen; :meth:`finish` makes the
    :class:`ContentWatch`, or None when something changed too recently to be trusted."""

    def __init__(self) -> None:
        self._started_ns = time.time_ns()  # made before the walk begins
        self._paths: list[tuple[str, bool]] = []
        self._keys = array("q")
        self._latest_ns = 0  # the latest mtime or ctime seen

    def _add(self, path: str, follow: bool, key: tuple[int, ...]) -> None:
        self._paths.append((path, follow))
        self._keys.extend(key)
        self._latest_ns = max(self._latest_ns, key[2], key[3])

    def add_path(self, path: str | Path, *, links_too: bool = False) -> None:
        """``path`` as it is now (before the walk reads it); ``links_too``: its link's own stat as well."""
        self._add(str(path), True, _key_now(str(path), True))
        if links_too:
            self._add(str(path), False, _key_now(str(path), False))

    def add_folder_entries(self, folder: Path) -> None:
        """The folder and each of its entries (followed and not): what collection discovery reads."""
        self.add_path(folder)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return
        for name in names:
            self.add_path(os.path.join(folder, name), links_too=True)

    def add_listing(self, listing: Listing, content_dir: Path) -> None:
        """What :func:`~rag_assets.ingest.walker.list_folder` saw: its folders and files by the
        stat it took, its skipped entries (paths relative to ``content_dir``) as they are now."""
        for where, info in listing.folders:
            self._add(where, True, stat_key(info) if info is not None else _MISSING)
        for item in listing.files:
            # The walk's stat: of the link's target for a linked file, else of the file.
            self._add(item.where, True, stat_key(item.stat))
        for skipped in listing.skipped:
            self.add_path(content_dir / skipped.path, links_too=True)

    def finish(self) -> ContentWatch | None:
        """The watch, unless a path changed later than the racy margin before the walk began."""
        if self._latest_ns >= self._started_ns - RACY_MARGIN_NS:
            return None
        return ContentWatch(tuple(self._paths), _digest(self._keys))
