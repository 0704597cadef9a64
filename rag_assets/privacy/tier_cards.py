"""One tier's store at a glance (``rag status``, the UI's metadata, MCP's ``list_tiers``).

Apart from :mod:`rag_assets.privacy.vaults`, which builds the vault tiers, so that reading a
store's figures does not load the build's chunker, sanitiser and secret detector:
``rag status`` starts in a fraction of the time.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rag_assets.config import RagConfig, VaultConfig
from rag_assets.index import store
from rag_assets.index.freshness import age_label
from rag_assets.ingest.boundaries import vault_policy
from rag_assets.ingest.sources import combine_hashes, iter_collection_entries
from rag_assets.ingest.walker import MARKDOWN_SUFFIXES

if TYPE_CHECKING:
    from rag_assets.index.pg_sync import PgSyncResult


@dataclass
class TierCard:
    """One tier's store at a glance: the UI's metadata, ``rag status`` and the checks."""

    tier: str
    path: str
    exists: bool
    documents: int = 0
    chunks: int = 0
    embedded: int = 0
    size_bytes: int = 0
    model: str | None = None
    dimension: int | None = None
    built_at: str | None = None
    freshness: str = "Missing"
    age_seconds: float | None = None
    per_vault: dict[str, dict[str, int]] = field(default_factory=dict)
    vaults_configured: list[str] = field(default_factory=list)
    vaults_not_built: list[str] = field(default_factory=list)
    purged: list[str] = field(default_factory=list)
    postgres: PgSyncResult | None = None  # with store.backend postgres: this refresh's sync


def tier_card(cfg: RagConfig, tier: str, now: dt.datetime | None = None) -> TierCard:
    return card_of(cfg, tier, store.summarise(cfg.store_path(tier)), now)


def card_of(cfg: RagConfig, tier: str, summary: store.StoreSummary | None, now: dt.datetime | None = None) -> TierCard:
    """The tier's card from its store's ``summary`` (None: no store), read by the caller."""
    path = cfg.store_path(tier)
    wanted = [v.name for v in cfg.tier_vaults(tier)]
    card = TierCard(tier=tier, path=str(path), exists=summary is not None, vaults_configured=wanted)
    if summary is None:
        card.vaults_not_built = wanted
        return card
    label, age = age_label(summary.built_at, now)
    card.documents, card.chunks, card.size_bytes = summary.documents, summary.chunks, summary.size_bytes
    card.embedded = summary.embedded
    card.model, card.dimension, card.built_at = summary.model, summary.dimension, summary.built_at
    card.freshness, card.age_seconds = label, age
    card.per_vault = summary.per_collection
    built = store.read_sources(path)
    card.vaults_not_built = [name for name in wanted if name not in built]
    return card


def markdown_files_on_disk(cfg: RagConfig, vault: VaultConfig) -> int:
    if not vault.path.is_dir():
        return 0
    entries = iter_collection_entries(vault.path, vault_policy(cfg, vault))
    return sum(1 for rel, _, _ in entries if rel.lower().endswith(MARKDOWN_SUFFIXES))


def tiers_report(
    cfg: RagConfig,
    damaged: set[Path] | frozenset[Path] = frozenset(),
    summaries: Mapping[str, store.StoreSummary] | None = None,
) -> dict[str, dict]:
    """The three tiers for ``rag status``: store size, counts, model, built time, freshness;
    for the vault tiers, each vault's Markdown files on disk and rows in the store. A store
    in ``damaged`` is reported as such, not opened. ``summaries``: stores the caller has
    summarised already, by tier (counting a store's rows reads all of it: 0.4 s at 100k chunks)."""
    out: dict[str, dict] = {}
    for tier in ("public", "safe", "private"):
        if cfg.store_path(tier).resolve() in damaged:
            out[tier] = {"store": str(cfg.store_path(tier)), "exists": True, "damaged": True}
            continue
        known = (summaries or {}).get(tier)
        card = card_of(cfg, tier, known) if known is not None else tier_card(cfg, tier)
        entry = {
            "store": card.path,
            "exists": card.exists,
            "bytes": card.size_bytes,
            "documents": card.documents,
            "chunks": card.chunks,
            "embedded": card.embedded,
            "model": card.model,
            "dimension": card.dimension,
            "builtAt": card.built_at,
            "freshness": card.freshness,
            "ageSeconds": card.age_seconds,
            # What the rows were built from, in one hash (each collection's or vault's, combined).
            "contentHash": combine_hashes(store.read_sources(cfg.store_path(tier))) if card.exists else None,
        }
        if tier != "public":
            entry["vaults"] = {
                v.name: {
                    "path": str(v.path),
                    "tier": v.tier,
                    "markdownFiles": markdown_files_on_disk(cfg, v),
                    "documents": card.per_vault.get(v.name, {}).get("documents", 0),
                    "chunks": card.per_vault.get(v.name, {}).get("chunks", 0),
                    "built": v.name not in card.vaults_not_built,
                }
                for v in cfg.tier_vaults(tier)
            }
        out[tier] = entry
    return out
