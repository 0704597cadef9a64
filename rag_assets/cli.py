"""The ``rag`` command: a front over the same Dagster assets the UI runs.

``rag build`` executes the ``update_collection`` job once over the collections to
build (indexing and publishing), then ``update_safe_vaults`` and ``update_private_vaults``
once each over the vaults (see rag_assets/defs/runner.py), in-process, against the same definitions that
``dagster dev`` loads, so the CLI and the UI can never build different indexes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any, Sequence

import yaml

from rag_assets import generations, index_json, store
from rag_assets.config import (
    ConfigError,
    RagConfig,
    collect_overrides,
    discover_collections,
    effective_settings,
    load_config,
    mask_secrets,
)
from rag_assets.embedders import UnknownEmbedderError, select_embedder
from rag_assets.embedders.selection import service_status
from rag_assets.freshness import age_label, detect_changes
from rag_assets.integrity import discard_damaged_caches, output_damage
from rag_assets.pipeline import plan_collection
from rag_assets.reporting import human_bytes, relative_age
from rag_assets.vaults import departed_vaults, detect_vault_changes, tiers_report

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        cfg = load_config(
            args.config,
            content_dir=args.content_dir,
            output_dir=args.output_dir,
            embedder=getattr(args, "embedder", None),
            private_embedder=getattr(args, "private_embedder", None),
        )
        return args.handler(cfg, args)
    except (ConfigError, UnknownEmbedderError) as exc:
        print(f"rag: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # Output piped into `head` and friends: stop quietly, like other Unix tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print("rag: interrupted; the previous outputs are intact", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE", help="config file (default: $RAG_CONFIG, else ./rag.yaml)")
    common.add_argument("--content-dir", metavar="DIR", help="folder whose top-level folders are the collections")
    common.add_argument("--output-dir", metavar="DIR", help="folder that receives public/ and data/")

    parser = argparse.ArgumentParser(
        prog="rag",
        description="Build and inspect a retrieval (RAG) index of Markdown content, as Dagster assets.",
        epilog="Run `rag COMMAND --help` for a command's options. Docs: README.md.",
    )
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    build = commands.add_parser(
        "build",
        parents=[common],
        help="parse, chunk and embed the collections, then publish the index",
        description=(
            "Materialise the Dagster assets in-process: for each collection content_hash -> parsed_documents "
            "-> chunks -> embeddings, then public_index, public_store and rag_manifest; for each note vault "
            "safe_vault_chunks (sanitised) and private_vault_chunks (raw, local embedder), then safe_store and "
            "private_store with the leak audit. Prints progress and a summary; exits 1 if any step or ERROR "
            "check fails."
        ),
    )
    build.add_argument(
        "--collection",
        action="extend",
        nargs="+",
        metavar="NAME",
        help="build only these collections (repeatable); the others keep their last build",
    )
    build.add_argument(
        "--vault",
        action="extend",
        nargs="+",
        metavar="NAME",
        help="build only these note vaults into the Safe/Private stores (repeatable); with only --collection, "
        "vaults are left alone",
    )
    build.add_argument(
        "--embedder",
        metavar="NAME",
        help="public and Safe tier provider (overrides rag.yaml and $RAG_EMBEDDER): auto, openai, ollama, local, hashing",
    )
    build.add_argument(
        "--private-embedder",
        metavar="NAME",
        help="Private tier provider, local only (overrides rag.yaml and $RAG_PRIVATE_EMBEDDER): auto, ollama, local, hashing",
    )
    mode = build.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="rebuild every collection even if nothing changed")
    mode.add_argument(
        "--incremental",
        action="store_true",
        help="only the collections whose files changed (the default when an index exists)",
    )
    mode.add_argument(
        "--dry-run",
        action="store_true",
        help="per collection: files added, changed, removed and chunks that would be embedded; writes nothing",
    )
    build.add_argument("-v", "--verbose", action="store_true", help="show Dagster's step logs")
    build.set_defaults(handler=cmd_build)

    check = commands.add_parser(
        "check",
        parents=[common],
        help="exit 0 if the index matches the content, 1 if it is stale; writes nothing",
        description="Compare the content on disk with the last build and say which collections changed and why.",
    )
    check.set_defaults(handler=cmd_check)

    status = commands.add_parser(
        "status",
        parents=[common],
        help="show what the published index holds",
        description="Model, dimension, chunks, size, build time, content hash and per-collection counts.",
    )
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(handler=cmd_status)

    audit = commands.add_parser(
        "audit",
        parents=[common],
        help="rescan a tier's stored chunks for secrets and identifying values; exit 1 on findings",
        description=(
            "Leak audit: every stored chunk (text, headings, ID) and document field (title, slug, tags) of the "
            "tier's SQLite store is rescanned with the full secret detector (and, for the Safe tier, the identity "
            "map). Findings show the chunk ID, field, kind and a masked preview, never the secret. The Private "
            "tier keeps secrets on purpose and is not audited."
        ),
    )
    audit.add_argument(
        "--tier", choices=("safe", "public", "all"), default="safe", help="which store to audit (default: safe; all: safe and public)"
    )
    audit.add_argument("--json", action="store_true", help="print the findings as JSON")
    audit.set_defaults(handler=cmd_audit)

    tiers = ("public", "safe", "private")

    def add_search_options(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("query", help="what to look for, in plain words (no query syntax needed)")
        cmd.add_argument("--tier", choices=tiers, default="public", help="which store to search (default: public)")
        cmd.add_argument("-k", type=int, default=None, help="number of results (default: 10)")
        cmd.add_argument("--collections", metavar="A,B", help="only these collections (or vaults), comma-separated")
        cmd.add_argument(
            "--filter", action="append", default=[], metavar="KEY=VALUE",
            help="frontmatter field must equal VALUE (repeatable), e.g. status=active or tags=proxmox",
        )
        cmd.add_argument("--tag", action="append", default=[], metavar="TAG", help="document must carry this tag (repeatable)")
        cmd.add_argument("--prefix", metavar="SLUG", help="only documents whose slug (or collection/slug) starts with this")
        cmd.add_argument("--mode", choices=("hybrid", "vector", "bm25"), default="hybrid", help="ranking (default: hybrid)")
        cmd.add_argument("--fusion", choices=("rrf", "convex"), help="how vector and BM25 ranks combine (see README)")
        cmd.add_argument("--vector-weight", type=float, help="weight of the vector list in the fusion")
        cmd.add_argument("--bm25-weight", type=float, help="weight of the BM25 list in the fusion")
        cmd.add_argument("--min-score", type=float, help="drop results under this fused score (default: 0.1)")
        cmd.add_argument("--mmr", type=float, metavar="LAMBDA", help="MMR re-ranking: 1.0 relevance only, lower = more diverse")
        cmd.add_argument("--per-doc", type=int, metavar="N", help="at most N chunks per document")
        cmd.add_argument("--json", action="store_true", help="print JSON")

    search = commands.add_parser(
        "search",
        parents=[common],
        help="hybrid (vector + BM25) search of a tier's store",
        description=(
            "Search one tier's SQLite store: cosine similarity of the query embedding (the model that built the "
            "store) fused with FTS5 BM25, then the collection weight and --min-score. Prints "
            "`collection/slug ::heading/path score` lines, or JSON with --json. Every search is logged in the "
            "store (see `rag log`)."
        ),
    )
    add_search_options(search)
    search.set_defaults(handler=cmd_search)

    context = commands.add_parser(
        "context",
        parents=[common],
        help="prompt-ready context with citations for a query, under a token budget",
        description=(
            "Search, then pack the best hits greedily under --budget tokens, merging overlapping chunks of the "
            "same document, each passage prefixed with a citation tag like [posts:slug#heading]."
        ),
    )
    add_search_options(context)
    context.add_argument("--budget", type=int, default=1500, help="token budget (default: 1500)")
    context.set_defaults(handler=cmd_context)

    log = commands.add_parser(
        "log",
        parents=[common],
        help="recent searches and the weakest ones (lowest top score)",
        description="Reads the search_log table of a tier's store: what was asked, how well it matched, how fast.",
    )
    log.add_argument("--tier", choices=tiers, default="public", help="which store's log (default: public)")
    log.add_argument("-n", type=int, default=10, help="rows per list (default: 10)")
    log.add_argument("--json", action="store_true", help="print JSON")
    log.set_defaults(handler=cmd_log)

    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="HTTP API: GET /search, /context, /status (JSON)",
        description="Serve the search API with uvicorn. Bad parameters get a 400 with a message, never a 500.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    serve.add_argument(
        "--allow-private-remote",
        action="store_true",
        help="also serve the Private tier when bound to a non-loopback address (refused by default)",
    )
    serve.set_defaults(handler=cmd_serve)

    evaluate = commands.add_parser(
        "eval",
        parents=[common],
        help="retrieval quality on a BEIR dataset: nDCG@10, recall@10/100, MRR@10 for BM25, vector, hybrid",
        description=(
            "Index a BEIR-layout dataset (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) as a collection with "
            "the configured (or given) embedder, through the embedding cache, and score BM25 alone, vector alone "
            "and hybrid with the default search settings."
        ),
    )
    evaluate.add_argument("--dataset", required=True, metavar="DIR", help="BEIR dataset folder, e.g. ../shared/corpora/beir-scifact")
    evaluate.add_argument("--split", choices=("test", "train", "dev"), default="test", help="qrels split (default: test)")
    evaluate.add_argument("--embedder", metavar="NAME", help="embedding provider for the corpus and queries")
    evaluate.add_argument("--json", action="store_true", help="print the figures as JSON")
    evaluate.set_defaults(handler=cmd_eval)

    config = commands.add_parser(
        "config",
        parents=[common],
        help="validate the configuration and print the effective settings (YAML); exit 2 if invalid",
        description=(
            "Read rag.yaml (or --config / $RAG_CONFIG), apply $RAG_CONTENT_DIR, $RAG_OUTPUT_DIR, $RAG_EMBEDDER, "
            "$RAG_PRIVATE_EMBEDDER and the flags (defaults < file < environment < flags), validate every key and "
            "print the result in rag.yaml's shape with absolute paths. Unknown keys, wrong types and out-of-range "
            "values are listed together with their file line and the closest valid key; the exit status is then 2. "
            "Secrets are never printed: the API key shows only as its variable and whether it is set, and any "
            "value that looks like a key, token or password is masked."
        ),
    )
    config.add_argument("--embedder", metavar="NAME", help="public and Safe tier provider, as for `rag build`")
    config.add_argument("--private-embedder", metavar="NAME", help="Private tier provider, as for `rag build`")
    config.set_defaults(handler=cmd_config)
    return parser


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
    if not args.force and not args.collection and not args.vault:
        plan = _incremental_plan(cfg)
        if plan is None:
            return EXIT_OK
        targets, vault_targets, publish = plan

    # Imported only now: Dagster takes a second to import, and a no-op build should not pay it.
    from rag_assets.defs.runner import cli_instance, run_build

    selection = select_embedder(cfg.embedding)
    print(f"Embedder: {selection.provider}, {selection.embedder.model} ({selection.reason})")
    published = index_json.read_meta(cfg.meta_path)
    if args.collection and published and published.get("model") != selection.embedder.model:
        # One index, one model: a partial build with another model would mix them.
        print(
            f"note: the index was built with {published.get('model')}; switching to {selection.embedder.model} "
            "re-embeds every collection"
        )
        targets = list(discovery.collections)
    if targets:
        print(f"Building {len(targets)} collection(s) from {cfg.content_dir}", flush=True)
    elif publish:
        print("Republishing the public index without the removed collection(s)", flush=True)
    if vault_targets:
        print(f"Building {len(vault_targets)} vault(s) into the Safe and Private stores", flush=True)
    with cli_instance() as instance:
        outcome = run_build(
            cfg,
            instance,
            collections=targets,
            vaults=vault_targets,
            publish=publish,
            verbose=args.verbose,
            on_collection=_print_collection_progress,
            on_vault=_print_vault_progress,
            full=True if args.force else None,
        )
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
    _print_status(cfg)
    return EXIT_FAILED if outcome.failed_checks else EXIT_OK


def _incremental_plan(cfg: RagConfig) -> tuple[list[str], list[str], bool] | None:
    """(collections, vaults) that changed since their last build and whether the public outputs
    must be republished; None (after saying so) when everything is current."""
    report = detect_changes(cfg)
    vault_changes = detect_vault_changes(cfg)
    for change in vault_changes:
        if change.status == "missing":
            print(f"warning: vault {change.vault!r}: folder {cfg.vault(change.vault).path} does not exist; its rows are kept")
    stale_vaults = sorted({c.vault for c in vault_changes if c.status in ("new", "changed")})
    departed = departed_vaults(cfg)
    for damage in report.damage:
        print(f"damaged output {damage}: republishing every collection")
    if report.damage:
        return list(discover_collections(cfg).collections), stale_vaults, True
    if report.up_to_date and not stale_vaults and not departed:
        print(f"Index is up to date (content hash {report.current_hash[:12]}); nothing to build. Use --force to rebuild.")
        return None
    targets = list(discover_collections(cfg).collections)
    if report.up_to_date:
        targets = []
    elif report.has_index:
        targets = [c.collection for c in report.changed if c.status != "removed"]
        for change in report.changed:
            print(f"[{change.collection}] {change.summary()}")
    for change in vault_changes:
        if change.status in ("new", "changed"):
            print(f"[vault {change.vault}] {change.tier} tier: {'not built yet' if change.status == 'new' else 'notes or rules changed'}")
    for tier, names in departed.items():
        print(f"[{tier} tier] vault(s) {', '.join(names)} left the tier: their rows will be purged")
    return targets, stale_vaults, not report.up_to_date


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
            f"safe: {safe['documents']} documents, {safe['chunks']} chunks, {safe['secrets_redacted']} secrets "
            f"redacted, {safe['identities_replaced']} identities replaced"
        )
    private = outcome.metadata.get("private_vault_chunks", {})
    if private:
        parts.append(f"private: {private['documents']} documents, {private['chunks']} chunks ({private['provider']})")
    print(f"[vault {outcome.vault}] {'; '.join(parts)} ({outcome.seconds:.1f}s)", flush=True)


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
    damage = output_damage(cfg)
    if damage:
        stale = True
        print("Damaged: run `rag build` to rebuild what is listed here.")
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


# --- status ----------------------------------------------------------------------------------


def status_report(cfg: RagConfig) -> dict[str, Any]:
    """What the published index and store hold, as a JSON-ready dict."""
    gen = generations.published(cfg)  # resolved once: every figure below is of one build
    damage = output_damage(cfg)
    damaged = {d.path for d in damage}
    meta = index_json.read_meta(gen.meta_path)
    summary = store.summarise(gen.store_path) if gen.store_path not in damaged else None
    report: dict[str, Any] = {
        "indexPath": str(cfg.index_path),
        "built": meta is not None,
        "generation": gen.id,
        "damaged": [{"path": str(d.path), "reason": d.reason} for d in damage],
    }
    if meta:
        built_at = meta.get("builtAt")
        freshness, age = age_label(built_at)
        report.update(
            model=meta.get("model"),
            provider=meta.get("provider"),
            dimension=meta.get("dimension"),
            totalChunks=meta.get("totalChunks"),
            totalDocuments=sum(c.get("documents", 0) for c in meta.get("collections", {}).values()),
            indexBytes=meta.get("sizeBytes"),
            builtAt=built_at,
            freshness="Damaged" if damage else freshness,
            ageSeconds=age,
            contentHash=meta.get("contentHash"),
            collections=meta.get("collections", {}),
        )
    if summary:
        report["store"] = {
            "path": str(cfg.public_store_path),
            "bytes": summary.size_bytes,
            "documents": summary.documents,
            "chunks": summary.chunks,
            "model": summary.model,
        }
    report["tiers"] = tiers_report(cfg, damaged)
    return report


def cmd_status(cfg: RagConfig, args: argparse.Namespace) -> int:
    service = service_status(cfg.embedding)
    if args.json:
        report = status_report(cfg)
        report["embeddingService"] = dataclasses.asdict(service) | {"reachable": service.selected_reachable}
        print(json.dumps(report, indent=2))
        return EXIT_OK if report["built"] and not report["damaged"] else EXIT_FAILED
    code = _print_status(cfg)
    print("Embedding service")
    for line in service.lines():
        print(f"  {line}")
    return code


def _print_status(cfg: RagConfig) -> int:
    report = status_report(cfg)
    for item in report["damaged"]:
        print(f"Damaged     {item['path']}: {item['reason']}; run `rag build` to rebuild it")
    if not report["built"]:
        print(f"No index at {cfg.index_path} yet; run `rag build`.")
        return EXIT_FAILED
    age = report.get("ageSeconds")
    print(f"Index       {report['indexPath']}")
    print(f"Model       {report['model']} ({report['dimension']} dimensions, provider {report.get('provider')})")
    print(f"Chunks      {report['totalChunks']} from {report['totalDocuments']} documents")
    print(f"Size        {human_bytes(report.get('indexBytes') or 0)}")
    print(f"Built       {report['builtAt']} ({relative_age(age) if age is not None else 'unknown'}): {report['freshness']}")
    print(f"Content     {report['contentHash']}")
    if "store" in report:
        s = report["store"]
        print(f"Store       {s['path']} ({human_bytes(s['bytes'])}, {s['chunks']} chunks)")
    print("Collections")
    for name, counts in report["collections"].items():
        print(f"  {name:<20} {counts['documents']:>6} documents {counts['chunks']:>7} chunks")
    _print_tiers(report["tiers"])
    return EXIT_FAILED if report["damaged"] else EXIT_OK


TIER_LABELS = {"public": "Public", "safe": "Safe", "private": "Private"}


def _print_tiers(tiers: dict[str, dict]) -> None:
    print("Tiers")
    for tier, t in tiers.items():
        if t.get("damaged"):
            print(f"  {TIER_LABELS[tier]:<8} {t['store']}: DAMAGED; `rag build` rebuilds it")
        elif not t["exists"]:
            print(f"  {TIER_LABELS[tier]:<8} {t['store']}: not built yet")
        else:
            age = relative_age(t["ageSeconds"]) if t["ageSeconds"] is not None else "unknown"
            print(
                f"  {TIER_LABELS[tier]:<8} {t['store']} ({human_bytes(t['bytes'])}): {t['documents']} documents, "
                f"{t['chunks']} chunks, {t['model'] or 'no model yet'}, built {t['builtAt'] or 'never'} ({age}): {t['freshness']}"
            )
        for name, v in t.get("vaults", {}).items():
            state = f"{v['documents']} documents, {v['chunks']} chunks" if v["built"] else "not built yet"
            print(f"      {name:<18} {v['markdownFiles']:>5} Markdown files on disk; {state}")


# --- audit -----------------------------------------------------------------------------------


def cmd_audit(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.audit import audit_store
    from rag_assets.identity import IdentityMap
    from rag_assets.secrets import SecretDetector

    detector = SecretDetector()
    tiers = ["safe", "public"] if args.tier == "all" else [args.tier]
    identity = IdentityMap.load(cfg.identity_map_path) if cfg.identity_map_path and cfg.identity_map_path.is_file() else None
    # Public text is published by its owner on purpose: only secrets count there, not hostnames.
    reports = [audit_store(cfg.store_path(t), t, detector, identity if t == "safe" else None) for t in tiers]
    if args.json:
        print(json.dumps([dataclasses.asdict(r) | {"ok": r.ok} for r in reports], indent=2))
    else:
        for r in reports:
            _print_audit(r)
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


def _print_audit(report) -> None:
    label = TIER_LABELS[report.tier]
    if not report.exists:
        print(f"{label} tier: no store at {report.store_path}; run `rag build` first.")
        return
    print(
        f"{label} tier ({report.store_path}): {report.chunks_scanned} chunks and {report.documents_scanned} "
        f"documents scanned, {len(report.findings)} finding(s)"
    )
    for f in report.findings:
        print(f"  {f.item_id}  [{f.field}]  {f.kind}: {f.preview}")
    if report.findings:
        kinds = ", ".join(f"{k} x{n}" for k, n in report.kinds().items())
        print(f"  by kind: {kinds}")


# --- search, context, log, serve, eval -------------------------------------------------------


def _search_params(cfg: RagConfig, args: argparse.Namespace):
    from rag_assets.search import SearchParams, parse_filters

    overrides = {
        "k": args.k,
        "fusion": args.fusion,
        "vector_weight": args.vector_weight,
        "bm25_weight": args.bm25_weight,
        "min_score": args.min_score,
        "mmr_lambda": args.mmr,
        "max_per_document": args.per_doc,
    }
    params = SearchParams(
        mode=args.mode,
        collections=tuple(c.strip() for c in (args.collections or "").split(",") if c.strip()),
        filters=parse_filters(args.filter),
        tags=tuple(args.tag),
        slug_prefix=args.prefix,
        **{k: v for k, v in overrides.items() if v is not None},
    )
    if params.candidates < params.k:
        params = dataclasses.replace(params, candidates=params.k)
    params.validate()
    return params


def _run_search(cfg: RagConfig, args: argparse.Namespace):
    from rag_assets.search import SearchIndex, tier_embedder

    params = _search_params(cfg, args)
    index = SearchIndex(cfg.store_path(args.tier), cfg.collection_weights)
    embedder = None if params.mode == "bm25" else tier_embedder(cfg, args.tier, index)
    return index.search(args.query, embedder, params)


def _search_errors():
    from rag_assets.embedders.errors import ProviderUnavailable
    from rag_assets.privacy import PrivacyError
    from rag_assets.search import SearchError

    return (SearchError, ProviderUnavailable, PrivacyError)


def cmd_search(cfg: RagConfig, args: argparse.Namespace) -> int:
    try:
        result = _run_search(cfg, args)
    except _search_errors() as exc:
        print(f"rag: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
        return EXIT_OK
    if not result.hits:
        print(f"No results above the minimum score ({result.params.min_score}).")
    for hit in result.hits:
        heading = "/".join(_anchor(h) for h in hit.heading_path)
        print(f"{hit.collection}/{hit.slug} ::{heading} {hit.score:.2f}")
    print(
        f"({len(result.hits)} results in {result.latency_ms:.1f} ms, of which {result.embed_ms:.1f} ms embedding the "
        f"query; {args.tier} tier)",
        file=sys.stderr,
    )
    return EXIT_OK


def _anchor(heading: str) -> str:
    from rag_assets.context import heading_anchor

    return heading_anchor(heading)


def cmd_context(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.context import pack_context

    if args.budget <= 0:
        print("rag: --budget must be a positive number of tokens", file=sys.stderr)
        return EXIT_USAGE
    if args.k is None:
        args.k = 20  # more candidates than fit, so the budget decides
    try:
        result = _run_search(cfg, args)
    except _search_errors() as exc:
        print(f"rag: {exc}", file=sys.stderr)
        return EXIT_USAGE
    packed = pack_context(result.hits, args.budget)
    if args.json:
        print(json.dumps(packed.to_json(), indent=2, ensure_ascii=False))
    else:
        print(packed.text)
        print(f"({packed.tokens} of {args.budget} tokens by {packed.tokenizer}, {len(packed.citations)} passages)", file=sys.stderr)
    return EXIT_OK


def cmd_log(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.search_log import read_log

    path = cfg.store_path(args.tier)
    if not path.is_file():
        print(f"rag: no {args.tier} store at {path}; run `rag build` first", file=sys.stderr)
        return EXIT_USAGE
    recent, weakest, total = read_log(path, args.n)
    if args.json:
        print(json.dumps({"total": total, "recent": recent, "weakest": weakest}, indent=2, ensure_ascii=False))
        return EXIT_OK
    print(f"{total} searches logged in {path}")
    for title, rows in (("Recent", recent), ("Weakest (lowest top score)", weakest)):
        print(title)
        for row in rows:
            print(f"  {row['at']}  {row['topScore']:.2f}  {row['latencyMs']:7.1f} ms  {row['hits']:>3} hits  {row['query']}")
    return EXIT_OK


def cmd_serve(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.server import serve

    serve(cfg, host=args.host, port=args.port, allow_private_remote=args.allow_private_remote)
    return EXIT_OK


def cmd_eval(cfg: RagConfig, args: argparse.Namespace) -> int:
    from pathlib import Path

    from rag_assets.evaluation import format_table, run_evaluation

    try:
        report = run_evaluation(cfg, Path(args.dataset), args.split, embedder_name=args.embedder, log=lambda m: print(m, file=sys.stderr))
    except (FileNotFoundError, ValueError) as exc:
        print(f"rag: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(report.metrics, indent=2))
        return EXIT_OK
    info = report.info
    print(f"{info.dataset} ({info.split}): {info.queries} queries, {info.documents} documents, {info.provider} {info.model}")
    print(format_table(report.metrics))
    print(f"(indexing {info.index_seconds:.1f}s{' (rebuilt)' if info.rebuilt else ', cached'}, searching {info.search_seconds:.1f}s)")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
