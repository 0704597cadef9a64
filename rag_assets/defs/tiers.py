"""The Safe and Private tiers: per-vault assets that write the tier stores, and the stores.

``safe_vault_chunks`` (partitions ``safe_vaults``) and ``private_vault_chunks`` (partitions
``private_vaults``: every vault) are partitioned by the vaults of their tier. Each reads the
vault's notes, (Safe: sanitises them in memory,) chunks and embeds them and syncs that
vault's rows of its tier's SQLite store. They return no value for the IO manager on purpose:
a pickled record would put vault text in Dagster's storage. ``safe_store`` and
``private_store`` purge vaults that left the tier and describe the store (tier cards).
"""

import time
from collections.abc import Callable, Sequence

import dagster as dg

from rag_assets.defs.embeddings import usage_metadata
from rag_assets.defs.jobs import BUILD_TAG
from rag_assets.defs.outcomes import failed_partitions_metadata
from rag_assets.defs.partitions import private_vault_partitions, safe_vault_partitions
from rag_assets.defs.publish import INDEX_FRESHNESS
from rag_assets.defs.ranges import SINGLE_RUN, throttled
from rag_assets.defs.resources import RagSettings
from rag_assets.index import store
from rag_assets.privacy.audit import audit_store
from rag_assets.privacy.vaults import (
    TierCard,
    VaultBuild,
    build_vault_tier,
    refresh_tier_store,
    tally_counts,
    tier_card,
    vaults_riding_along,
)
from rag_assets.reporting import bullets_markdown, chunk_preview_markdown, human_bytes, skipped_markdown

SAFE_GROUP = "safe_tier"
PRIVATE_GROUP = "private_tier"
# The same windows as the public index (rag_assets/freshness.py).
TIER_FRESHNESS = INDEX_FRESHNESS


SKIPPED_ENTRIES_SHOWN = 200


def _vault_metadata(build: VaultBuild) -> dict:
    counts = tally_counts(build.tally)
    return {
        "vault": build.vault,
        "tier": build.tier,
        "files": build.files,
        "documents": build.documents,
        "chunks": build.chunks,
        "embedded": build.embedded,
        "failed_chunks": len(build.failed_chunk_ids),
        "failed_chunk_ids": dg.MetadataValue.md(bullets_markdown(build.failed_chunk_ids)),
        "skipped_files": len(build.skipped),
        "skipped": dg.MetadataValue.md(skipped_markdown(build.skipped)),
        # The same entries as data, for `rag build` to list (sanitised in the Safe tier).
        "skipped_entries": dg.MetadataValue.json(
            [{"path": s.path, "reason": s.reason} for s in build.skipped[:SKIPPED_ENTRIES_SHOWN]]
        ),
        "provider": build.provider,
        "model": build.model,
        "dimension": build.dimension,
        "chunks_written": build.sync.chunks_written,
        "chunks_deleted": build.sync.chunks_deleted,
        "store_rewritten": build.sync.full_rewrite,
        "source_hash": build.source_hash,
        **({"replacements": dg.MetadataValue.json(counts)} if build.tier == "safe" else {}),
        **_links_metadata(build),
        **usage_metadata(build.stats, None),
    }


def _links_metadata(build: VaultBuild) -> dict:
    """How the vault's links resolved: counts, and the unresolved, ambiguous and outside ones."""
    report = build.links
    if report is None:
        return {}
    return {
        "links": report.links,
        "links_resolved": report.resolved,
        "links_to_notes": report.to_notes,
        "links_to_files": report.to_files,
        "links_share_resolved": round(report.share_resolved(), 4),
        **{f"links_{kind}": report.counts.get(kind, 0) for kind in ("unresolved", "ambiguous", "outside")},
        "link_issue_counts": dg.MetadataValue.json(dict(sorted(report.counts.items()))),
        "link_issues": dg.MetadataValue.md(bullets_markdown([i.line() for i in report.issues])),
        # The same as data, for `rag build` and tests (sanitised in the Safe tier, as the links are).
        "link_issue_entries": dg.MetadataValue.json(
            [{"note": i.note, "target": i.target, "kind": i.kind, "detail": i.detail} for i in report.issues]
        ),
    }


def _each_vault(
    context: dg.AssetExecutionContext, build_one: Callable[[str], dict], lines: list[str], riding: Sequence[str] = ()
) -> None:
    """Build every vault of the run's range; per vault, its metadata on its own partition.

    ``riding``: vaults outside the range rebuilt too because the tier's model changed
    (:func:`vaults_riding_along`); their metadata stays in the log, as they are not
    partitions of this run.

    A failed vault (a missing folder, a refused embedder) does not stop the others: its rows
    stay as they were. The step then fails naming it, so no vault of this run is recorded as
    materialised; the runner still refreshes the tier store (purges, card, leak audit).
    ``lines``, which ``build_one`` extends, are logged at the end as one line: one stored
    event per step rather than several per vault (failures are logged as they happen).
    """
    failed: dict[str, str] = {}
    try:
        if riding:
            lines.append(f"the store's model changes: re-embedding its other vault(s) too ({', '.join(riding)})")
        for key in [*context.partition_keys, *riding]:
            started = time.perf_counter()
            try:
                metadata = build_one(key)
            except Exception as error:
                context.log.error(f"[{key}] failed: {type(error).__name__}: {error}")
                failed[key] = f"{type(error).__name__}: {error}"
                continue
            if key in riding:
                continue
            context.add_asset_metadata(
                {**metadata, "seconds": round(time.perf_counter() - started, 3)}, partition_key=key
            )
    finally:
        if lines:
            context.log.info("; ".join(lines))
    if failed:
        raise dg.Failure(
            description="; ".join(f"vault {key}: {why}" for key, why in failed.items()),
            metadata=failed_partitions_metadata(failed),
        )


@dg.asset(
    partitions_def=safe_vault_partitions,
    backfill_policy=SINGLE_RUN,
    group_name=SAFE_GROUP,
    kinds={"sqlite"},
    pool="embedding_api",
)
def safe_vault_chunks(context: dg.AssetExecutionContext, rag: RagSettings) -> None:
    """A safe vault's notes, sanitised in memory, chunked, embedded and synced into the Safe store."""
    cfg = rag.config
    full = context.run.tags.get(BUILD_TAG) == "full"
    selection = rag.select()
    lines = [f"Safe tier embedder {selection.provider}: {selection.embedder.model} ({selection.reason})"]
    progress = throttled(context.log.info)

    def one(key: str) -> dict:
        vault = cfg.vault(key)
        if vault.tier != "safe":
            # A partition left over from before the vault became private (the sensor removes it).
            removed = store.delete_collections(cfg.safe_store_path, [vault.name])
            lines.append(
                f"[{vault.name}] is a private vault: not in the Safe tier"
                + (" (its rows were removed)" if removed else "")
            )
            return {"vault": vault.name, "tier": vault.tier, "in_safe_tier": False}
        build = build_vault_tier(
            cfg,
            vault,
            "safe",
            selection.embedder,
            provider=selection.provider,
            sanitizer=rag.sanitizer(),
            batch_size=cfg.embedding.batch_size,
            full=full,
            log=lines.append,
            progress=progress,
        )
        return {
            **_vault_metadata(build),
            "in_safe_tier": True,
            "secrets_redacted": sum(build.tally.secrets.values()),
            "identities_replaced": sum(build.tally.identities.values()),
            # Sanitised text only: the preview is cut from what the store holds.
            "preview": dg.MetadataValue.md(chunk_preview_markdown(build.preview, limit=2)),
        }

    try:
        safe_keys = [k for k in context.partition_keys if k in {v.name for v in cfg.tier_vaults("safe")}]
        _each_vault(context, one, lines, vaults_riding_along(cfg, "safe", safe_keys, selection.embedder))
    finally:
        _close(selection.embedder)


@dg.asset(
    partitions_def=private_vault_partitions, backfill_policy=SINGLE_RUN, group_name=PRIVATE_GROUP, kinds={"sqlite"}
)
def private_vault_chunks(context: dg.AssetExecutionContext, rag: RagSettings) -> None:
    """A vault's notes, raw, chunked and embedded by a local-only embedder into the Private store."""
    cfg = rag.config
    full = context.run.tags.get(BUILD_TAG) == "full"
    selection = rag.select_private()  # PrivacyError unless provably local
    lines = [f"Private tier embedder {selection.provider}: {selection.embedder.model} ({selection.reason})"]
    progress = throttled(context.log.info)

    def one(key: str) -> dict:
        build = build_vault_tier(
            cfg,
            cfg.vault(key),
            "private",
            selection.embedder,
            provider=selection.provider,
            batch_size=cfg.private_embedding.batch_size,
            full=full,
            log=lines.append,
            progress=progress,
        )
        # No preview here: private text stays out of Dagster's event log.
        return _vault_metadata(build)

    try:
        _each_vault(
            context, one, lines, vaults_riding_along(cfg, "private", list(context.partition_keys), selection.embedder)
        )
    finally:
        _close(selection.embedder)


def _close(embedder) -> None:
    close = getattr(embedder, "close", None)
    if close:
        close()


def _card_metadata(card: TierCard) -> dict:
    rows = ["| vault | documents | chunks |", "| --- | ---: | ---: |"]
    rows += [f"| {name} | {c['documents']} | {c['chunks']} |" for name, c in sorted(card.per_vault.items())]
    return {
        "documents": card.documents,
        "chunks": card.chunks,
        "embedded": card.embedded,
        "per_vault": dg.MetadataValue.md("\n".join(rows)),
        "vaults_not_built": ", ".join(card.vaults_not_built) or "none",
        "purged_vaults": ", ".join(card.purged) or "none",
        "model": card.model or "",
        "dimension": card.dimension or 0,
        "store_size": human_bytes(card.size_bytes),
        "store_bytes": card.size_bytes,
        "built_at": card.built_at or "",
        "store_path": dg.MetadataValue.path(card.path),
        **(card.postgres.as_metadata() if card.postgres else {}),
    }


def _tier_store_asset(tier: str, group: str, description: str) -> dg.AssetsDefinition:
    @dg.asset(
        name=f"{tier}_store",
        deps=[dg.AssetDep(f"{tier}_vault_chunks", partition_mapping=dg.AllPartitionMapping())],
        group_name=group,
        kinds={"sqlite"},
        freshness_policy=TIER_FRESHNESS,
        description=description,
    )
    def tier_store(context: dg.AssetExecutionContext, rag: RagSettings) -> dg.MaterializeResult:
        """Purge vaults that left the tier, then describe its store (the tier card)."""
        card = refresh_tier_store(rag.config, tier)
        if card.purged:
            context.log.info(f"removed vault(s) that left the {tier} tier: {', '.join(card.purged)}")
        return dg.MaterializeResult(metadata=_card_metadata(card))

    return tier_store


safe_store = _tier_store_asset(
    "safe", SAFE_GROUP, "The Safe tier store (rag-store-blog.db): sanitised safe vaults, fit for any AI provider."
)
private_store = _tier_store_asset(
    "private",
    PRIVATE_GROUP,
    "The Private tier store (rag-store.db): every vault, raw, searchable with local models only.",
)


@dg.asset_check(
    asset=safe_store,
    blocking=True,
    description="Leak audit: rescans every text field of the store (chunks, documents and their frontmatter, the "
    "search and answer logs) with the full secret detector and the identity map; any finding fails.",
)
def safe_store_leak_audit(rag: RagSettings) -> dg.AssetCheckResult:
    cfg = rag.config
    sanitizer = rag.sanitizer()
    report = audit_store(cfg.safe_store_path, "safe", sanitizer.detector, sanitizer.identity_map)
    rows = ["| item | field | kind | preview |", "| --- | --- | --- | --- |"]
    rows += [f"| `{f.item_id}` | {f.field} | {f.kind} | `{f.preview}` |" for f in report.findings[:50]]
    return dg.AssetCheckResult(
        passed=report.ok,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "chunks_scanned": report.chunks_scanned,
            "documents_scanned": report.documents_scanned,
            "rows_scanned": dg.MetadataValue.json(report.rows_scanned),
            "findings": len(report.findings),
            "kinds": dg.MetadataValue.json(report.kinds()),
            "details": dg.MetadataValue.md("\n".join(rows) if report.findings else "_no findings_"),
        },
    )


def _vaults_built_check(tier: str):
    @dg.asset_check(
        asset=f"{tier}_store",
        name=f"{tier}_vaults_built",
        description=f"Every vault of the {tier.capitalize()} tier has been built into its store.",
    )
    def check(rag: RagSettings) -> dg.AssetCheckResult:
        card = tier_card(rag.config, tier)
        return dg.AssetCheckResult(
            passed=not card.vaults_not_built,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "vaults": ", ".join(card.vaults_configured) or "none",
                "not_built": ", ".join(card.vaults_not_built) or "none",
            },
        )

    return check


TIER_ASSETS = [safe_vault_chunks, private_vault_chunks, safe_store, private_store]
TIER_CHECKS = [safe_store_leak_audit, _vaults_built_check("safe"), _vaults_built_check("private")]
