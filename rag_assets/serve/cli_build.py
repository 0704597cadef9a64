"""``rag config``, ``rag build`` and ``rag check``: validating the configuration, running the
Dagster assets in-process, and saying what changed since the last build."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from rag_assets.config import (
    RagConfig,
    collect_overrides,
    effective_settings,
    mask_secrets,
)
from rag_assets.embed import select_embedder
from rag_assets.index import generations, index_json
from rag_assets.index.freshness import ChangeReport, detect_changes, encoding_change
from rag_assets.index.integrity import cache_damage, discard_damaged_caches
from rag_assets.index.repair import repair_in_place
from rag_assets.ingest.collections import discover_collections
from rag_assets.pipeline import plan_collection
from rag_assets.privacy.vaults import (
    departed_vaults,
    detect_vault_changes,
)
from rag_assets.serve.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from rag_assets.serve.status import print_status

# --- config ----------------------------------------------------------------------------------


def cmd_config(cfg: RagConfig, args: argparse.Namespace) -> int:
    """The configuration is valid (main() loaded it); print it with where its values came from."""
    overrides = collect_overrides(
        os.environ,
        content_dir=args.content_dir,
        output_dir=args.output_dir,
        embedder=args.embedder,
        private_embedder=args.private_embedder,
    )
    print(f"# configuration file: {cfg.config_path or 'none (built-in defaults)'}")
    for override in overrides:
        print(f"# {'.'.join(override.path)} set by {override.label}")
    base_url = os.environ.get("RAG_OPENAI_BASE_URL")
    if base_url:
        print(f"# embedder.openai.base_url replaced at run time by $RAG_OPENAI_BASE_URL: {mask_secrets(base_url, 'base_url')}")
    print(yaml.safe_dump(effective_settings(cfg), sort_keys=False, allow_unicode=True), end="")
    return EXIT_OK


# --- build -----------------------------------------------------------------------------------


def cmd_build(cfg: RagConfig, args: argparse.Namespace) -> int:
    discovery = discover_collections(cfg)
    for folder, reason in discovery.excluded:
        print(f"note: folder {folder!r} is not a collection: {reason}")
    for name in discovery.loose_files:
        print(f"note: {name} is directly in the content folder, outside any collection; not indexed")
    for name in discovery.missing:
        print(f"warning: collection {name!r} is configured but {cfg.content_dir / name} does not exist")
    if not cfg.content_dir.is_dir():
        print(f"rag: content folder {cfg.content_dir} does not exist; set content_dir in rag.yaml or --content-dir", file=sys.stderr)
        return EXIT_USAGE
    targets = list(args.collection or ([] if args.vault else discovery.collections))
    unknown = [c for c in targets if c not in discovery.collections]
    if unknown:
        print(
            f"rag: unknown collection(s) {', '.join(unknown)}; known: {', '.join(discovery.collections) or 'none'}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    vault_names = [v.name for v in cfg.vaults]
    vault_targets = list(args.vault or ([] if args.collection else vault_names))
    unknown = [v for v in vault_targets if v not in vault_names]
    if unknown:
        print(f"rag: unknown vault(s) {', '.join(unknown)}; known: {', '.join(vault_names) or 'none'}", file=sys.stderr)
        return EXIT_USAGE
    if not targets and not vault_targets:
        print(f"rag: no collections found in {cfg.content_dir}; add a folder of Markdown files", file=sys.stderr)
        return EXIT_USAGE
    if args.dry_run:
        return _dry_run(cfg, targets)
    for damage in discard_damaged_caches(cfg):
        print(f"note: discarded {damage}; it is rebuilt by this build")
    publish = bool(targets)
    partitions: list[str] | None = None  # every partition of the targets
    if not args.force and not args.collection and not args.vault:
        plan = _incremental_plan(cfg)
        if plan is None:
            return EXIT_OK
        targets, vault_targets, publish, partitions = plan

    # Imported only now: Dagster takes a second to import, and a no-op build should not pay it.
    from rag_assets.defs.runner import cli_instance, run_build

    selection = select_embedder(cfg.embedding)
    print(f"Embedder: {selection.provider}, {selection.embedder.model} ({selection.reason})")
    published = index_json.read_meta(cfg.meta_path)
    if targets and _model_changed(published, selection.embedder):
        # One index, one model: a partial build with another model (or the same model at another
        # dimension) would mix them, also within a sharded collection, whose untouched shards the
        # ledger calls current.
        print(
            f"note: the index was built with {published.get('model')} ({published.get('dimension')}); switching to "
            f"{selection.embedder.model} ({selection.embedder.dimension}) re-embeds every collection"
        )
        targets, partitions = list(discovery.collections), None
    if targets:
        print(f"Building {len(targets)} collection(s) from {cfg.content_dir}", flush=True)
    elif publish:
        print("Republishing the public index without the removed collection(s)", flush=True)
    if vault_targets:
        print(f"Building {len(vault_targets)} vault(s) into the Safe and Private stores", flush=True)
    celery = None
    cannot_start: tuple[type[Exception], ...] = ()  # the distributed build's "no broker, no worker"
    if args.executor not in ("in_process", "celery"):  # argparse checks the flag, not $RAG_EXECUTOR
        print(f"rag: $RAG_EXECUTOR must be in_process or celery, not {args.executor!r}", file=sys.stderr)
        return EXIT_USAGE
    if args.executor == "celery":
        from rag_assets.defs.distributed import DistributedBuildError, load_celery_config

        cannot_start = (DistributedBuildError,)

        try:
            celery = load_celery_config(Path(args.celery_config).resolve())
        except DistributedBuildError as error:
            print(f"rag: {error}", file=sys.stderr)
            return EXIT_USAGE
    with cli_instance() as instance:
        try:
            outcome = run_build(
                cfg,
                instance,
                collections=targets,
                partitions=partitions,
                vaults=vault_targets,
                publish=publish,
                verbose=args.verbose,
                on_collection=_print_collection_progress,
                on_vault=_print_vault_progress,
                full=True if args.force else None,
                celery=celery,
                parallel_runs=args.parallel_runs,
                partitions_per_run=args.partitions_per_run,
            )
        except cannot_start as error:
            print(f"rag: build not started: {error}", file=sys.stderr)
            return EXIT_FAILED
    skipped = [s for c in outcome.collections for s in c.skipped]
    if skipped:
        print(f"\nSkipped {len(skipped)} file(s):")
        for item in skipped:
            print(f"  {item.path}: {item.reason}")
    if outcome.error:
        print(f"rag: build failed: {outcome.error}", file=sys.stderr)
        print("rag: the previous outputs of what failed are unchanged", file=sys.stderr)
        return EXIT_FAILED
    for problem in outcome.failed_checks:
        print(f"rag: check failed: {problem}", file=sys.stderr)
    for warning in outcome.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"Built in {outcome.seconds:.1f}s\n")
    # What was just written, without re-reading it all for damage: the build checked the caches
    # and outputs before it started and wrote the new generation itself (`rag status` and `rag
    # check` verify; at a million chunks the checks took about three minutes here).
    print_status(cfg, check_damage=False)
    return EXIT_FAILED if outcome.failed_checks else EXIT_OK


def _model_changed(published: dict | None, embedder) -> bool:
    """Whether the published index was embedded with another model or dimension than ``embedder``."""
    if not published:
        return False
    return (published.get("model"), published.get("dimension")) != (embedder.model, embedder.dimension)


def _incremental_plan(cfg: RagConfig) -> tuple[list[str], list[str], bool, list[str] | None] | None:
    """(collections, vaults) that changed since their last build, whether the public outputs
    must be republished, and the partitions to re-index (None: all of those collections; a
    sharded collection's changed shards only); None (after saying so) when everything is current."""
    report = detect_changes(cfg)
    vault_changes = detect_vault_changes(cfg)
    for change in vault_changes:
        if change.status == "missing":
            print(f"warning: vault {change.vault!r}: folder {cfg.vault(change.vault).path} does not exist; its rows are kept")
    stale_vaults = sorted({c.vault for c in vault_changes if c.status in ("new", "changed")})
    departed = departed_vaults(cfg)
    collections = list(discover_collections(cfg).collections)
    if not collections:
        # Only note vaults: there is no public index to publish, only the tier stores to build.
        if not stale_vaults and not departed:
            print("No public collections; the Safe and Private stores are up to date. Use --force to rebuild.")
            return None
        return [], stale_vaults, False, None
    if report.damage:
        report = _repair(cfg, report)
    for damage in report.damage:
        print(f"damaged output {damage}: republishing every collection")
    if report.damage:
        return collections, stale_vaults, True, None
    if report.has_index and (change := encoding_change(cfg)):
        print(f"public_index.vector_encoding changed ({change}): republishing every collection")
        return collections, stale_vaults, True, None
    if report.up_to_date and not stale_vaults and not departed:
        print(f"Index is up to date (content hash {report.current_hash[:12]}); nothing to build. Use --force to rebuild.")
        generations.tidy(cfg)  # what a build killed after its swap left (it published, then died)
        return None
    targets = collections
    partitions: list[str] | None = None
    if report.up_to_date:
        targets = []
    elif report.has_index:
        targets = [c.collection for c in report.changed if c.status != "removed"]
        partitions = [key for c in report.changed if c.status != "removed" for key in c.partitions]
        for change in report.changed:
            print(f"[{change.collection}] {change.summary()}")
    for change in vault_changes:
        if change.status in ("new", "changed"):
            print(f"[vault {change.vault}] {change.tier} tier: {'not built yet' if change.status == 'new' else 'notes or rules changed'}")
    for tier, names in departed.items():
        print(f"[{tier} tier] vault(s) {', '.join(names)} left the tier: their rows will be purged")
    return targets, stale_vaults, not report.up_to_date, partitions


def _repair(cfg: RagConfig, report: ChangeReport) -> ChangeReport:
    """Repair in place what of the damage can be (links, and files made again exactly as
    published); the changes checked again when anything was, so what is left is republished."""
    repaired = repair_in_place(cfg, report.damage)
    for path in repaired:
        print(f"repaired {path} (damaged: {'; '.join(d.reason for d in report.damage if d.path == path) or 'stray'})")
    return detect_changes(cfg) if repaired else report


def _print_collection_progress(outcome) -> None:
    if not outcome.success:
        print(f"[{outcome.collection}] FAILED ({outcome.seconds:.1f}s)")
        return
    meta = outcome.metadata
    print(
        f"[{outcome.collection}] {meta['parsed_documents']['documents']} documents, "
        f"{meta['chunks']['chunks']} chunks, {len(outcome.skipped)} skipped ({outcome.seconds:.1f}s)",
        flush=True,
    )


def _print_vault_progress(outcome) -> None:
    if not outcome.success:
        print(f"[vault {outcome.vault}] FAILED ({outcome.seconds:.1f}s): {outcome.error}", flush=True)
        return
    parts = []
    safe = outcome.metadata.get("safe_vault_chunks", {})
    if safe.get("in_safe_tier"):
        parts.append(
            f"safe: {safe['documents']} documents, {safe['chunks']} chunks, {safe.get('skipped_files', 0)} skipped, "
            f"{safe['secrets_redacted']} secrets "
            f"redacted, {safe['identities_replaced']} identities replaced"
        )
    private = outcome.metadata.get("private_vault_chunks", {})
    if private:
        parts.append(
            f"private: {private['documents']} documents, {private['chunks']} chunks, "
            f"{private.get('skipped_files', 0)} skipped ({private['provider']})"
        )
    print(f"[vault {outcome.vault}] {'; '.join(parts)} ({outcome.seconds:.1f}s)", flush=True)
    for tier, meta in (("safe", safe), ("private", private)):
        if meta.get("failed_chunks"):
            # Said out loud: a tier store with notes but no chunks must not pass for Fresh.
            print(
                f"warning: [vault {outcome.vault}] {meta['failed_chunks']} chunks of the {tier} tier have no vector "
                "(their embedding batches failed); the next build retries them",
                file=sys.stderr,
                flush=True,
            )


def _dry_run(cfg: RagConfig, targets: list[str]) -> int:
    report = detect_changes(cfg, save_stat_cache=False)
    embedder = select_embedder(cfg.embedding).embedder
    print(f"Dry run with {embedder.model}; nothing is written.")
    for change in report.collections:
        if change.collection not in targets and change.status != "removed":
            continue
        if change.status == "removed":
            print(f"[{change.collection}] folder removed: its chunks would be deleted from every output")
            continue
        plan = plan_collection(cfg, change.collection, change.files, embedder)
        print(
            f"[{change.collection}] {change.summary()}: {len(change.added)} added, {len(change.changed)} changed, "
            f"{len(change.removed)} removed; {plan.documents_to_parse} to parse, "
            f"{plan.chunks_to_embed} of {plan.chunks} chunks to embed"
        )
    return EXIT_OK


def cmd_check(cfg: RagConfig, args: argparse.Namespace) -> int:
    report = detect_changes(cfg, save_stat_cache=False)
    stale = False
    damage = report.damage + cache_damage(cfg)  # the published generation was verified just above
    if damage:
        stale = True
        print("Damaged: run `rag build` to repair what is listed here (it republishes what it cannot repair).")
        for item in damage:
            print(f"  {item}")
    if not report.has_index:
        print(f"Stale: no index at {cfg.index_path}; run `rag build`.")
        stale = True
    elif report.up_to_date:
        print(f"Fresh: the index matches the content (content hash {report.current_hash[:12]}).")
    elif report.damage and not report.changed:
        pass  # said above
    else:
        stale = True
        print("Stale: the content changed since the last build.")
        for change in report.changed:
            print(f"  [{change.collection}] {change.summary()}")
            for label, paths in (("added", change.added), ("changed", change.changed), ("removed", change.removed)):
                for path in paths[:10]:
                    print(f"      {label:<8} {path}")
                if len(paths) > 10:
                    print(f"      ... and {len(paths) - 10} more {label}")
    _print_unreadable(report)
    departed = departed_vaults(cfg)
    if cfg.vaults or departed:
        behind = [c for c in detect_vault_changes(cfg) if c.status != "unchanged"]
        for change in behind:
            why = {"new": "not built yet", "changed": "notes or rules changed", "missing": "folder missing"}[change.status]
            print(f"  [vault {change.vault}] {change.tier} tier: {why}")
        for tier, names in departed.items():
            print(f"  [{tier} tier] holds vault(s) no longer configured for it: {', '.join(names)}")
        if behind or departed:
            stale = True
        else:
            print(f"Fresh: the Safe and Private stores match {len(cfg.vaults)} vault(s).")
    return EXIT_FAILED if stale else EXIT_OK


def _print_unreadable(report) -> None:
    """The files on disk a build would skip without reading them (symlinks out of the content
    folder, FIFOs, files too large, undecodable names, unreadable files), with the reasons."""
    for change in report.collections:
        for item in change.skipped[:10]:
            print(f"  [{change.collection}] skipped {item.path}: {item.reason}")
        if len(change.skipped) > 10:
            print(f"  [{change.collection}] ... and {len(change.skipped) - 10} more skipped")
