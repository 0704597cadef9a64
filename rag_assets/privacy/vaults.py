"""Note vaults into the Safe and Private tier stores (no Dagster import).

One vault is built for one tier by :func:`build_vault_tier`: parse the notes, sanitise them
in memory (Safe only), chunk, embed (Private: a local-only embedder and its own cache) and
sync that vault's rows of the tier's store in one transaction, leaving the other vaults'
rows as they are. :func:`refresh_tier_store` then purges vaults that left the tier (removed
from the config, or moved from safe to private) and describes the store.

Nothing here writes raw Safe-tier text: the document cache is not used for vaults (it
would hold raw chunks), and the store rows, the embedding cache keys and the returned
report are all computed from sanitised text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from rag_assets.base.atomic import atomic_write_bytes
from rag_assets.base.sqlite_cache import discard_if_damaged
from rag_assets.base.work_pool import WorkPool
from rag_assets.config import RagConfig, VaultConfig
from rag_assets.embed import Embedder
from rag_assets.embed.cache import EmbeddingCache
from rag_assets.index import pg_sync, store
from rag_assets.index.integrity import read_json_object
from rag_assets.ingest.boundaries import vault_policy
from rag_assets.ingest.link_resolution import LinkReport, resolve_vault
from rag_assets.ingest.obsidian import NOTE_READING_VERSION
from rag_assets.ingest.parsing import parse_collection
from rag_assets.ingest.sources import combine_hashes, snapshot_collection
from rag_assets.ingest.stat_cache import StatCache
from rag_assets.ingest.transclusion import TRANSCLUSION_VERSION, transclude_vault
from rag_assets.pipeline import (
    EmbeddingStats,
    build_pool,
    chunk_collection,
    embed_collection,
    utc_now_iso,
)
from rag_assets.privacy.sanitize import Sanitizer, SanitizeTally, fingerprint_for
from rag_assets.privacy.tier_cards import TierCard, tier_card
from rag_assets.records import Chunk, CollectionSnapshot, ParsedCollection, SkippedFile

Log = Callable[[str], None]
VAULT_TIERS = ("safe", "private")


class VaultMissing(FileNotFoundError):
    """A configured vault folder is absent; its rows are kept rather than silently purged."""


@dataclass
class VaultBuild:
    """What one vault's build for one tier did, for the asset metadata and the CLI."""

    vault: str
    tier: str
    files: int
    documents: int
    chunks: int
    embedded: int
    failed_chunk_ids: list[str]
    skipped: list[SkippedFile]
    sync: store.SyncResult
    stats: EmbeddingStats
    model: str
    provider: str
    dimension: int
    source_hash: str
    tally: SanitizeTally = field(default_factory=SanitizeTally)
    preview: list[Chunk] = field(default_factory=list)  # Safe tier only: sanitised chunks
    links: LinkReport | None = None  # how the notes' links resolved (sanitised in the Safe tier)


def vault_stat_cache(cfg: RagConfig, *, trust: bool = True) -> StatCache:
    # Separate from the collections' cache: a vault may share a name with a collection.
    return StatCache(cfg.data_dir / "stat-cache-vaults.json", trust=trust)


def snapshot_vault(cfg: RagConfig, vault: VaultConfig, stat_cache: StatCache | None = None) -> CollectionSnapshot:
    return snapshot_collection(
        vault.path.parent, vault.name, stat_cache, root=vault.path, policy=vault_policy(cfg, vault)
    )


def parse_vault(
    cfg: RagConfig, vault: VaultConfig, snapshot: CollectionSnapshot, pool: WorkPool | None = None
) -> ParsedCollection:
    """The vault's notes read as Obsidian shows them, from the files its snapshot hashed
    (``pool``: in its worker processes, on this machine)."""
    return parse_collection(
        vault.path.parent,
        vault.name,
        snapshot.content_hash,
        root=vault.path,
        policy=vault_policy(cfg, vault),
        hashed=snapshot.files,
        obsidian=True,
        pool=pool,
    )


def source_hash(tier: str, content_hash: str, sanitizer_fingerprint: str | None, transclude: bool = False) -> str:
    """What a tier's rows of a vault were built from: the files, the way notes are read (a
    new reading rebuilds the vault once), and for Safe the rules.

    With ``transclude_embeds`` on, a note's chunks hold the text of the notes it embeds; the
    hash covers every file of the vault, so editing an embedded note rebuilds the vault and
    re-reads the notes that embed it (their chunks change, nothing else is re-embedded).
    Turning the setting on or off rebuilds the vault once."""
    parts = {"content": content_hash, "reading": NOTE_READING_VERSION}
    if transclude:
        parts["transclude"] = TRANSCLUSION_VERSION
    if tier == "safe":
        parts["sanitizer"] = sanitizer_fingerprint or ""
    return combine_hashes(parts)


def embedding_cache_path(cfg: RagConfig, tier: str) -> Path:
    return cfg.private_embedding_cache_path if tier == "private" else cfg.embedding_cache_path


def build_vault_tier(
    cfg: RagConfig,
    vault: VaultConfig,
    tier: str,
    embedder: Embedder,
    *,
    provider: str,
    sanitizer: Sanitizer | None = None,
    batch_size: int = 50,
    full: bool = False,
    log: Log = lambda _: None,
    progress: Log | None = None,
) -> VaultBuild:
    """Parse, (sanitise,) chunk and embed one vault and sync its rows of the tier's store.

    ``log`` gets what was done (sanitised, stored); ``progress`` (default ``log``) the
    embedding batches."""
    if tier not in VAULT_TIERS:
        raise ValueError(f"unknown vault tier {tier!r}")
    if tier == "safe" and sanitizer is None:
        raise ValueError("the Safe tier needs a sanitizer")
    if not vault.path.is_dir():
        raise VaultMissing(
            f"vault {vault.name!r}: folder {vault.path} does not exist; fix its path in rag.yaml or remove the "
            "vault (its rows stay in the stores until then)"
        )
    stat_cache = vault_stat_cache(cfg, trust=not full)
    snapshot = snapshot_vault(cfg, vault, stat_cache)
    stat_cache.save()
    with build_pool(cfg) as pool:  # the notes read on every core, on this machine
        parsed = parse_vault(cfg, vault, snapshot, pool)
    tally = SanitizeTally()
    if tier == "safe":
        assert sanitizer is not None
        parsed, tally = sanitizer.collection(parsed)
        log(
            f"[{vault.name}] sanitised {len(parsed.documents)} notes: {sum(tally.secrets.values())} secrets redacted, "
            f"{sum(tally.identities.values())} identifying values replaced"
        )
    fingerprint = sanitizer.fingerprint if sanitizer is not None else None
    parsed.content_hash = source_hash(tier, snapshot.content_hash, fingerprint, vault.transclude_embeds)
    # After sanitising: a Safe link's target and the names it is matched with are both sanitised.
    files = [p.removeprefix(vault.name + "/") for p in snapshot.files]
    resolved = resolve_vault(vault.name, parsed.documents, [sanitizer.text(f) for f in files] if sanitizer else files)
    parsed.documents = resolved.documents
    if vault.transclude_embeds:  # after sanitising: the embedded text is the Safe text of a note of this vault
        parsed.documents = transclude_vault(parsed.documents, resolved.report)
    log(f"[{vault.name}] links: {resolved.report.summary()}")
    with build_pool(cfg) as pool:
        chunked = chunk_collection(parsed, cfg.chunking, cache=None, pool=pool)
    embedded, stats = embed_collection(
        chunked,
        embedder,
        cache=EmbeddingCache(embedding_cache_path(cfg, tier)),
        batch_size=batch_size,
        provider=provider,
        log=log if progress is None else progress,
    )
    damaged = discard_if_damaged(cfg.store_path(tier))
    if damaged:
        log(f"[{vault.name}] the {tier} store was damaged ({damaged}): discarded; every vault is rebuilt into it")
    sync = store.sync_contents(
        cfg.store_path(tier),
        [embedded],
        model=embedded.model,
        dimension=embedded.dimension,
        built_at=utc_now_iso(),
        scope={vault.name},
    )
    if fingerprint is not None:
        record_rules_fingerprint(cfg, vault.name, fingerprint)
    log(
        f"[{vault.name}] {tier} store: {sync.chunks_written} chunks written, {sync.chunks_deleted} deleted"
        + (" (store rewritten: new model)" if sync.full_rewrite else "")
    )
    return VaultBuild(
        vault=vault.name,
        tier=tier,
        files=len(snapshot.files),
        documents=len(embedded.documents),
        chunks=len(chunked.chunks),
        embedded=len(embedded.chunks),
        failed_chunk_ids=embedded.failed_chunk_ids,
        skipped=list(embedded.skipped),
        sync=sync,
        stats=stats,
        model=embedded.model,
        provider=embedded.provider,
        dimension=embedded.dimension,
        source_hash=parsed.content_hash,
        tally=tally,
        preview=list(embedded.chunks[:2]) if tier == "safe" else [],
        links=resolved.report,
    )


def vaults_riding_along(cfg: RagConfig, tier: str, requested: list[str], embedder: Embedder) -> list[str]:
    """The tier's other built vaults that must be re-embedded with ``requested``.

    One store holds one model. When this build's model is not the store's, syncing only the
    requested vaults rewrites the store without the others, and their notes would be
    unsearchable until their own rebuild. So every vault the store holds is rebuilt in the
    same step, with the new model; with the model unchanged, none is.
    """
    summary = store.summarise(cfg.store_path(tier))
    if summary is None or summary.model is None:
        return []
    if (summary.model, summary.dimension) == (embedder.model, embedder.dimension):
        return []
    held = store.read_sources(cfg.store_path(tier))
    return [v.name for v in cfg.tier_vaults(tier) if v.name not in requested and v.name in held]


def refresh_tier_store(cfg: RagConfig, tier: str) -> TierCard:
    """Purge vaults that no longer belong to the tier, then describe the store."""
    path = cfg.store_path(tier)
    wanted = [v.name for v in cfg.tier_vaults(tier)]
    if not path.exists():
        store.create_empty(path)  # so readers find the tier's file before its first vault
    purged = store.purge_collections(path, wanted)
    card = tier_card(cfg, tier)
    card.purged = purged
    card.postgres = pg_sync.sync_if_configured(cfg, tier)  # one transaction, only the changed rows
    return card


@dataclass
class VaultChange:
    vault: str
    tier: str
    status: str  # new | changed | unchanged | missing
    source_hash: str | None


def detect_vault_changes(cfg: RagConfig) -> list[VaultChange]:
    """Per vault and tier: do the store's rows still match the notes (and the Safe rules)?"""
    sanitizer_fingerprint = fingerprint_for(cfg.identity_map_path) if cfg.tier_vaults("safe") else None
    stat_cache = vault_stat_cache(cfg)
    changes = []
    built = {tier: store.read_sources(cfg.store_path(tier)) for tier in VAULT_TIERS}
    for tier in VAULT_TIERS:
        for vault in cfg.tier_vaults(tier):
            if not vault.path.is_dir():
                changes.append(VaultChange(vault.name, tier, "missing", None))
                continue
            snapshot = snapshot_vault(cfg, vault, stat_cache)
            current = source_hash(tier, snapshot.content_hash, sanitizer_fingerprint, vault.transclude_embeds)
            before = built[tier].get(vault.name)
            status = "new" if before is None else "unchanged" if before == current else "changed"
            changes.append(VaultChange(vault.name, tier, status, current))
    stat_cache.save()
    return changes


def rules_ledger_path(cfg: RagConfig) -> Path:
    """Which Safe rules each vault's Safe rows were sanitised with (fingerprints only): lets the
    planner tell a change of the rules from a change of the notes."""
    return cfg.data_dir / "safe-rules.json"


def current_rules_fingerprint(cfg: RagConfig) -> str:
    return fingerprint_for(cfg.identity_map_path)


def built_rules_fingerprints(cfg: RagConfig) -> dict[str, str]:
    ledger = read_json_object(rules_ledger_path(cfg)) or {}
    return {k: v for k, v in ledger.items() if isinstance(v, str)}


def record_rules_fingerprint(cfg: RagConfig, vault: str, fingerprint: str) -> None:
    # One tier step builds its vaults one after another, so no other writer interleaves.
    ledger = {**built_rules_fingerprints(cfg), vault: fingerprint}
    atomic_write_bytes(rules_ledger_path(cfg), orjson.dumps(ledger, option=orjson.OPT_SORT_KEYS))


def departed_vaults(cfg: RagConfig) -> dict[str, list[str]]:
    """Per tier, the vaults its store holds that the config no longer gives it."""
    out = {}
    for tier in VAULT_TIERS:
        wanted = {v.name for v in cfg.tier_vaults(tier)}
        gone = sorted(set(store.read_sources(cfg.store_path(tier))) - wanted)
        if gone:
            out[tier] = gone
    return out


def tally_counts(tally: SanitizeTally) -> dict[str, int]:
    """Replacements per kind, secrets as ``secret:<kind>`` and identities as ``identity:<kind>``."""
    merged: Counter = Counter()
    merged.update({f"secret:{k}": v for k, v in tally.secrets.items()})
    merged.update({f"identity:{k}": v for k, v in tally.identities.items()})
    return dict(sorted(merged.items()))
