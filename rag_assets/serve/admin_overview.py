"""What the admin console (``/admin``) shows and runs, as JSON-ready dicts (no Starlette here).

- :func:`overview`: one card per tier from the ``rag status`` report (model, dimension,
  chunks, size, build time, freshness, content hash, collections or vaults with their
  counts; the vaults' Markdown files counted on disk by the ingest walker, which lists
  folders with ``os.scandir`` and reads no file), and the embedding and chat services
  (as ``/status`` has them) with the Ollama models it lists.
- :func:`current_config`: the server's configuration with rag.yaml's vaults as the file
  has them now, so a vault added in the console shows (and is ingested) without a restart.
- :func:`audit_tier`: ``rag audit`` of one tier, findings with masked previews only.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from rag_assets.config import TIERS, ConfigError, RagConfig
from rag_assets.config.loading import config_from_text
from rag_assets.config.masking import mask_url
from rag_assets.config.vault_edit import allowed_roots
from rag_assets.embed.selection import service_status
from rag_assets.serve.status import TIER_LABELS, chat_service_summary, embedding_service_summary, status_report

log = logging.getLogger("rag_assets.serve.admin_overview")

MAX_FINDINGS_SHOWN = 200  # a store full of leaks needs `rag audit`, not a page of thousands


def current_config(cfg: RagConfig) -> RagConfig:
    """``cfg`` (with the server's overrides) taking rag.yaml's vaults and ``serve:`` as they are
    on disk now; ``cfg`` itself when it has no file or the file does not validate."""
    path = cfg.config_path
    if path is None or not path.is_file():
        return cfg
    try:
        on_disk = config_from_text(path, path.read_text(encoding="utf-8"))
    except (ConfigError, OSError) as exc:
        log.warning("admin: %s does not load (%s); showing the configuration the server started with", path, exc)
        return cfg
    return replace(
        cfg,
        vaults=on_disk.vaults,
        serve=on_disk.serve,
        identity_map_path=on_disk.identity_map_path or cfg.identity_map_path,
    )


def overview(cfg: RagConfig) -> dict[str, Any]:
    """The console's data: a card per tier, the services, where runs show, the allowed roots."""
    report = status_report(cfg)
    return {
        "tiers": {tier: tier_card(report, tier) for tier in TIERS},
        "damaged": report["damaged"],
        "services": services(cfg),
        "dagsterUrl": cfg.serve.dagster_url,
        "configPath": str(cfg.config_path) if cfg.config_path else None,
        "allowedRoots": [str(root) for root in allowed_roots(cfg)],
    }


def tier_card(report: dict[str, Any], tier: str) -> dict[str, Any]:
    """One tier's card: the Public one from the published index, the others from their store."""
    entry = report["tiers"].get(tier, {})
    card: dict[str, Any] = {
        "tier": tier,
        "label": TIER_LABELS[tier],
        "chatLink": f"./?tier={tier}",
        "localOnly": tier == "private",
    }
    if entry.get("damaged"):
        return card | {"exists": True, "freshness": "Damaged", "pills": [], "vaults": []}
    if tier == "public":
        collections = report.get("collections") or {}
        return card | {
            "exists": bool(report.get("built")),
            "model": report.get("model"),
            "dimension": report.get("dimension"),
            "chunks": report.get("totalChunks") or 0,
            "bytes": (entry.get("bytes") or 0) + (report.get("indexBytes") or 0),  # store + JSON index
            "builtAt": report.get("builtAt"),
            "ageSeconds": report.get("ageSeconds"),
            "freshness": report.get("freshness", "Missing"),
            "contentHash": report.get("contentHash"),
            "pills": [{"name": name, "chunks": c.get("chunks", 0)} for name, c in sorted(collections.items())],
        }
    vaults = entry.get("vaults", {})
    return card | {
        "exists": bool(entry.get("exists")),
        "model": entry.get("model"),
        "dimension": entry.get("dimension"),
        "chunks": entry.get("chunks") or 0,
        "bytes": entry.get("bytes") or 0,
        "builtAt": entry.get("builtAt"),
        "ageSeconds": entry.get("ageSeconds"),
        "freshness": entry.get("freshness", "Missing"),
        "contentHash": entry.get("contentHash"),
        "pills": [{"name": name, "chunks": v.get("chunks", 0)} for name, v in vaults.items()],
        "vaults": [{"name": name, **v} for name, v in vaults.items()],
    }


def services(cfg: RagConfig) -> dict[str, Any]:
    """The embedding and chat services (``/status``'s summaries) and Ollama's models, from
    one probe of each provider (the embedding probe asks Ollama's /api/tags)."""
    service = service_status(cfg.embedding)
    return {
        "embedding": embedding_service_summary(cfg, service),
        "chat": chat_service_summary(cfg, TIERS),
        "ollama": {
            "host": mask_url(service.ollama_host),
            "online": service.ollama_online,
            "models": list(service.ollama_models),
            "error": mask_url(service.ollama_error) if service.ollama_error else None,
        },
    }


def audit_tier(cfg: RagConfig, tier: str) -> dict[str, Any]:
    """``rag audit`` of one tier (Safe: secrets and identity-map values; Public: secrets only)."""
    from rag_assets.privacy.audit import audit_store
    from rag_assets.privacy.identity import IdentityMap
    from rag_assets.privacy.secrets import SecretDetector

    identity = None
    if tier == "safe" and cfg.identity_map_path and cfg.identity_map_path.is_file():
        identity = IdentityMap.load(cfg.identity_map_path)
    report = audit_store(cfg.store_path(tier), tier, SecretDetector(), identity)
    return {
        "tier": tier,
        "exists": report.exists,
        "ok": report.ok,
        "chunksScanned": report.chunks_scanned,
        "documentsScanned": report.documents_scanned,
        "total": len(report.findings),
        "kinds": report.kinds(),
        # The preview is masked (the CLI's): the secret itself never leaves the store.
        "findings": [
            {"item": f.item_id, "field": f.field, "kind": f.kind, "preview": f.preview}
            for f in report.findings[:MAX_FINDINGS_SHOWN]
        ],
    }
