"""Repairing a damaged publication in place, without a republish: what ``rag build`` tries
first when the checks of rag_assets.index.integrity find damage.

A lost link is put back; a damaged file that can be made again from the sound files of the
same generation (the static files from the package, the BM25 file from the store, the vector
file from the store's vectors, both in the index's order) is made again and put in place in
one rename, but only when its bytes have exactly the size and SHA-256 the sidecar records, so
a repair never publishes anything the build did not. A lost ``data/current`` is pointed again
at the newest generation that is whole. What cannot be repaired here (the index, the sidecar,
the manifest, the store, or a file whose sources are damaged) is left to a republish.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rag_assets.base.atomic import commit_staged, discard_staged, stage_bytes
from rag_assets.config import RagConfig
from rag_assets.index import generations, index_json
from rag_assets.index.browser import STATIC_FILES, static_file
from rag_assets.index.generations import Generation
from rag_assets.index.integrity import Damage, Recorded, published_damage, sidecar_entries
from rag_assets.index.lexical_json import LEXICAL_NAME, write_lexical
from rag_assets.index.segments import segments_folder
from rag_assets.index.vector_file import VECTORS_NAME, render_vector_file

_BATCH = 500  # chunk IDs a query (below SQLite's limit of bound parameters)


def repair_in_place(cfg: RagConfig, damage: list[Damage]) -> list[Path]:
    """Repair what of ``damage`` (found by publication_damage) can be repaired without a
    republish; the paths repaired. Under the publish lock, so no publish runs meanwhile."""
    if not damage:
        return []
    with generations.publish_lock(cfg):
        repaired = _relink_lost_current(cfg, damage)
        gen = generations.published(cfg)
        if gen.id is None or not gen.folder.is_dir():
            return repaired
        damaged = {d.path for d in damage}
        _discard_damaged_segments(cfg, damaged)
        repaired += _restore_files(cfg, gen, damaged)
        return repaired + generations.restore_links(cfg, gen)


def _discard_damaged_segments(cfg: RagConfig, damaged: set[Path]) -> None:
    """Remove the damaged segment files (rag_assets.index.segments): a publish writes a segment
    whose file is missing, so the republish the damage calls for renders them again; one left
    in place would be named again as it is."""
    folder = segments_folder(cfg.data_dir)
    for path in damaged:
        if path.parent == folder:
            path.unlink(missing_ok=True)


def _relink_lost_current(cfg: RagConfig, damage: list[Damage]) -> list[Path]:
    """A ``data/current`` that is missing, dangling or points at anything but a generation: point
    it at the newest generation that is whole (the one it named, unless a killed publish left a
    newer whole one)."""
    link = generations.current_link(cfg)
    if link not in {d.path for d in damage}:
        return []
    for candidate in generations.candidates(cfg):
        if candidate.meta_path.is_file() and not published_damage(candidate):
            generations.relink_current(cfg, candidate)
            return [link]
    return []


def _restore_files(cfg: RagConfig, gen: Generation, damaged: set[Path]) -> list[Path]:
    """Make again each damaged file the sidecar names that has a maker here, and keep it when it
    matches the sidecar's record."""
    if gen.index_path in damaged or gen.meta_path in damaged:
        return []  # the record to check against, or the order to follow, is not to be trusted
    meta = index_json.read_meta(gen.meta_path)
    if meta is None:
        return []
    makers: dict[str, Callable[[], bytes | None]] = {
        name: functools.partial(static_file, name) for name in STATIC_FILES
    }
    if gen.store_path not in damaged:
        makers[LEXICAL_NAME] = lambda: _lexical_bytes(cfg, gen, meta)
        makers[VECTORS_NAME] = lambda: _vector_bytes(gen)
    repaired = []
    for name, recorded in sidecar_entries(meta).items():
        path = gen.folder / name
        if path in damaged and name in makers and _put_back(path, makers[name](), recorded):
            repaired.append(path)
    return repaired


def _put_back(path: Path, data: bytes | None, recorded: Recorded) -> bool:
    """Replace ``path`` with ``data`` in one rename when ``data`` is what the sidecar records."""
    if data is None or recorded.problem(len(data), lambda: hashlib.sha256(data).hexdigest()):
        return False
    commit_staged(stage_bytes(path, data), path)
    return True


def _lexical_bytes(cfg: RagConfig, gen: Generation, meta: dict[str, Any]) -> bytes | None:
    """The BM25 file as the publish wrote it: read from the generation's store, chunks numbered
    in the index's order."""
    tmp = stage_bytes(gen.folder / LEXICAL_NAME, b"")
    try:
        ids = index_json.chunk_ids_in_order(gen.index_path)
        write_lexical(tmp, gen.store_path, ids, cfg.collection_weights, meta.get("provider"), generation=gen.id)
        return tmp.read_bytes()
    except (sqlite3.DatabaseError, KeyError, ValueError):
        return None
    finally:
        discard_staged(tmp)


def _vector_bytes(gen: Generation) -> bytes | None:
    """The vector file (int16-bin) as the publish wrote it: the store's float32 vectors in the
    index's order (None when a chunk has none)."""
    ids = index_json.chunk_ids_in_order(gen.index_path)
    try:
        with contextlib.closing(sqlite3.connect(f"file:{gen.store_path}?mode=ro", uri=True)) as conn:
            row = conn.execute("SELECT dimension FROM embeddings_meta LIMIT 1").fetchone()
            if row is None:
                return None
            matrix = np.zeros((len(ids), int(row[0])), dtype=np.float32)
            position = {chunk_id: i for i, chunk_id in enumerate(ids)}
            filled = 0
            # In batches of IDs: the vectors of a large index are not all held twice.
            for start in range(0, len(ids), _BATCH):
                batch = ids[start : start + _BATCH]
                marks = ",".join("?" * len(batch))
                for chunk_id, blob in conn.execute(f"SELECT id, embedding FROM chunks WHERE id IN ({marks})", batch):
                    if blob is None or len(blob) != matrix.shape[1] * 4:
                        return None
                    matrix[position[chunk_id]] = np.frombuffer(blob, dtype=np.float32)
                    filled += 1
    except sqlite3.DatabaseError:
        return None
    return render_vector_file(matrix, gen.id) if filled == len(ids) else None
