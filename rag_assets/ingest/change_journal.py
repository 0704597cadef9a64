"""The change journal `rag watch` keeps: which collections changed since a build last looked.

A walk of the content folder stats every file (711,111 at a million chunks), so change
detection grows with the corpus even when one paragraph changed. `rag watch`
(:mod:`rag_assets.ingest.journal_writer`) follows the kernel's file events instead and appends
to ``<data>/watch/journal`` the name of each collection something happened in, as git's
fsmonitor and watchman do for a worktree. A build that finds it running walks only the
collections named since its last look and takes the others' snapshots as they were
(:mod:`rag_assets.ingest.journal_snapshots`).

The file, one line per record, after a header line ``rag-watch 1 <watcher id> <dev>:<inode>
<content folder>`` (the folder's device and inode: a folder moved aside or replaced under the
same path is another folder, whose events this watcher never sees):

- ``"<collection>"`` (a JSON string): something changed under that top-level folder;
- ``*``: anything may have changed (the kernel's queue overflowed and events were lost);
- ``!``: the watcher stopped following the folder (it could not watch a new folder); no
  reader trusts the journal after it;
- ``cookie <name>``: the file ``<name>`` appeared in ``<data>/watch/cookies``.

A reader cannot know whether the watcher has read the events of an edit made a moment ago
(they wait in the kernel's queue). So each reader creates a cookie file and waits until its
line appears (:func:`read_since`): one inotify queue delivers events in the order they
happened, so every change made before the cookie is in the lines before it. Only then may a
reader take "not named" as "unchanged". With no live watcher (its lock on
``<data>/watch/lock`` free), another watcher's journal or content folder, a ``!``, or no cookie
line within :data:`SYNC_TIMEOUT_S`, :func:`read_since` returns None and the caller walks
everything; a token whose cookie line is not where it says (a journal cut back) means
"everything changed" too.
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson

JOURNAL_VERSION = 1
ALL = b"*"
BROKEN = b"!"
COOKIE = b"cookie "
SYNC_TIMEOUT_S = 2.0  # a watcher that has not echoed a cookie by then is stuck: walk instead
COOKIE_RETRY_S = 0.25
MISSING_FOLDER_RETRY_S = 0.01


@dataclass(frozen=True)
class JournalFiles:
    """Where one output folder's watcher keeps its journal, lock, cookies and snapshots."""

    folder: Path

    @property
    def journal(self) -> Path:
        return self.folder / "journal"

    @property
    def lock(self) -> Path:
        return self.folder / "lock"

    @property
    def cookies(self) -> Path:
        return self.folder / "cookies"

    @property
    def snapshots(self) -> Path:
        return self.folder / "snapshots"


@dataclass(frozen=True)
class JournalToken:
    """A point in one watcher's journal: what a reader has seen up to (a byte offset), just
    after the line of its cookie ``cookie``."""

    watcher: str
    offset: int
    cookie: str


@dataclass(frozen=True)
class JournalHeader:
    watcher: str
    folder: str
    identity: str  # "<st_dev>:<st_ino>" of the content folder when the watcher started


@dataclass(frozen=True)
class JournalRead:
    """What the journal says happened since a token: the collections named (``everything``:
    any may have changed), and the token to read from next time."""

    token: JournalToken
    changed: frozenset[str]
    everything: bool


def folder_identity(folder: Path) -> str | None:
    """``<st_dev>:<st_ino>`` of ``folder`` (None when it cannot be stat'ed)."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    return f"{info.st_dev}:{info.st_ino}"


def header_line(watcher: str, content_dir: Path, identity: str) -> bytes:
    return f"rag-watch {JOURNAL_VERSION} {watcher} {identity} ".encode() + orjson.dumps(str(content_dir)) + b"\n"


def cookie_line(name: str) -> bytes:
    return COOKIE + name.encode("utf-8", "surrogateescape") + b"\n"


def collection_line(name: str) -> bytes:
    return orjson.dumps(name) + b"\n"


def watcher_alive(files: JournalFiles) -> bool:
    """Whether a `rag watch` holds the lock (a dead one's lock is released by the kernel)."""
    try:
        fd = os.open(files.lock, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # also releases a shared lock taken just now
    return False


def parse_header(line: bytes) -> JournalHeader | None:
    """A journal's first line; None when it is not one."""
    parts = line.rstrip(b"\n").split(b" ", 4)
    if len(parts) != 5 or parts[0] != b"rag-watch" or parts[1] != str(JOURNAL_VERSION).encode():
        return None
    try:
        return JournalHeader(parts[2].decode(), str(orjson.loads(parts[4])), parts[3].decode())
    except (UnicodeDecodeError, orjson.JSONDecodeError):
        return None


def read_header(files: JournalFiles) -> tuple[JournalHeader, int] | None:
    """The journal's header and the offset of its first record."""
    try:
        with open(files.journal, "rb") as handle:
            header = parse_header(handle.readline())
            return (header, handle.tell()) if header else None
    except OSError:
        return None


def _token_holds(files: JournalFiles, token: JournalToken) -> bool:
    """Whether ``token``'s cookie line ends where the token says: else the journal was cut
    back or rewritten since, and what happened after the token is not all in it."""
    marker = cookie_line(token.cookie)
    try:
        with open(files.journal, "rb") as handle:
            handle.seek(max(token.offset - len(marker), 0))
            return handle.read(len(marker)) == marker and token.offset >= len(marker)
    except OSError:
        return False


def read_since(
    files: JournalFiles, content_dir: Path, since: JournalToken | None, timeout_s: float = SYNC_TIMEOUT_S
) -> JournalRead | None:
    """What changed since ``since``, after a cookie round trip with the watcher (see the
    module's docstring); ``everything`` when ``since`` is another watcher's or None. None:
    no watcher of ``content_dir`` answered, or its journal cannot be trusted."""
    if not watcher_alive(files):
        return None
    content_dir = Path(os.path.realpath(content_dir))  # as the watcher names it
    found = read_header(files)
    if found is None:
        return None
    header, body_start = found
    if header.folder != str(content_dir) or header.identity != folder_identity(content_dir):
        return None  # another folder, or this path's folder moved aside or replaced since the watcher started
    same = since is not None and since.watcher == header.watcher and since.offset >= body_start
    same = same and since is not None and _token_holds(files, since)
    start = since.offset if same and since is not None else body_start
    body = _sync(files, start, timeout_s)
    if body is None:
        return None
    chunk, end, cookie = body
    again = read_header(files)
    if again is None or again[0].watcher != header.watcher:
        return None  # a new watcher truncated the journal meanwhile: those bytes may be its own
    changed: set[str] = set()
    everything = not same
    for line in chunk.splitlines():
        if line == BROKEN:
            return None
        if line == ALL:
            everything = True
        elif line.startswith(b'"'):
            try:
                changed.add(str(orjson.loads(line)))
            except orjson.JSONDecodeError:
                everything = True  # not a line the watcher wrote: walk everything once
        elif not line.startswith(COOKIE):
            everything = True
    return JournalRead(JournalToken(header.watcher, end, cookie), frozenset(changed), everything)


def _sync(files: JournalFiles, start: int, timeout_s: float) -> tuple[bytes, int, str] | None:
    """Create a cookie and wait for its line: (the journal's bytes from ``start`` to just
    before that line, the offset just after it, the cookie's name); None when none comes in
    time. A cookie made while the kernel's queue is full is lost with the other events (the
    watcher then writes ``*``), so another is made every :data:`COOKIE_RETRY_S` until one
    comes back."""
    made: list[Path] = []
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            added = _add_cookie(files, made)
            if added is None:
                return None
            # No cookies folder: the watcher makes it again on its removal's event; try soon.
            retry_at = min(time.monotonic() + (COOKIE_RETRY_S if added else MISSING_FOLDER_RETRY_S), deadline)
            pause = 0.0005
            while True:
                found = _cookie_line(files, start, made)
                if found is not None:
                    return found
                now = time.monotonic()
                if now > deadline:
                    return None
                if now > retry_at:
                    break
                time.sleep(pause)
                pause = min(pause * 2, 0.02)
    finally:
        for cookie in made:
            try:
                cookie.unlink()
            except OSError:
                pass


def _add_cookie(files: JournalFiles, made: list[Path]) -> bool | None:
    """Make a cookie: True; False when the cookies folder is missing (for a moment: the
    watcher makes it again); None when it cannot be made at all."""
    cookie = files.cookies / uuid.uuid4().hex
    try:
        cookie.touch()
    except FileNotFoundError:
        return False
    except OSError:
        return None
    made.append(cookie)
    return True


def _cookie_line(files: JournalFiles, start: int, made: list[Path]) -> tuple[bytes, int, str] | None:
    """The first line of one of ``made``'s cookies after ``start``, as :func:`_sync` returns it."""
    try:
        with open(files.journal, "rb") as handle:
            handle.seek(start)
            data = handle.read()
    except OSError:
        return None
    for cookie in made:
        marker = cookie_line(cookie.name)
        at = data.find(marker)
        if at >= 0 and (at == 0 or data[at - 1 : at] == b"\n"):
            return data[:at], start + at + len(marker), cookie.name
    return None
