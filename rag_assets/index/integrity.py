"""Noticing damaged outputs and caches: what ``rag status``, ``rag check`` and ``rag build``
verify before they trust a file.

The published generation is checked against its sidecar: every file it names (the index,
the browser's BM25 file, the binary vector file, the manifest and the static files) by size
and SHA-256, one generation named by every file, and the SQLite files with ``PRAGMA
quick_check``; every link a publish made must point where that publish pointed it. A damaged
output is repaired by the next ``rag build`` (rag_assets.index.repair, else a republish); a
damaged cache is discarded, never trusted.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rag_assets.base.sqlite_cache import changed_only_here, discard_if_damaged, sqlite_problem
from rag_assets.base.verified import RECORD_NAME, VerificationRecord, fingerprint
from rag_assets.config import TIERS, RagConfig
from rag_assets.index import generations, store_slots, tier_logs
from rag_assets.index.generations import Generation
from rag_assets.index.index_json import FILE_DIGEST_CHARS, segment_folder
from rag_assets.index.segments import SegmentFile, known_files, sha256_of
from rag_assets.ingest.stat_cache import part_files


@dataclass(frozen=True)
class Damage:
    """One output or cache that cannot be trusted, and why."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON file that must hold an object: None when it is missing, unparsable or of
    another type (a damaged file is then rebuilt, not trusted)."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def verification_record(cfg: RagConfig, *, deep: bool = False) -> VerificationRecord:
    """The record of the files verified so far (rag_assets.base.verified), beside the outputs;
    ``deep``: one that takes nothing as verified (`rag check --deep`)."""
    return VerificationRecord.load(cfg.data_dir / RECORD_NAME, deep=deep)


def checked(record: VerificationRecord | None, path: Path, check: str, verify: Callable[[], str | None]) -> str | None:
    """``verify()``, or nothing when ``record`` knows ``path`` passed ``check`` unchanged since."""
    return record.run(path, check, verify) if record is not None else verify()


def published_damage(generation: Generation, record: VerificationRecord | None = None) -> list[Damage]:
    """What is wrong with the published outputs of one generation ([] when they are whole
    or when nothing was published yet). With a ``record``, a file verified before and unchanged
    since is not read again."""
    g = generation
    present = [p for p in (g.index_path, g.meta_path, g.manifest_path, g.store_path) if p.exists()]
    if not present:
        return []
    damage = [
        Damage(p, "missing") for p in (g.index_path, g.meta_path, g.manifest_path, g.store_path) if not p.exists()
    ]
    meta = read_json_object(g.meta_path) if g.meta_path.exists() else None
    if g.meta_path.exists() and meta is None:
        damage.append(Damage(g.meta_path, "not a JSON object (damaged)"))
    if meta is not None and g.index_path.exists():
        damage.extend(_index_damage(g.index_path, meta, record))
    if meta is not None:
        damage.extend(_named_files_damage(g, meta, record))
    damage.extend(segment_damage(g, record))
    if g.manifest_path.exists() and (
        problem := checked(record, g.manifest_path, f"manifest:{g.id}", lambda: manifest_problem(g))
    ):
        damage.append(Damage(g.manifest_path, problem))
    # Remembered under the store's real file (the slot its link names): the publish that takes
    # the slot again two builds later then finds it verified (store_slots.prepare_slot).
    store_file = store_slots.slot_named(g.store_path) or g.store_path
    problem = checked(record, store_file, "quick_check", lambda: sqlite_problem(g.store_path))
    if problem:
        damage.append(Damage(g.store_path, problem))
    elif g.id is not None and g.store_path.exists():
        found = store_generation(g.store_path)
        if found != g.id:
            damage.append(Damage(g.store_path, f"belongs to generation {found}, not {g.id}"))
    if meta is not None and g.id is not None and meta.get("generation") != g.id:
        damage.append(Damage(g.meta_path, f"belongs to generation {meta.get('generation')}, not {g.id}"))
    return damage


def manifest_problem(g: Generation) -> str | None:
    """Why the generation's manifest is not its valid manifest (None: it is)."""
    manifest = read_json_object(g.manifest_path)
    # A segmented manifest names its ledger's segments (checked by segment_damage).
    if manifest is None or not (
        isinstance(manifest.get("documents"), dict) or isinstance(manifest.get("ledger"), list)
    ):
        return "not a valid manifest (damaged)"
    if g.id is not None and manifest.get("generation") != g.id:
        return f"belongs to generation {manifest.get('generation')}, not {g.id}"
    return None


def segment_damage(g: Generation, record: VerificationRecord | None) -> list[Damage]:
    """Each segment file the generation's index and manifest name (rag_assets.index.segments):
    there, of the size and SHA-256 they record. A segment verified before and unchanged since
    is not read again, so a one-file edit re-verifies the files it wrote."""
    folder = segment_folder(g.index_path)
    damage = []
    for name, file in known_files(g.index_path, g.manifest_path).items():
        path = folder / name
        if not path.is_file():
            damage.append(Damage(path, "missing (the index or manifest names it)"))
        elif problem := checked(record, path, f"sha256:{file.size}:{file.sha256}", _file_check(path, file)):
            damage.append(Damage(path, problem))
    return damage


def _file_check(path: Path, file: SegmentFile) -> Callable[[], str | None]:
    return lambda: _digest_problem(path, file.size, file.sha256)


def _index_damage(index_path: Path, meta: dict[str, Any], record: VerificationRecord | None) -> list[Damage]:
    size, sha = meta.get("sizeBytes"), meta.get("indexSha256")
    problem = checked(record, index_path, f"sha256:{size}:{sha}", lambda: _digest_problem(index_path, size, sha))
    return [Damage(index_path, problem)] if problem else []


@dataclass(frozen=True)
class Recorded:
    """What the sidecar records of one file: its size (when it does) and its SHA-256 (or the
    start of it: the ``files`` entries, see rag_assets.index.index_json.FILE_DIGEST_CHARS)."""

    size: int | None
    sha256: str

    def problem(self, size: int, digest: Callable[[], str]) -> str | None:
        """Why a file of ``size`` bytes whose SHA-256 ``digest()`` gives is not this one (None: it is)."""
        if self.size is not None and self.size != size:
            return f"is {size} bytes but its sidecar says {self.size} (truncated or replaced)"
        if len(self.sha256) < FILE_DIGEST_CHARS or not digest().startswith(self.sha256):
            return "content does not match the SHA-256 its sidecar records (damaged)"
        return None


def sidecar_entries(meta: dict[str, Any]) -> dict[str, Recorded]:
    """Every file besides the index that the sidecar names, by file name: the BM25 file
    (``lexical``), the vector file (``vectors``, int16-bin) and ``files`` (the manifest and the
    static files; sidecars of older versions have none)."""
    entries = {
        Path(str(entry.get("file") or "")).name: Recorded(entry.get("sizeBytes"), str(entry.get("sha256") or ""))
        for entry in (meta.get("lexical"), meta.get("vectors"))
        if isinstance(entry, dict)
    }
    files = meta.get("files")
    if isinstance(files, dict):
        entries.update((Path(name).name, Recorded(None, str(sha))) for name, sha in files.items())
    return {name: recorded for name, recorded in entries.items() if name}


def _named_files_damage(g: Generation, meta: dict[str, Any], record: VerificationRecord | None) -> list[Damage]:
    """Each file the sidecar names: there, of its size and digest."""
    damage = []
    for name, recorded in sidecar_entries(meta).items():
        path = g.manifest_path if name == generations.MANIFEST_NAME else g.folder / name
        if not path.is_file():
            if name == generations.MANIFEST_NAME or (g.id is None and name in generations.BROWSER_NAMES):
                continue  # said above; the single-folder layout of older versions had no browser search
            damage.append(Damage(path, "missing (the sidecar names it)"))
        elif problem := checked(
            record, path, f"sha256:{recorded.size}:{recorded.sha256}", _recorded_check(recorded, path)
        ):
            damage.append(Damage(path, problem))
    return damage


def _recorded_check(recorded: Recorded, path: Path) -> Callable[[], str | None]:
    return lambda: recorded.problem(path.stat().st_size, lambda: sha256_of(path))


def _digest_problem(path: Path, size_bytes: Any, sha256: Any) -> str | None:
    size = path.stat().st_size
    if size_bytes != size:
        return f"is {size} bytes but its sidecar says {size_bytes} (truncated or replaced)"
    if sha256 and sha256_of(path) != sha256:
        return "content does not match the SHA-256 its sidecar records (damaged)"
    return None


def publication_damage(
    cfg: RagConfig, generation: Generation, record: VerificationRecord | None = None
) -> list[Damage]:
    """What is wrong with the published generation and with the links that publish it."""
    link = generations.current_link(cfg)
    if generation.id is not None and not generation.folder.is_dir():
        return [Damage(link, f"points to {os.readlink(link)}, a generation that does not exist")]
    if generation.id is None and not link.exists() and generations.candidates(cfg):
        # Generations but no data/current: every published path leads nowhere.
        return [Damage(link, "link missing (the published generation is no longer linked)")]
    return published_damage(generation, record) + link_damage(cfg, generation)


def link_damage(cfg: RagConfig, generation: Generation) -> list[Damage]:
    """Each link a publish of ``generation`` made that is missing, not a link, or points
    elsewhere, and each stray one ([] for the older single-folder layout or a copy made with
    the links followed: they have no links)."""
    if generation.id is None:
        return []
    damage = []
    for path, target in generations.expected_links(cfg, generation).items():
        if not path.is_symlink():
            reason = "a file where a link should be" if path.exists() else "missing"
            damage.append(Damage(path, f"link {reason} (to {target})"))
        elif (found := os.readlink(path)) != target:
            damage.append(Damage(path, f"link points to {found}, not {target}"))
    for path in generations.stray_links(cfg, generation):
        damage.append(Damage(path, "link to a file the published generation does not have"))
    return damage


def store_generation(path: Path) -> str | None:
    """The generation a published store was written for (None for stores of older versions)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT generation FROM publication LIMIT 1").fetchone()
    except sqlite3.DatabaseError:
        return None
    return row[0] if row else None


def cache_files(cfg: RagConfig) -> tuple[list[Path], list[Path]]:
    """(SQLite caches and tier stores, JSON caches) that a build may discard when damaged:
    each is rebuilt from the content, never trusted."""
    sqlite_files = [
        cfg.embedding_cache_path,
        cfg.private_embedding_cache_path,
        cfg.document_cache_path,
        cfg.safe_store_path,
        cfg.private_store_path,
    ]
    stat_caches = [*part_files(cfg.stat_cache_path), *part_files(cfg.data_dir / "stat-cache-vaults.json")]
    json_files = [*stat_caches, cfg.shard_splits_path, cfg.indexed_ledger_path]
    return sqlite_files, json_files


def vouch_for_caches(cfg: RagConfig) -> None:
    """Remember as verified each SQLite cache that passed its ``quick_check`` (this build's, at
    its start), or that this build made, and was changed since only by this process's sessions
    (see rag_assets.base.sqlite_cache.changed_only_here): the next build's start does not read it
    whole again (at 100,000 chunks 2.3 of a one-file edit's 10 profiled CPU s; 4.9 GB of caches
    at a million chunks). A change by another process between those sessions, or by hand, has it
    verified again; `rag check --deep` reads every cache."""
    record = verification_record(cfg)
    for path in cache_files(cfg)[0]:
        # None: never passed a check, so vouched for only when this process made it (there was
        # no file when its first session began): a first build's caches, 4.9 GB at a million
        # chunks, were read whole by the start of the edit after it.
        passed = record.entries.get(str(path), {}).get("quick_check")
        if changed_only_here(path, passed) and passed != fingerprint(path):
            record.vouch(path, "quick_check")
    record.save()


def output_damage(cfg: RagConfig, record: VerificationRecord | None = None) -> list[Damage]:
    """Everything damaged: the published generation, the tier stores and the caches."""
    return publication_damage(cfg, generations.published(cfg), record) + cache_damage(cfg, record)


def cache_damage(cfg: RagConfig, record: VerificationRecord | None = None) -> list[Damage]:
    """The damaged caches and tier stores (not the published generation: see published_damage)."""
    return _cache_damage(cfg, record, discard=False)


def discard_damaged_caches(cfg: RagConfig, record: VerificationRecord | None = None) -> list[Damage]:
    """Delete damaged caches and tier stores (they are rebuilt by the build that follows);
    the published generation is left for the publish step to replace. Returns what went."""
    return _cache_damage(cfg, record, discard=True)


def _cache_damage(cfg: RagConfig, record: VerificationRecord | None, *, discard: bool) -> list[Damage]:
    sqlite_files, json_files = cache_files(cfg)
    damage = []
    for path in sqlite_files:
        problem = (
            discard_if_damaged(path, record) if discard else checked(record, path, "quick_check", _sqlite_check(path))
        )
        if problem:
            damage.append(Damage(path, problem))
    for path in json_files:
        if path.is_file() and checked(record, path, "json-object", _json_check(path)):
            if discard:
                path.unlink()
            damage.append(Damage(path, "not a JSON object (damaged)"))
    return damage


def log_files(cfg: RagConfig) -> list[Path]:
    """The tiers' log files (rag_assets.index.tier_logs), beside their stores."""
    return [tier_logs.log_path(cfg.store_path(tier)) for tier in TIERS]


def log_damage(cfg: RagConfig, record: VerificationRecord | None = None) -> list[Damage]:
    """The damaged log files. Not the outputs' damage: a build neither reads nor checks them (a
    long log would cost every build its ``quick_check``), and the next write to a damaged one
    sets it aside and starts a new one (rag_assets.index.tier_logs.connect)."""
    damage = []
    for path in log_files(cfg):
        if problem := checked(record, path, "quick_check", _sqlite_check(path)):
            damage.append(Damage(path, f"{problem}; set aside when it is next opened (a search, an answer, rag log)"))
    return damage


def _sqlite_check(path: Path) -> Callable[[], str | None]:
    return lambda: sqlite_problem(path)


def _json_check(path: Path) -> Callable[[], str | None]:
    return lambda: None if read_json_object(path) is not None else "not a JSON object (damaged)"
