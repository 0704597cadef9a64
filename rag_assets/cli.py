"""The ``rag`` command: a front over the same Dagster assets the UI runs.

``rag build`` executes the ``index_collection`` job once per collection and then
the ``publish_index`` job, in-process, against the same definitions that
``dagster dev`` loads, so the CLI and the UI can never build different indexes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any, Sequence

from rag_assets import index_json, store
from rag_assets.config import ConfigError, RagConfig, discover_collections, load_config
from rag_assets.embedders import UnknownEmbedderError, select_embedder
from rag_assets.embedders.selection import service_status
from rag_assets.freshness import age_label, detect_changes
from rag_assets.pipeline import plan_collection
from rag_assets.reporting import human_bytes, relative_age

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        cfg = load_config(
            args.config, content_dir=args.content_dir, output_dir=args.output_dir, embedder=getattr(args, "embedder", None)
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
            "-> chunks -> embeddings, then public_index, public_store and rag_manifest. Prints progress per "
            "collection and a summary; exits 1 if any step fails."
        ),
    )
    build.add_argument(
        "--collection",
        action="extend",
        nargs="+",
        metavar="NAME",
        help="build only these collections (repeatable); the others keep their last build",
    )
    build.add_argument("--embedder", metavar="NAME", help="embedding provider (overrides rag.yaml and $RAG_EMBEDDER): hashing")
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
    return parser


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
    targets = list(args.collection or discovery.collections)
    unknown = [c for c in targets if c not in discovery.collections]
    if unknown:
        print(
            f"rag: unknown collection(s) {', '.join(unknown)}; known: {', '.join(discovery.collections) or 'none'}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not targets:
        print(f"rag: no collections found in {cfg.content_dir}; add a folder of Markdown files", file=sys.stderr)
        return EXIT_USAGE
    if args.dry_run:
        return _dry_run(cfg, targets)
    if not args.force and not args.collection:
        report = detect_changes(cfg)
        if report.up_to_date:
            print(f"Index is up to date (content hash {report.current_hash[:12]}); nothing to build. Use --force to rebuild.")
            return EXIT_OK
        if report.has_index:
            targets = [c.collection for c in report.changed if c.status != "removed"]
            for change in report.changed:
                print(f"[{change.collection}] {change.summary()}")

    # Imported only now: Dagster takes a second to import, and a no-op build should not pay it.
    from rag_assets.defs.runner import CollectionOutcome, cli_instance, run_build

    def progress(outcome: CollectionOutcome) -> None:
        if not outcome.success:
            print(f"[{outcome.collection}] FAILED ({outcome.seconds:.1f}s)")
            return
        meta = outcome.metadata
        print(
            f"[{outcome.collection}] {meta['parsed_documents']['documents']} documents, "
            f"{meta['chunks']['chunks']} chunks, {len(outcome.skipped)} skipped ({outcome.seconds:.1f}s)",
            flush=True,
        )

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
    print(f"Building {len(targets)} collection(s) from {cfg.content_dir}", flush=True)
    with cli_instance() as instance:
        outcome = run_build(
            cfg,
            instance,
            collections=targets,
            verbose=args.verbose,
            on_collection=progress,
            full=True if args.force else None,
        )
    skipped = [s for c in outcome.collections for s in c.skipped]
    if skipped:
        print(f"\nSkipped {len(skipped)} file(s):")
        for item in skipped:
            print(f"  {item.path}: {item.reason}")
    if outcome.error:
        print(f"rag: build failed: {outcome.error}", file=sys.stderr)
        print("rag: the previous index is unchanged", file=sys.stderr)
        return EXIT_FAILED
    for problem in outcome.failed_checks:
        print(f"rag: check failed: {problem}", file=sys.stderr)
    for warning in outcome.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"Built in {outcome.seconds:.1f}s\n")
    _print_status(cfg)
    return EXIT_FAILED if outcome.failed_checks else EXIT_OK


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
    if not report.has_index:
        print(f"Stale: no index at {cfg.index_path}; run `rag build`.")
        return EXIT_FAILED
    if report.up_to_date:
        print(f"Fresh: the index matches the content (content hash {report.current_hash[:12]}).")
        return EXIT_OK
    print("Stale: the content changed since the last build.")
    for change in report.changed:
        print(f"  [{change.collection}] {change.summary()}")
        for label, paths in (("added", change.added), ("changed", change.changed), ("removed", change.removed)):
            for path in paths[:10]:
                print(f"      {label:<8} {path}")
            if len(paths) > 10:
                print(f"      ... and {len(paths) - 10} more {label}")
    return EXIT_FAILED


# --- status ----------------------------------------------------------------------------------


def status_report(cfg: RagConfig) -> dict[str, Any]:
    """What the published index and store hold, as a JSON-ready dict."""
    meta = index_json.read_meta(cfg.meta_path)
    summary = store.summarise(cfg.public_store_path)
    report: dict[str, Any] = {"indexPath": str(cfg.index_path), "built": meta is not None}
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
            freshness=freshness,
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
    return report


def cmd_status(cfg: RagConfig, args: argparse.Namespace) -> int:
    service = service_status(cfg.embedding)
    if args.json:
        report = status_report(cfg)
        report["embeddingService"] = dataclasses.asdict(service) | {"reachable": service.selected_reachable}
        print(json.dumps(report, indent=2))
        return EXIT_OK if report["built"] else EXIT_FAILED
    code = _print_status(cfg)
    print("Embedding service")
    for line in service.lines():
        print(f"  {line}")
    return code


def _print_status(cfg: RagConfig) -> int:
    report = status_report(cfg)
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
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
