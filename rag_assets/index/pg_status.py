"""What each tier's PostgreSQL store holds, and whether it matches its SQLite store (``rag status``)."""

from __future__ import annotations

from contextlib import closing
from typing import Any

from rag_assets.config import RagConfig
from rag_assets.config.masking import mask_url
from rag_assets.config.settings import TIERS
from rag_assets.index import pg_schema, store


def postgres_report(cfg: RagConfig) -> dict[str, Any]:
    """Per tier: schema, migration version, counts, model and build time, and ``inSync``
    (the same build as the SQLite store on this machine); ``error`` when the server cannot be
    read. The URL is shown with its password masked."""
    out: dict[str, Any] = {"url": mask_url(cfg.store.url or ""), "tiers": {}}
    for tier in TIERS:
        try:
            out["tiers"][tier] = _tier(cfg, tier)
        except pg_schema.PostgresStoreError as exc:
            out["tiers"][tier] = {"error": mask_url(str(exc))}
        except Exception as exc:  # noqa: BLE001 - a status report names the failure, never raises
            out["tiers"][tier] = {"error": mask_url(f"{type(exc).__name__}: {exc}")}
    return out


def _tier(cfg: RagConfig, tier: str) -> dict[str, Any]:
    s = pg_schema.schema_name(tier)
    assert cfg.store.url is not None  # StoreSection: the postgres backend needs a url
    with closing(pg_schema.connect(cfg.store.url, tier)) as conn:
        version = pg_schema.schema_version(conn, tier)
        entry: dict[str, Any] = {"schema": s, "schemaVersion": version, "synced": False}
        if version is None:
            return entry
        meta = conn.execute(f"SELECT model, dimension, built_at FROM {s}.embeddings_meta LIMIT 1").fetchone()
        documents, chunks = conn.execute(
            f"SELECT (SELECT count(*) FROM {s}.documents), (SELECT count(*) FROM {s}.chunks)"
        ).fetchone()
    entry.update(synced=meta is not None, documents=documents, chunks=chunks)
    if meta:
        entry.update(model=meta[0], dimension=meta[1], builtAt=meta[2])
    local = store.summarise(cfg.store_path(tier))
    if local is not None:
        entry["inSync"] = (local.documents, local.chunks, local.built_at) == (documents, chunks, entry.get("builtAt"))
    return entry


def report_lines(report: dict[str, Any]) -> list[str]:
    """``rag status``'s PostgreSQL section."""
    lines = [f"PostgreSQL  {report['url']}"]
    for tier, t in report["tiers"].items():
        if "error" in t:
            lines.append(f"  {tier:<8} {t['error']}")
        elif not t["synced"]:
            lines.append(f"  {tier:<8} {t['schema']}: not synced yet (`rag build` syncs it)")
        else:
            sync = {True: "in sync with the SQLite store", False: "behind the SQLite store: `rag build --force`"}
            lines.append(
                f"  {tier:<8} {t['schema']} (schema version {t['schemaVersion']}): {t['documents']} documents, "
                f"{t['chunks']} chunks, {t['model']}, built {t['builtAt']}; {sync.get(t.get('inSync'), 'no SQLite store here')}"
            )
    return lines
