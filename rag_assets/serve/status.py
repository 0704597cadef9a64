"""``rag status``: what the published index and the three tier stores hold, how fresh they
are, and what is damaged (also the ``/status`` of the HTTP API)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rag_assets.config import (
    RagConfig,
)
from rag_assets.config.masking import mask_url
from rag_assets.index import generations, index_json, store
from rag_assets.index.freshness import age_label
from rag_assets.index.integrity import log_damage, output_damage, verification_record
from rag_assets.ingest.change_journal import JournalFiles, watcher_alive
from rag_assets.ingest.collections import holds_only_vaults, only_vaults_message
from rag_assets.privacy.tier_cards import tiers_report
from rag_assets.reporting import human_bytes, relative_age
from rag_assets.serve.exit_codes import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from rag_assets.embed.selection import ServiceStatus

# --- status ----------------------------------------------------------------------------------


def status_report(cfg: RagConfig, check_damage: bool = True) -> dict[str, Any]:
    """What the published index and store hold, as a JSON-ready dict. ``check_damage=False``
    leaves out the damage checks (the index's SHA-256 and `PRAGMA quick_check` of every SQLite
    file: minutes at a million chunks), for the summary a build prints of what it just wrote.
    The checks read only the files changed since their last verification (rag_assets.base.verified)."""
    gen = generations.published(cfg)  # resolved once: every figure below is of one build
    damage, logs = [], []
    if check_damage:
        record = verification_record(cfg)
        damage, logs = output_damage(cfg, record), log_damage(cfg, record)
        record.save()
    # With what a damaged link now leads to: a store reached through it is not opened either.
    damaged = {d.path for d in damage} | {d.path.resolve() for d in damage}
    meta = index_json.read_meta(gen.meta_path)
    summary = store.summarise(gen.store_path) if gen.store_path not in damaged else None
    report: dict[str, Any] = {
        "indexPath": str(cfg.index_path),
        "built": meta is not None,
        "generation": gen.id,
        "damaged": [{"path": str(d.path), "reason": d.reason} for d in damage],
        "damagedLogs": [{"path": str(d.path), "reason": d.reason} for d in logs],  # they block nothing
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
            indexBytes=meta.get("indexBytes", meta.get("sizeBytes")),  # segments included (2.0)
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
    report["tiers"] = tiers_report(cfg, damaged, {"public": summary} if summary else None)
    journal = JournalFiles(cfg.watch_dir)
    # Whether change detection walks only what `rag watch`'s journal names (else everything).
    report["watch"] = {"running": watcher_alive(journal), "journal": str(journal.journal)}
    if cfg.store.postgres:
        from rag_assets.index.pg_status import postgres_report

        report["postgres"] = postgres_report(cfg)
    return report


def locked_status(report: dict[str, Any], scopes: list[str], user: str) -> dict[str, Any]:
    """``/status`` as a caller with ``scopes`` may see it: a tier it may not read shows only
    whether it exists (no counts, vault names, paths or chat model), and ``access`` tells the
    page who it is signed in as and which tiers are locked."""
    locked = [tier for tier in report.get("tiers", {}) if tier != "public" and tier not in scopes]
    for tier in locked:
        entry = report["tiers"][tier]
        report["tiers"][tier] = {"exists": entry.get("exists"), "served": entry.get("served", False), "locked": True}
        report.get("chatService", {}).pop(tier, None)
    report["access"] = {
        "user": user,
        "signedIn": "authenticated" in scopes and user != "loopback",
        "scopes": list(scopes),
        "locked": locked,
    }
    return report


def embedding_service_summary(cfg: RagConfig, service: ServiceStatus | None = None) -> dict[str, Any]:
    """Which embedding provider runs and whether it answers, for ``/status`` (the page's header).

    A summary, with URLs masked: the full probe (``rag status --json``) names hosts and paths
    a server bound to a network address has no reason to hand out. ``service``: a probe made
    already (the admin console's, which also lists Ollama's models).
    """
    from rag_assets.embed.selection import service_status  # httpx: only where a service is probed

    service = service or service_status(cfg.embedding)
    return {
        "configured": service.configured,
        "selected": service.selected,
        "model": service.model,
        "reachable": service.selected_reachable,
        "reason": mask_url(service.reason),
    }


def add_query_embedders(report: dict[str, Any], describe: Callable[[str], dict[str, Any]]) -> None:
    """Put in each built, served tier of ``report`` the embedder that embeds its queries
    (``queryEmbedder``: ``describe(tier)``), and a ``warning`` there when it is not the one
    ``embeddingService`` names: that is the embedder a *next* build of the Public or Safe tier
    would use (rag.yaml, or ``auto`` finding an API key), not the one answering queries now.
    The Private tier embeds with its own local-only settings, which ``embeddingService`` does
    not describe, so it gets no such comparison."""
    service = report.get("embeddingService") or {}
    for tier, entry in report.get("tiers", {}).items():
        if not entry.get("served") or not entry.get("exists") or entry.get("damaged"):
            continue
        used = describe(tier)
        if not used.get("ready"):
            used["warning"] = f"queries cannot be embedded ({used.get('reason')}): keyword (BM25) search only"
        elif used.get("model") != entry.get("model"):
            used["warning"] = f"queries are embedded with {used.get('model')}, the store holds {entry.get('model')}"
        elif tier != "private" and service.get("model") and service["model"] != used["model"]:
            used["nextBuild"] = service["model"]
            used["warning"] = (
                f"the configured embedder now picks {service.get('selected')}: {service['model']} "
                f"({service.get('reason')}); queries still use {used['model']}, which built this index, "
                "until the next build re-embeds it"
            )
        entry["queryEmbedder"] = used


def chat_service_summary(cfg: RagConfig, tiers: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Which chat model would answer each tier, for ``/status`` (the page's header).

    ``available``: a model is chosen (``auto`` probed Ollama; an API key is not tried, so
    the first answer is what proves it works). Public and Safe choose alike (any provider);
    Private only a local one, so it is chosen on its own.
    """
    from rag_assets.answer.selection import chat_for_tier
    from rag_assets.base.egress import PrivacyError

    out: dict[str, dict[str, Any]] = {}
    shared: dict[str, Any] | None = None
    for tier in tiers:
        if tier != "private" and shared is not None:
            out[tier] = shared
            continue
        try:
            selection = chat_for_tier(cfg.llm, tier, private_hosts=cfg.private_hosts)
        except PrivacyError as exc:
            out[tier] = {"available": False, "model": None, "reason": mask_url(str(exc))}
            continue
        if selection.provider is not None:
            selection.provider.close()  # only asked which; /ask keeps its own
        out[tier] = {
            "available": selection.provider is not None,
            "model": selection.name if selection.provider is not None else None,
            "reason": mask_url(selection.reason),
        }
        if tier != "private":
            shared = out[tier]
    return out


def cmd_status(cfg: RagConfig, args: argparse.Namespace) -> int:
    from rag_assets.embed.selection import service_status

    service = service_status(cfg.embedding)
    if args.json:
        report = status_report(cfg)
        report["embeddingService"] = dataclasses.asdict(service) | {"reachable": service.selected_reachable}
        print(json.dumps(report, indent=2))
        return EXIT_OK if report["built"] and not report["damaged"] else EXIT_FAILED
    code = print_status(cfg)
    print("Embedding service")
    for line in service.lines():
        print(f"  {line}")
    return code


def print_status(cfg: RagConfig, check_damage: bool = True) -> int:
    """Print the status report (`rag status`, and `rag build` after a build); 0 when every output is sound."""
    report = status_report(cfg, check_damage)
    for item in report["damaged"]:
        print(f"Damaged     {item['path']}: {item['reason']}; run `rag build` to repair it")
    for item in report.get("damagedLogs", []):
        print(f"Damaged log {item['path']}: {item['reason']}")
    if not report["built"]:
        if holds_only_vaults(cfg):  # nothing public to index, and a build would not make one
            print(only_vaults_message(cfg))
            return EXIT_OK
        print(f"No index at {cfg.index_path} yet; run `rag build`.")
        return EXIT_FAILED
    age = report.get("ageSeconds")
    print(f"Index       {report['indexPath']}")
    print(f"Model       {report['model']} ({report['dimension']} dimensions, provider {report.get('provider')})")
    print(f"Chunks      {report['totalChunks']} from {report['totalDocuments']} documents")
    print(f"Size        {human_bytes(report.get('indexBytes') or 0)}")
    print(
        f"Built       {report['builtAt']} ({relative_age(age) if age is not None else 'unknown'}): {report['freshness']}"
    )
    print(f"Content     {report['contentHash']}")
    if "store" in report:
        s = report["store"]
        print(f"Store       {s['path']} ({human_bytes(s['bytes'])}, {s['chunks']} chunks)")
    print("Collections")
    for name, counts in report["collections"].items():
        print(f"  {name:<20} {counts['documents']:>6} documents {counts['chunks']:>7} chunks")
    _print_tiers(report["tiers"])
    _print_watch(report["watch"])
    if "postgres" in report:
        from rag_assets.index.pg_status import report_lines

        print("\n".join(report_lines(report["postgres"])))
    return EXIT_FAILED if report["damaged"] else EXIT_OK


TIER_LABELS = {"public": "Public", "safe": "Safe", "private": "Private"}


def _print_watch(watch: dict[str, Any]) -> None:
    if watch["running"]:
        print(f"Watch       rag watch is running (journal {watch['journal']}): builds walk only what it names")
    elif sys.platform.startswith("linux"):
        print("Watch       rag watch is not running: change detection walks every collection")


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
