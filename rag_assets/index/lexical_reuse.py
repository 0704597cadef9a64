"""A segment's BM25 file made again from the previous one: only the changed chunks tokenized.

A one-paragraph edit changes one or two chunks of a segment of thousands, yet indexing and
scanning every chunk of it in FTS5 (rag_assets.index.lexical_segments) was 0.41 s of a 100,000
-chunk edit. A chunk's postings are a function of the text FTS5 indexes (its row of
``chunk_fields``) and the column weights, so a chunk whose row is as it was in the previous
file of the same segment (same collection, bucket and bucket count) keeps its postings and
token count from that file; only the other chunks go through FTS5. The file is the one a full
render writes, byte for byte (terms in FTS5's order, which is the code-point order of Python's
``sorted``, postings term-major): the tests compare the two.

What tells the rows apart is a digest of each row, kept beside the data in
``data/lexical-digests/<BM25 file stem>.digests``: machine-local (never published), checked
by its own SHA-256, naming the SHA-256 of the BM25 file it was made with, written after that
file and collected with it. A previous file is used only when its bytes match the digest the
previous generation recorded and the digests file names, the digests file is whole and made
with the same weights, tokenizer and SQLite version, and the arrays are consistent; otherwise
every chunk is indexed, as before. The digests are a cache: one that cannot be written costs
the next edit a full render, never the publish.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.index.fields import FieldWeights
from rag_assets.index.fts import TOKENIZE
from rag_assets.index.lexical_segments import (
    SEGMENT_LEXICAL_VERSION,
    Postings,
    render_postings,
    scan_rows,
    segment_rows,
)
from rag_assets.index.segments import SegmentFile

DIGESTS_FOLDER = "lexical-digests"  # under the data folder
_DIGESTS_SUFFIX = ".digests"
_DIGEST_SIZE = 16  # bytes per row
_MAGIC = b"rag-bm25-row-digests 2\n"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreviousLexical:
    """The previous generation's BM25 file of the same segment, as its index named it."""

    folder: Path  # the segments folder
    file: SegmentFile
    data_dir: Path


def digests_folder(data_dir: Path) -> Path:
    return data_dir / DIGESTS_FOLDER


def _digests_path(data_dir: Path, lexical_name: str) -> Path:
    return digests_folder(data_dir) / (lexical_name.removesuffix(".bm25.json") + _DIGESTS_SUFFIX)


def _settings(fields: FieldWeights, bm25_sha256: str) -> bytes:
    """What a row's postings depend on besides its text (the file version, the exact weights,
    the tokenizer and the SQLite that ran it), and the BM25 file the digests belong to."""
    weights = ",".join(repr(float(w)) for w in fields.as_tuple())
    return f"{SEGMENT_LEXICAL_VERSION}|{weights}|{TOKENIZE}|{sqlite3.sqlite_version}|{bm25_sha256}\n".encode()


def row_digests(rows: Sequence[tuple[Any, ...]]) -> list[bytes]:
    """A digest of each row's indexed text (``(rowid, *columns)``: the rowid left out)."""
    return [hashlib.blake2b(orjson.dumps(row[1:]), digest_size=_DIGEST_SIZE).digest() for row in rows]


def save_digests(data_dir: Path, file: SegmentFile, fields: FieldWeights, digests: list[bytes]) -> None:
    """Keep the row digests of the BM25 file ``file`` for the next render of its segment (a
    failure is logged: the next render of the segment indexes every chunk)."""
    body = _MAGIC + _settings(fields, file.sha256) + b"".join(digests)
    path = _digests_path(data_dir, file.name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, body + hashlib.sha256(body).digest())
    except OSError as error:
        log.warning("could not keep the row digests of %s (%s): its next render indexes every chunk", file.name, error)


def _load_digests(data_dir: Path, file: SegmentFile, fields: FieldWeights) -> list[bytes] | None:
    """The kept row digests of BM25 file ``file``; None when missing, damaged, of other
    settings or made with another file's bytes."""
    try:
        data = _digests_path(data_dir, file.name).read_bytes()
    except OSError:
        return None
    body, check = data[:-32], data[-32:]
    head = _MAGIC + _settings(fields, file.sha256)
    if hashlib.sha256(body).digest() != check or not body.startswith(head):
        return None
    rows = body[len(head) :]
    if len(rows) % _DIGEST_SIZE:
        return None
    return [rows[i : i + _DIGEST_SIZE] for i in range(0, len(rows), _DIGEST_SIZE)]


def _array(payload: dict[str, Any], key: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(payload[key]), dtype=dtype).astype(np.int64 if dtype != "<f4" else np.float32)


def _decode(data: bytes) -> Postings | None:
    """A BM25 segment file's postings; None when it is not one this version writes, whole."""
    try:
        payload = orjson.loads(data)
        if payload.get("version") != SEGMENT_LEXICAL_VERSION:
            return None
        terms, df = payload["terms"], np.asarray(payload["df"], dtype=np.int64)
        position = _array(payload, "postingChunks", "<u4")
        tf = _array(payload, "postingTf", "<f4")
        doc_len = _array(payload, "docLength", "<u4")
        n = int(payload["chunks"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None
    if (
        not isinstance(terms, list)
        or len(terms) != len(df)
        or int(df.sum()) != len(position)
        or len(tf) != len(position)
        or len(doc_len) != n
        or (len(position) and (position.min() < 0 or position.max() >= n))
    ):
        return None
    term = np.repeat(np.arange(len(terms), dtype=np.int64), df)
    return Postings(terms, term, position, tf, doc_len)


def _previous(previous: PreviousLexical | None, fields: FieldWeights) -> tuple[Postings, list[bytes]] | None:
    """The previous file's postings and row digests, when both are whole and agree."""
    if previous is None:
        return None
    digests = _load_digests(previous.data_dir, previous.file, fields)
    if digests is None:
        return None
    try:
        data = (previous.folder / previous.file.name).read_bytes()
    except OSError:
        return None
    # Damage in the previous file must not be carried into a file named by a new digest.
    if len(data) != previous.file.size or hashlib.sha256(data).hexdigest() != previous.file.sha256:
        return None
    postings = _decode(data)
    if postings is None or len(postings.doc_len) != len(digests):
        return None
    return postings, digests


def _reused(old: Postings, sources: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The old postings of the chunks at old positions ``sources``, moved to ``targets``:
    (term as an index into ``old.terms``, position, tf)."""
    order = np.argsort(old.position, kind="stable")
    counts = np.bincount(old.position, minlength=len(old.doc_len))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    lengths = counts[sources]
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64)
    picked = order[np.repeat(starts[sources] - offsets, lengths) + np.arange(int(lengths.sum()))]
    return old.term[picked], np.repeat(targets, lengths), old.tf[picked]


def _merge(old: Postings, sources: np.ndarray, targets: np.ndarray, fresh: Postings) -> Postings:
    """The segment's postings: the old ones of the kept chunks and the fresh ones."""
    old_term, old_position, old_tf = _reused(old, sources, targets)
    terms = sorted(set(old.terms).union(fresh.terms))
    index = {term: i for i, term in enumerate(terms)}
    old_map = np.fromiter((index[t] for t in old.terms), dtype=np.int64, count=len(old.terms))
    fresh_map = np.fromiter((index[t] for t in fresh.terms), dtype=np.int64, count=len(fresh.terms))
    doc_len = fresh.doc_len.copy()
    doc_len[targets] = old.doc_len[sources]
    return Postings(
        terms,
        np.concatenate([old_map[old_term], fresh_map[fresh.term]]),
        np.concatenate([old_position, fresh.position]),
        np.concatenate([old_tf, fresh.tf]).astype(np.float32),
        doc_len,
    )


def render_segment(
    conn: Any, rowids: np.ndarray, fields: FieldWeights, previous: PreviousLexical | None
) -> tuple[bytes, list[bytes]]:
    """The BM25 file of the segment whose chunks have the store rowids ``rowids`` (see the
    module docstring) and its rows' digests (for :func:`save_digests`)."""
    columns, rows = segment_rows(conn, rowids)
    digests = row_digests(rows)
    n = len(rows)
    found = _previous(previous, fields)
    if found is None:
        return render_postings(scan_rows(columns, rows, np.arange(n), fields, n), rowids), digests
    old, old_digests = found
    at = {digest: i for i, digest in enumerate(old_digests)}
    source = np.fromiter((at.get(d, -1) for d in digests), dtype=np.int64, count=n)
    targets = np.flatnonzero(source >= 0)
    changed = np.flatnonzero(source < 0)
    fresh = scan_rows(columns, [rows[i] for i in changed.tolist()], changed, fields, n)
    return render_postings(_merge(old, source[targets], targets, fresh), rowids), digests


def collect_digests(data_dir: Path, keep: Iterable[str]) -> list[str]:
    """Remove the digests files of BM25 files not in ``keep`` (segment file names); their names."""
    folder = digests_folder(data_dir)
    if not folder.is_dir():
        return []
    wanted = {name.removesuffix(".bm25.json") + _DIGESTS_SUFFIX for name in keep if name.endswith(".bm25.json")}
    removed = []
    for entry in sorted(folder.iterdir()):
        if entry.name in wanted or not entry.is_file():
            continue  # what is not a digests file is not ours to remove (as in data/segments)
        entry.unlink(missing_ok=True)
        removed.append(entry.name)
    return removed
