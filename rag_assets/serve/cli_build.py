"""``rag config``, ``rag build`` and ``rag check``: validating the configuration, running the
Dagster assets in-process, and saying what changed since the last build."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from rag_assets.base import verified
from rag_assets.base.gc_passes import fewer_gc_passes
from rag_assets.base.sqlite_cache import track_sessions
from rag_assets.base.verified import VerificationRecord
from rag_assets.config import (
    RagConfig,
    collect_overrides,
    effective_settings,
    mask_secrets,
)
from rag_assets.embed import select_embedder
from rag_assets.index import generations
from rag_assets.index.freshness import ChangeReport, detect_changes
from rag_assets.index.integrity import (
    cache_damage,
    discard_damaged_caches,
    log_damage,
    verification_record,
    vouch_for_caches,
)
from rag_assets.index.repair import repair_in_place
from rag_assets.ingest.collections import VAULT_FOLDER_REASON, discover_collections, holds_configured_vault
from rag_assets.pipeline import plan_collection
from rag_assets.planning import Cause, ObservedState, Plan, Reason, observe, plan
from rag_assets.privacy.vaults import (
    departed_vaults,
    detect_vault_changes,
)
from rag_assets.serve.cli_links import print_link_reports
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
        print(
            f"# embedder.openai.base_url replaced at run time by $RAG_OPENAI_BASE_URL: {mask_secrets(base_url, 'base_url')}"
        )
    print(yaml.safe_dump(effective_settings(cfg), sort_keys=False, allow_unicode=True), end="")
    return EXIT_OK


# --- build -----------------------------------------------------------------------------------


def exclusion_note(cfg: RagConfig, folder: str, reason: str) -> str | None:
    """The note for a content folder that is not a collection, or None when there is nothing to say.

    A folder that holds the configured vaults is left out by design: silent, unless rag.yaml
    lists it under ``collections`` (then the user asked for it and learns why not). A vaults
    folder with no configured vault in it says how to index its notes.
    """
    if reason != VAULT_FOLDER_REASON:
        return f"note: folder {folder!r} is not a collection: {reason}"
    if cfg.collections is not None and folder in cfg.collections:
        return f"note: folder {folder!r} is not a collection: {reason}; remove it from `collections` in rag.yaml"
    if holds_configured_vault(cfg.content_dir / folder, cfg.vaults):
        return None
    return (
        f"note: folder {folder!r} is not a collection: it is kept for note vaults; list its vaults under "
        "`vaults` in rag.yaml to index them, or rename the folder to make it a collection"
    )


@fewer_gc_passes()  # the build's records are freed by reference counting: see rag_assets/base/gc_passes.py
def cmd_build(cfg: RagConfig, args: argparse.Namespace) -> int:
    discovery = discover_collections(cfg)
    for folder, reason in discovery.excluded:
        note = exclusion_note(cfg, folder, reason)
        if note:
            print(note)
    for name in discovery.loose_files:
        print(f"note: {name} is directly in the content folder, outside any collection; not indexed")
    for name in discovery.missing:
        print(f"warning: collection {name!r} is configured but {cfg.content_dir / name} does not exist")
    if not cfg.content_dir.is_dir():
        print(
            f"rag: content folder {cfg.content_dir} does not exist; set content_dir in rag.yaml or --content-dir",
            file=sys.stderr,
        )
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
    record = verification_record(cfg)  # what was verified before and is unchanged is not read again
    for damage in discard_damaged_caches(cfg, record):
        print(f"note: discarded {damage}; it is rebuilt by this build")
    asked = bool(args.collection or args.vault)
    state = _observe_and_repair(cfg, record, repair=not asked and not args.force)
    record.save()
    _print_journal_use(state.changes)
    the_plan = plan(
        cfg,
        state,
        collections=targets if asked else None,
        vaults=vault_targets if asked else None,
        force=args.force and not asked,
    )
    _print_plan(cfg, state, the_plan)
    if the_plan.empty:
        _print_nothing_to_do(cfg, state)
        return EXIT_OK
    targets, vault_targets, publish = the_plan.collections, the_plan.vault_names, the_plan.publish
    partitions = the_plan.partitions

    # Imported only now: Dagster takes a second to import, and a no-op build should not pay it.
    from rag_assets.defs.runner import cli_instance, run_build

    selection = select_embedder(cfg.embedding)
    print(f"Embedder: {selection.provider}, {selection.embedder.model} ({selection.reason})")
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
    track_sessions()  # the caches' sessions of this run, for vouch_for_caches
    with cli_instance() as instance:
        try:
            outcome = run_build(
                cfg,
                instance,
                collections=targets,
                partitions=partitions,
                vaults=vault_targets,
                # Only the tiers the plan touches: a collection edit leaves the tier stores alone,
                # as the sensors do (one Dagster run fewer per build).
                tiers=set(the_plan.vaults) | set(the_plan.purge),
                publish=publish,
                verbose=args.verbose,
                on_collection=_print_collection_progress,
                on_vault=_print_vault_progress,
                full=True if args.force or the_plan.full else None,
                celery=celery,
                parallel_runs=args.parallel_runs,
                partitions_per_run=args.partitions_per_run,
            )
        except cannot_start as error:
            print(f"rag: build not started: {error}", file=sys.stderr)
            return EXIT_FAILED
    vouch_for_caches(cfg)  # written only by this run since the check above: not read whole next time
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


def _observe_and_repair(cfg: RagConfig, record: VerificationRecord, *, repair: bool) -> ObservedState:
    """The planner's view of the outputs, after repairing in place what of their damage can be
    (links, and files made again exactly as published): what is left is republished."""
    # Watched: the check after the publish tells by stat whether the content is still as walked.
    state = observe(cfg, record=record, watch=True)
    if not (repair and state.changes.damage and state.collections):
        return state
    repaired = repair_in_place(cfg, state.changes.damage)
    for path in repaired:
        reasons = "; ".join(d.reason for d in state.changes.damage if d.path == path) or "stray"
        print(f"repaired {path} (damaged: {reasons})")
    return observe(cfg, record=record, watch=True) if repaired else state


def _print_plan(cfg: RagConfig, state: ObservedState, the_plan: Plan) -> None:
    """The plan's causes, one line each (a collection's file changes as one summary line)."""
    for warning in the_plan.warnings:
        print(f"warning: {warning}")
    summarised: set[str] = set()
    changes = {c.collection: c for c in state.changes.collections}
    for cause in the_plan.causes:
        if cause.reason in FILE_REASONS:
            if cause.subject not in summarised:
                summarised.add(cause.subject)
                print(f"[{cause.subject}] {changes[cause.subject].summary()}")
            if cause.reason is Reason.FILES_RENAMED:
                print(f"[{cause.subject}] renamed {cause.detail}")
            continue
        print(_cause_line(cause))


FILE_REASONS = {
    Reason.NEW_COLLECTION,
    Reason.FILES_ADDED,
    Reason.FILES_CHANGED,
    Reason.FILES_REMOVED,
    Reason.FILES_RENAMED,
    Reason.RESHARDED,
    Reason.UNPUBLISHED,
    Reason.COLLECTION_REMOVED,
}


def _cause_line(cause: Cause) -> str:
    """A cause as the line `rag build` prints, with what it makes the build do."""
    reason, subject, detail = cause.reason, cause.subject, cause.detail
    if reason is Reason.DAMAGED:
        return f"damaged output {subject}: {detail}: republishing every collection"
    if reason is Reason.ENCODING_CHANGED:
        return f"public_index.vector_encoding changed ({detail}): republishing every collection"
    if reason in (Reason.MODEL_CHANGED, Reason.CHUNKER_CHANGED):
        return f"note: {reason.value} ({detail}): one index holds one model, so this re-embeds every collection"
    if reason is Reason.VAULT_DEPARTED:
        return f"[{subject}] vault {detail} left the tier: its rows will be purged"
    if subject.startswith("vault "):
        return f"[{subject}] {detail}: {reason.value}"
    return str(cause)


def _print_nothing_to_do(cfg: RagConfig, state: ObservedState) -> None:
    if not state.collections:
        print("No public collections; the Safe and Private stores are up to date. Use --force to rebuild.")
        return
    report = state.changes
    print(f"Index is up to date (content hash {report.current_hash[:12]}); nothing to build. Use --force to rebuild.")
    generations.tidy(cfg)  # what a build killed after its swap left (it published, then died)


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
    links = private or safe  # the Private tier's raw names when it has the vault (`rag check` lists them)
    if links.get("links"):
        print(
            f"[vault {outcome.vault}] links: {links['links_resolved']}/{links['links']} resolved, "
            f"{links['links_unresolved']} unresolved, {links['links_ambiguous']} ambiguous, "
            f"{links['links_outside']} outside the vault",
            flush=True,
        )
    _print_vault_skips(outcome.vault, safe, private)
    for tier, meta in (("safe", safe), ("private", private)):
        if meta.get("failed_chunks"):
            # Said out loud: a tier store with notes but no chunks must not pass for Fresh.
            print(
                f"warning: [vault {outcome.vault}] {meta['failed_chunks']} chunks of the {tier} tier have no vector "
                "(their embedding batches failed); the next build retries them",
                file=sys.stderr,
                flush=True,
            )


def _print_vault_skips(vault: str, safe: dict, private: dict) -> None:
    """Each file of the vault that was not indexed, with its reason (as collections list theirs).

    The Private tier's entries (raw paths) when it ran, else the Safe tier's. Each tier lists
    the vault on its own, so a file can be skipped by one alone (deleted between the two):
    when the Safe tier skipped a different number of files, its entries the Private tier does
    not name are listed too, marked, rather than hidden behind a count."""
    first = private or safe
    _print_skip_entries(vault, first, "")
    if private and safe.get("skipped_files", 0) != private.get("skipped_files", 0):
        named = {entry["path"] for entry in private.get("skipped_entries") or []}
        _print_skip_entries(vault, safe, " (Safe tier only)", named)


def _print_skip_entries(vault: str, meta: dict, note: str, named: frozenset[str] | set[str] = frozenset()) -> None:
    """One tier's skipped entries, those whose path ``named`` already holds left out."""
    entries = meta.get("skipped_entries") or []
    for entry in entries:
        if entry["path"] not in named:
            print(f"  [vault {vault}] skipped {entry['path']}{note}: {entry['reason']}")
    hidden = meta.get("skipped_files", 0) - len(entries)
    if hidden > 0:
        print(f"  [vault {vault}] ... and {hidden} more skipped{note} (see the asset's metadata)")


def _dry_run(cfg: RagConfig, targets: list[str]) -> int:
    report = detect_changes(cfg, save_stat_cache=False)
    embedder = select_embedder(cfg.embedding).embedder
    print(f"Dry run with {embedder.model}; nothing is written.")
    for change in report.collections:
        if change.collection not in targets and change.status != "removed":
            continue
        if change.status == "removed":
            print(f"[{change.collection}] no longer a collection: its chunks would be deleted from every output")
            continue
        plan = plan_collection(cfg, change.collection, change.files, embedder)
        print(
            f"[{change.collection}] {change.summary()}: {len(change.added)} added, {len(change.changed)} changed, "
            f"{len(change.removed)} removed; {plan.documents_to_parse} to parse, "
            f"{plan.chunks_to_embed} of {plan.chunks} chunks to embed"
        )
    return EXIT_OK


def cmd_check(cfg: RagConfig, args: argparse.Namespace) -> int:
    record = verification_record(cfg, deep=getattr(args, "deep", False))
    verified.reset_counts()
    # --deep walks every collection too, whatever `rag watch`'s journal says.
    report = detect_changes(cfg, save_stat_cache=False, record=record, journal=not record.deep)
    _print_journal_use(report)
    stale = False
    damage = report.damage + cache_damage(cfg, record)  # the published generation was verified just above
    logs = log_damage(cfg, record)
    record.save()
    _print_verified(deep=record.deep)
    for item in logs:  # not the index's damage: no rebuild would mend it, and it blocks nothing
        print(f"Damaged log file: {item}")
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
        for vault_change in behind:
            why = {"new": "not built yet", "changed": "notes or rules changed", "missing": "folder missing"}[
                vault_change.status
            ]
            print(f"  [vault {vault_change.vault}] {vault_change.tier} tier: {why}")
        for tier, names in departed.items():
            print(f"  [{tier} tier] holds vault(s) no longer configured for it: {', '.join(names)}")
        if behind or departed:
            stale = True
        else:
            print(f"Fresh: the Safe and Private stores match {len(cfg.vaults)} vault(s).")
        print_link_reports(cfg)  # a report, not staleness: an unresolved link is the notes' own state
    return EXIT_FAILED if stale else EXIT_OK


def _print_journal_use(report: ChangeReport) -> None:
    """Which collections were walked, when `rag watch`'s journal said the others were unchanged."""
    if report.walked is None:
        return
    total = len([c for c in report.collections if c.status != "removed"])
    names = f": {', '.join(report.walked[:5])}{' ...' if len(report.walked) > 5 else ''}" if report.walked else ""
    print(f"rag watch's journal: walked {len(report.walked)} of {total} collection(s){names}")


def _print_verified(*, deep: bool) -> None:
    """How many files were read for damage, and how many were known sound and unchanged."""
    counts = verified.counts
    known = "" if deep else f"; {counts.skipped} unchanged since their last verification (--deep re-verifies them)"
    print(f"Verified {counts.performed} output and cache file check(s){known}.")


def _print_unreadable(report) -> None:
    """The files on disk a build would skip without reading them (symlinks out of the content
    folder, FIFOs, files too large, undecodable names, unreadable files), with the reasons."""
    for change in report.collections:
        for item in change.skipped[:10]:
            print(f"  [{change.collection}] skipped {item.path}: {item.reason}")
        if len(change.skipped) > 10:
            print(f"  [{change.collection}] ... and {len(change.skipped) - 10} more skipped")
