"""`rag watch`: follows the content folder's file events and keeps the change journal.

One inotify instance watches every folder under the content folder (hidden ones aside: what
is in them is never indexed, and a hidden folder renamed into view is a new folder to this
watch) and the journal's cookies folder. Each event names the top-level folder (the
collection) it happened in; each name is written once between two cookies, so the journal
grows with the cookies (one per build or sensor tick), not with the edits. The format and
the readers' side: :mod:`rag_assets.ingest.change_journal`.

What keeps the journal true:

- A folder created or moved in is watched (with every folder under it) while its event is
  handled, before any later line is written, so a reader whose cookie comes back walks a
  collection whose new folders are already watched.
- The kernel's queue overflow (events lost) writes ``*`` and watches the whole tree again:
  every reader walks everything once.
- A folder that cannot be watched (the kernel's ``fs.inotify.max_user_watches``) writes ``!``
  and stops the watcher with what to do: readers walk until a watcher runs again.
- The watcher holds an exclusive lock on ``<data>/watch/lock`` while it runs; the kernel
  releases it when the process dies, however it dies, and readers then walk.
- The content folder moved or deleted, or the journal removed or replaced, ends the watcher
  (``!``): what it watches or writes is no longer what readers look at. A cookies folder
  removed or moved away is made again (readers wait for it).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from inotify_simple import INotify, flags

from rag_assets.ingest.change_journal import (
    ALL,
    BROKEN,
    JournalFiles,
    collection_line,
    cookie_line,
    folder_identity,
    header_line,
)

WATCH_MASK = (
    flags.MODIFY
    | flags.ATTRIB
    | flags.CLOSE_WRITE
    | flags.MOVED_FROM
    | flags.MOVED_TO
    | flags.CREATE
    | flags.DELETE
    | flags.DELETE_SELF
    | flags.MOVE_SELF
    | flags.ONLYDIR
)
COOKIE_MASK = flags.CREATE | flags.MOVED_TO | flags.MOVE_SELF | flags.ONLYDIR
COOKIE_FOLDER_TRIES = 100
READ_TIMEOUT_MS = 200  # how often the loop looks at its stop flag


class WatcherRunning(RuntimeError):
    """Another `rag watch` holds the lock of this output folder."""


class WatchLimitReached(RuntimeError):
    """The kernel would not watch one more folder."""


class WatchEnded(RuntimeError):
    """What the watcher follows is gone: the content folder moved or deleted, the journal
    removed or replaced. Readers walk (they check both) until a watcher starts again."""


LOCK_TRIES = 20  # a reader's liveness probe holds the lock shared for a moment: try again


def _take_lock(lock_fd: int, files: JournalFiles) -> None:
    for attempt in range(LOCK_TRIES):
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if attempt + 1 < LOCK_TRIES:
                time.sleep(0.05)
    raise WatcherRunning(f"another `rag watch` already keeps {files.journal}; one per output folder is enough")


class JournalWriter:
    """Watches ``content_dir`` and appends to ``files.journal`` until :meth:`stop`."""

    def __init__(self, content_dir: Path, files: JournalFiles) -> None:
        self.content_dir = Path(os.path.realpath(content_dir))
        self.files = files
        self.watcher = uuid.uuid4().hex
        self._folders: dict[int, str] = {}  # watch descriptor -> folder path relative to the content folder ("" = it)
        self._cookies_wd = -1
        self._marked: set[str] = set()  # names written since the last cookie
        # Collections with a folder the kernel would not watch (unreadable): named after every
        # cookie, so every reader walks them.
        self._unwatched: set[str] = set()
        self._stop = threading.Event()
        self.events = 0  # inotify events handled (for the status line)

    @property
    def folders(self) -> int:
        return len(self._folders)

    def stop(self) -> None:
        self._stop.set()

    def run(self, on_ready: Callable[[JournalWriter], None] | None = None) -> None:
        """Lock, start a new journal, watch the tree, then write events until :meth:`stop`."""
        self.files.folder.mkdir(parents=True, exist_ok=True)
        self.files.cookies.mkdir(exist_ok=True)
        lock_fd = os.open(self.files.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            _take_lock(lock_fd, self.files)
            with INotify() as inotify:
                journal = os.open(
                    self.files.journal, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644
                )
                try:
                    self._loop(inotify, journal, on_ready)
                finally:
                    os.close(journal)
        finally:
            os.close(lock_fd)  # releases the lock

    def _loop(self, inotify: INotify, journal: int, on_ready: Callable[[JournalWriter], None] | None) -> None:
        identity = folder_identity(self.content_dir)
        if identity is None:
            raise WatchEnded(f"cannot stat the content folder {self.content_dir}")
        os.write(journal, header_line(self.watcher, self.content_dir, identity))
        try:
            self._watch_tree(inotify, "")
        except WatchLimitReached:
            os.write(journal, BROKEN + b"\n")
            raise
        # The cookies last: a reader's cookie comes back only once every folder is watched.
        self._watch_cookies(inotify)
        if on_ready is not None:
            on_ready(self)
        while not self._stop.is_set():
            lines: list[bytes] = []
            try:
                for event in inotify.read(timeout=READ_TIMEOUT_MS):
                    self.events += 1
                    self._handle(inotify, event.wd, event.mask, event.name, lines)
                self._check_journal(journal)
            except (WatchLimitReached, WatchEnded):
                os.write(journal, b"".join(lines) + BROKEN + b"\n")
                raise
            if lines:
                os.write(journal, b"".join(lines))  # one append: a reader never sees a cookie before its events

    def _handle(self, inotify: INotify, wd: int, mask: int, name: str, lines: list[bytes]) -> None:
        if mask & flags.Q_OVERFLOW:
            lines.append(ALL + b"\n")
            self._marked.clear()
            self._watch_tree(inotify, "")  # folders made while events were lost are watched now
            return
        if wd == self._cookies_wd:
            if mask & (flags.IGNORED | flags.MOVE_SELF):  # removed or moved away: readers' cookies wait for this
                if mask & flags.MOVE_SELF:
                    try:
                        inotify.rm_watch(wd)  # it follows the moved folder, where no reader looks
                    except OSError:
                        pass
                self._watch_cookies(inotify)
            elif name and mask & (flags.CREATE | flags.MOVED_TO):
                lines.append(cookie_line(name))
                self._marked.clear()
                for collection in sorted(self._unwatched):
                    self._mark(collection, lines)
            return
        folder = self._folders.get(wd)
        if folder is None:
            return
        if folder == "" and mask & (flags.DELETE_SELF | flags.MOVE_SELF | flags.IGNORED):
            raise WatchEnded(
                f"the content folder {self.content_dir} was moved or deleted; start `rag watch` again "
                "once it is back (builds walk the content meanwhile)"
            )
        if mask & flags.IGNORED:
            del self._folders[wd]
            return
        rel = f"{folder}/{name}" if folder and name else folder or name
        # A folder made, moved in, or given new permissions (it may be readable now) is watched
        # with all under it before the next line is written (watching one twice is harmless).
        if (
            mask & flags.ISDIR
            and mask & (flags.CREATE | flags.MOVED_TO | flags.ATTRIB)
            and name
            and not name.startswith(".")
        ):
            self._watch_tree(inotify, rel)
        if not rel:  # the content folder itself was moved or deleted
            lines.append(ALL + b"\n")
            return
        self._mark(rel.split("/", 1)[0], lines)

    def _watch_cookies(self, inotify: INotify) -> None:
        """Make the cookies folder (again) and watch it; removed once more in between, it is
        made again, a few times, before the watcher gives up (readers then walk)."""
        for _ in range(COOKIE_FOLDER_TRIES):
            self.files.cookies.mkdir(parents=True, exist_ok=True)
            try:
                self._cookies_wd = inotify.add_watch(self.files.cookies, COOKIE_MASK)
                return
            except FileNotFoundError:
                continue
        raise WatchEnded(
            f"the cookies folder {self.files.cookies} was removed again each time it was made; "
            "start `rag watch` again once nothing removes it"
        )

    def _check_journal(self, journal: int) -> None:
        """Stop when the journal file was removed or replaced: readers could not see our lines."""
        try:
            same = os.stat(self.files.journal).st_ino == os.fstat(journal).st_ino
        except OSError:
            same = False
        if not same:
            raise WatchEnded(f"the journal {self.files.journal} was removed or replaced; start `rag watch` again")

    def _mark(self, collection: str, lines: list[bytes]) -> None:
        if collection in self._marked:
            return
        self._marked.add(collection)
        try:
            lines.append(collection_line(collection))
        except TypeError:  # a name that is not valid UTF-8: never a collection; say "anything" to be safe
            lines.append(ALL + b"\n")

    def _watch_tree(self, inotify: INotify, rel: str) -> None:
        """Watch the folder ``rel`` (relative to the content folder) and every non-hidden folder under it."""
        pending = [rel]
        while pending:
            current = pending.pop()
            path = self.content_dir / current if current else self.content_dir
            try:
                wd = inotify.add_watch(path, WATCH_MASK)
            except FileNotFoundError:
                continue  # gone again; its parent's event names its collection
            except NotADirectoryError:
                continue
            except OSError as exc:
                if exc.errno == 28:  # ENOSPC: the watch limit
                    raise WatchLimitReached(
                        f"the kernel would not watch more than {len(self._folders)} folders "
                        "(fs.inotify.max_user_watches); raise it with "
                        "`sysctl fs.inotify.max_user_watches=<more>` and start `rag watch` again. "
                        "Builds walk the content meanwhile."
                    ) from exc
                if not current:
                    raise OSError(exc.errno, f"cannot watch the content folder {path}: {exc.strerror}") from exc
                # Unreadable: the walk reports it; its collection is walked by every reader.
                self._unwatched.add(current.split("/", 1)[0])
                continue
            self._folders[wd] = current
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False):
                            pending.append(f"{current}/{entry.name}" if current else entry.name)
            except OSError:
                continue
