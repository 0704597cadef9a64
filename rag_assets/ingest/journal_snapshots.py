"""Collection snapshots kept beside the change journal, so that a build walks only what changed.

Each change detection that reads the journal (:func:`reusable`) saves, with the journal token
it synced to (:func:`save`), every collection's snapshot (its files' SHA-256s, skipped entries
and content hash) as one file per collection, named by a digest of its bytes, and a small
``state.json`` naming them. The next detection takes a collection's snapshot from there when
the journal names nothing under it since that token, and walks the others. A snapshot is not
reused when:

- the journal is another watcher's, says ``*``, or no watcher answers (everything is walked);
- the walk policy (content folder, symlink and size settings, forbidden folders) differs;
- the collection's walk met a symlink, or the collection folder is one: an event at the link's
  target is not an event under the collection, so such a collection is always walked.

Two processes may detect at once (a sensor tick and a build): each writes a state whose
snapshots were all taken after its token, and files are only removed when no state names
them and they are older than :data:`KEEP_UNNAMED_S`.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.ingest.change_journal import JournalFiles, JournalRead, JournalToken, read_since
from rag_assets.ingest.walker import WalkPolicy
from rag_assets.records import CollectionSnapshot

STATE_VERSION = 2  # 2: the token's cookie kept
KEEP_UNNAMED_S = 600.0  # a snapshot file no state names, younger than this, may be another process's


@dataclass(frozen=True)
class Reuse:
    """What one detection may take without a walk, and the token to save its snapshots under."""

    token: JournalToken
    snapshots: dict[str, CollectionSnapshot]
    files: dict[str, str]  # collection -> its snapshot's file, for save() to name again


def policy_digest(content_dir: Path, policy: WalkPolicy) -> str:
    """What a saved snapshot depends on besides the files: the folder and the walk policy."""
    return hashlib.sha256(repr((str(content_dir), policy)).encode()).hexdigest()


def reusable(files: JournalFiles, content_dir: Path, policy: WalkPolicy, names: Iterable[str]) -> Reuse | None:
    """The saved snapshots of ``names`` that the journal says are unchanged; None when no
    watcher answered (walk everything, save nothing)."""
    state = _load_state(files)
    since = JournalToken(state["watcher"], state["offset"], state["cookie"]) if state else None
    read = read_since(files, content_dir, since)
    if read is None:
        return None
    if state is None or read.everything or state.get("policy") != policy_digest(content_dir, policy):
        return Reuse(read.token, {}, {})  # a new watcher, lost events, another walk policy: walk all
    kept = _unchanged(files, content_dir, state, read, names)
    return Reuse(
        read.token,
        {name: snapshot for name, (snapshot, _) in kept.items()},
        {name: file for name, (_, file) in kept.items()},
    )


def _unchanged(
    files: JournalFiles, content_dir: Path, state: dict, read: JournalRead, names: Iterable[str]
) -> dict[str, tuple[CollectionSnapshot, str]]:
    kept: dict[str, tuple[CollectionSnapshot, str]] = {}
    saved: dict[str, dict] = state.get("collections", {})
    for name in names:
        entry = saved.get(name)
        if entry is None or entry.get("linked", True) or name in read.changed:
            continue
        if os.path.islink(content_dir / name):
            continue
        snapshot = _load_snapshot(files.snapshots / entry["file"], name)
        if snapshot is not None:
            kept[name] = (snapshot, entry["file"])
    return kept


def save(
    files: JournalFiles,
    content_dir: Path,
    policy: WalkPolicy,
    token: JournalToken,
    snapshots: Mapping[str, CollectionSnapshot],
    linked: Mapping[str, bool],
    reused: Mapping[str, str],
) -> None:
    """Keep ``snapshots`` (each collection's, taken after ``token``'s cookie) for the next
    detection; ``linked``: each walked one's, True when the journal cannot vouch for it;
    ``reused``: the files of those taken from the last (not written again)."""
    files.snapshots.mkdir(parents=True, exist_ok=True)
    named: dict[str, dict] = {}
    for name, snapshot in snapshots.items():
        if name in reused and name not in linked:  # not walked this time: named as before
            named[name] = {"file": reused[name], "linked": False}
            continue
        data = pickle.dumps(snapshot, protocol=pickle.HIGHEST_PROTOCOL)
        file = f"{hashlib.blake2b(data, digest_size=16).hexdigest()}.pickle"
        path = files.snapshots / file
        if not path.exists():
            atomic_write_bytes(path, data)
        named[name] = {"file": file, "linked": linked.get(name, True)}
    state = {
        "version": STATE_VERSION,
        "watcher": token.watcher,
        "offset": token.offset,
        "cookie": token.cookie,
        "policy": policy_digest(content_dir, policy),
        "collections": named,
    }
    atomic_write_bytes(files.folder / "state.json", orjson.dumps(state))
    _collect(files, {entry["file"] for entry in named.values()})


def _collect(files: JournalFiles, named: set[str]) -> None:
    """Remove the snapshot files no state names any more (see :data:`KEEP_UNNAMED_S`)."""
    cutoff = time.time() - KEEP_UNNAMED_S
    try:
        entries = list(os.scandir(files.snapshots))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.name not in named and entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
        except OSError:
            continue


def _load_state(files: JournalFiles) -> dict | None:
    try:
        state = orjson.loads((files.folder / "state.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        return None
    if not all(isinstance(state.get(key), kind) for key, kind in (("watcher", str), ("offset", int), ("cookie", str))):
        return None
    return state


def _load_snapshot(path: Path, name: str) -> CollectionSnapshot | None:
    try:
        snapshot = pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - a damaged or foreign file: walk the collection instead
        return None
    if not isinstance(snapshot, CollectionSnapshot) or snapshot.collection != name:
        return None
    return snapshot
