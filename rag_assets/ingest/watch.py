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
of its own, which no ``utime`` can set back. Only files so changed (the file just edited when a
build starts at once, as `bench/scale.py` times it) are read again, as git does with racily
clean entries: once the margin has passed since the latest change, a file whose stat is still
the walk's and whose bytes hash as the walk hashed them is as the walk saw it, and any later
write gives it a new ctime (without this the check after such a build walked the content a
second time: 0.87 of a 100,000-chunk edit's 8 s profiled, 3.0 s at a million chunks). A racy
folder or skipped entry still means no watch. A watch answers "unchanged" only when every stat
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
from rag_assets.ingest.stat_cache import sha256_file
from rag_assets.ingest.walker import FileRefused, Listing

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
        # Made before the walk begins: a path changed after the cutoff is racy.
        self._cutoff_ns = time.time_ns() - RACY_MARGIN_NS
        self._paths: list[tuple[str, bool]] = []
        self._keys = array("q")
        self._latest_ns = 0  # the latest mtime or ctime seen
        # Each racy path: (path, the walk's stat key, the walk's SHA-256 when it is a hashed file).
        self._racy: list[tuple[str, tuple[int, ...], str | None]] = []

    def _add(self, path: str, follow: bool, key: tuple[int, ...], digest: str | None = None) -> None:
        self._paths.append((path, follow))
        self._keys.extend(key)
        changed_ns = max(key[2], key[3])
        self._latest_ns = max(self._latest_ns, changed_ns)
        if changed_ns >= self._cutoff_ns:
            self._racy.append((path, key, digest if follow else None))

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

    def add_listing(
        self, listing: Listing, content_dir: Path, hashes: dict[str, str] | None = None, prefix: str = ""
    ) -> None:
        """What :func:`~rag_assets.ingest.walker.list_folder` saw: its folders and files by the
        stat it took, its skipped entries (paths relative to ``content_dir``) as they are now.
        ``hashes``: the SHA-256 the walk took of each file, by ``prefix`` + its relative path
        (a collection's snapshot), so that a file changed within the racy margin can be read
        again instead of costing the watch."""
        for where, info in listing.folders:
            self._add(where, True, stat_key(info) if info is not None else _MISSING)
        for item in listing.files:
            # The walk's stat: of the link's target for a linked file, else of the file.
            self._add(item.where, True, stat_key(item.stat), (hashes or {}).get(prefix + item.rel))
        for skipped in listing.skipped:
            self.add_path(content_dir / skipped.path, links_too=True)

    def finish(self) -> ContentWatch | None:
        """The watch, unless a path changed later than the racy margin before the walk began
        and is not a file that reads again as the walk read it (see the module docstring)."""
        if self._racy and not self._racy_files_confirmed():
            return None
        return ContentWatch(tuple(self._paths), _digest(self._keys))

    def _racy_files_confirmed(self) -> bool:
        """Whether every racy path is a hashed file that, once the margin has passed since the
        latest change, has the walk's stat before and after its bytes are hashed again, and the
        walk's hash."""
        if any(digest is None for _, _, digest in self._racy):
            return False  # a folder, a skipped entry or an unhashed file
        wait_ns = self._latest_ns + RACY_MARGIN_NS - time.time_ns()
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        for path, seen, digest in self._racy:
            try:
                if _key_now(path, True) != seen or sha256_file(path, seen[1]) != digest:
                    return False
            except (OSError, FileRefused):
                return False
            if _key_now(path, True) != seen:
                return False
        return True
