"""An embedded record's facts file: ``<partition>.facts.json`` beside its pickle, holding its
:class:`~rag_assets.records.RecordFacts` (collection, content hash, model, counts) and the
pickle's size and mtime, so that a publish can tell an unchanged collection without unpickling
its records. Written by the Dagster IO manager after each embedded record; read by publishing.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.records import EmbeddedCollection, RecordFacts

FACTS_SUFFIX = ".facts.json"


def facts_path(path: Path) -> Path:
    return path.with_name(path.name + FACTS_SUFFIX)


def write_facts(record: EmbeddedCollection | RecordFacts, path: Path) -> None:
    """The record's facts beside its pickle, with the pickle's size and mtime: facts that do not
    match the pickle on disk (a record written since by a version without facts) are not read.
    ``record`` may be the facts themselves, taken when the record was made (a staged record)."""
    stat = path.stat()
    facts = record if isinstance(record, RecordFacts) else RecordFacts.of(record)
    payload = {"record": {"size": stat.st_size, "mtimeNs": stat.st_mtime_ns}, **facts.to_json()}
    atomic_write_bytes(facts_path(path), orjson.dumps(payload))


def read_facts(path: Path) -> RecordFacts | None:
    """The facts of the record at ``path``; None when there are none, or none of this pickle."""
    try:
        data = orjson.loads(facts_path(path).read_bytes())
        stat = path.stat()
        if data["record"] != {"size": stat.st_size, "mtimeNs": stat.st_mtime_ns}:
            return None
        return RecordFacts.from_json(data)
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
