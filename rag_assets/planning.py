"""One planner for every trigger: what a build must redo, and why (no Dagster import).

:func:`observe` gathers the state (the files' hashes against the manifest and the indexed
ledger, the published sidecar's model, dimension, chunker settings and encoding, damage
of the published outputs, the vaults in the tier stores against rag.yaml, the Safe rules'
fingerprint); :func:`plan` turns it into a :class:`Plan`: the collections (and shards) to
re-index, the vaults to rebuild per tier, whether to publish, the vaults to purge, and a
typed :class:`Cause` for each. ``rag build`` prints the causes and runs the plan; the change
sensor and the vault sensor turn it into RunRequests; the nightly schedules run its forced
form; so every trigger decides alike.

A run launched from the Dagster UI (or GraphQL) for a subset of partitions keeps Dagster's
own meaning of partitions: exactly the partitions chosen are materialised, and the others
keep their last materialisation. When the embedder changed since those were made, the
publish step asks :func:`records_to_reembed` which loaded records are of another model or
dimension and re-embeds them (through the embedding cache) before publishing, so the index
always holds one model instead of failing with MixedModelsError. The partitions not run
show as stale in the UI, with the cause, because the collection assets' code version is
:func:`build_signature` (model, dimension, chunker settings): Dagster's own staleness,
where it expresses the cause. Declarative automation is not used: a condition cannot see
files on disk, so the sensors stay, and call this planner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from rag_assets.base.verified import VerificationRecord
from rag_assets.config import RagConfig
from rag_assets.config.settings import ChunkingParams
from rag_assets.embed import select_embedder
from rag_assets.index import generations
from rag_assets.index.freshness import ChangeReport, CollectionChange, detect_changes
from rag_assets.index.index_json import read_meta
from rag_assets.ingest.collections import discover_collections
from rag_assets.ingest.doc_cache import settings_key
from rag_assets.ingest.shards import partition_keys
from rag_assets.privacy.vaults import (
    VaultChange,
    built_rules_fingerprints,
    current_rules_fingerprint,
    departed_vaults,
    detect_vault_changes,
)
from rag_assets.records import EmbeddedCollection, RecordFacts


class Reason(str, Enum):
    """Why something is rebuilt, republished or purged."""

    FORCED = "a full rebuild was asked for"
    ASKED = "asked for by name"
    NO_INDEX = "no index yet"
    NEW_COLLECTION = "new collection"
    FILES_ADDED = "files added"
    FILES_CHANGED = "files changed"
    FILES_REMOVED = "files removed"
    FILES_RENAMED = "files renamed"
    RESHARDED = "its shard count changed"
    UNPUBLISHED = "its last indexing was not published"
    COLLECTION_REMOVED = "no longer a collection (its folder was removed or is left out)"
    MODEL_CHANGED = "the embedder's model or dimension changed"
    CHUNKER_CHANGED = "the chunker settings changed"
    ENCODING_CHANGED = "public_index.vector_encoding changed"
    DAMAGED = "a published output is damaged"
    VAULT_NEW = "vault not built yet"
    VAULT_NOTES_CHANGED = "the vault's notes changed"
    SAFE_RULES_CHANGED = "the identity map or the secret rules changed"
    VAULT_DEPARTED = "vault left the tier"


# What each reason makes a build do to the public collections.
REBUILD_ALL = {Reason.FORCED, Reason.MODEL_CHANGED, Reason.CHUNKER_CHANGED, Reason.DAMAGED, Reason.ENCODING_CHANGED}


@dataclass(frozen=True)
class Cause:
    """One reason, what it concerns (a collection, vault, tier or output) and its particulars."""

    reason: Reason
    subject: str
    detail: str = ""

    def __str__(self) -> str:
        return f"[{self.subject}] {self.reason.value}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class BuildSignature:
    """What the collections' records are made with: the embedder and the chunker settings."""

    provider: str
    model: str
    dimension: int
    chunking: str  # see chunking_key

    @property
    def code_version(self) -> str:
        """A short stable digest, the collection assets' Dagster code version."""
        text = f"{self.model}|{self.dimension}|{self.chunking}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Published:
    """What the published sidecar says it was made with (None fields: not recorded)."""

    model: str | None
    dimension: int | None
    chunking: str | None
    encoding: str


@dataclass
class ObservedState:
    """Everything the planner decides from; gathered by :func:`observe`."""

    collections: list[str]
    changes: ChangeReport
    signature: BuildSignature | None  # None: the collections were not observed
    published: Published | None
    vault_changes: list[VaultChange]
    departed: dict[str, list[str]]
    rules_changed: set[str]  # Safe vaults built with other rules than the current ones
    encoding: str  # the configured public vector encoding


@dataclass
class Plan:
    """What to run: collections (partitions: None for every one of theirs), vaults per tier,
    whether to publish, vaults to purge per tier, and why."""

    collections: list[str] = field(default_factory=list)
    partitions: list[str] | None = None
    vaults: dict[str, list[str]] = field(default_factory=dict)
    publish: bool = False
    purge: dict[str, list[str]] = field(default_factory=dict)
    causes: list[Cause] = field(default_factory=list)
    full: bool = False  # every collection is re-indexed (a full build)
    warnings: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.collections or self.publish or self.vaults or self.purge)

    @property
    def vault_names(self) -> list[str]:
        return sorted({name for names in self.vaults.values() for name in names})

    def keys(self, cfg: RagConfig) -> list[str]:
        """The collection partitions to run (a sharded collection is its shards)."""
        return partition_keys(cfg, self.collections) if self.partitions is None else list(self.partitions)

    def reasons(self) -> set[Reason]:
        return {cause.reason for cause in self.causes}


def chunking_key(params: ChunkingParams) -> str:
    """The chunker settings as the document cache keys them (a change re-chunks everything)."""
    return settings_key(params)


def settings_code_version(cfg: RagConfig) -> str:
    """The collection records' Dagster code version: a digest of the configured embedder's
    model settings and the chunker settings, from rag.yaml alone (no service is probed, so
    loading the definitions stays quick; ``auto`` counts as its own setting)."""
    e = cfg.embedding
    text = "|".join(
        str(part)
        for part in (
            e.name,
            e.openai.model,
            e.openai.dimension,
            e.ollama.model,
            e.ollama.dimension,
            e.local_model_path,
            e.hashing_dimension,
            chunking_key(cfg.chunking),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def chunking_code_version(cfg: RagConfig) -> str:
    """The chunks asset's Dagster code version: its settings, digested."""
    return hashlib.sha256(chunking_key(cfg.chunking).encode()).hexdigest()[:16]


def signature_of(provider: str, model: str, dimension: int, params: ChunkingParams) -> BuildSignature:
    return BuildSignature(provider, model, dimension, chunking_key(params))


def build_signature(cfg: RagConfig) -> BuildSignature:
    """The configured embedder (for ``auto``, the one chosen now) and chunker settings."""
    selection = select_embedder(cfg.embedding)
    close = getattr(selection.embedder, "close", None)
    if close:
        close()
    embedder = selection.embedder
    return BuildSignature(selection.provider, embedder.model, embedder.dimension, chunking_key(cfg.chunking))


def published_settings(cfg: RagConfig) -> Published | None:
    meta = read_meta(generations.published(cfg).meta_path)
    if meta is None:
        return None
    return Published(
        meta.get("model"), meta.get("dimension"), meta.get("chunking"), meta.get("vectorEncoding", "float")
    )


def observe(
    cfg: RagConfig,
    *,
    verify_outputs: bool = True,
    save_stat_cache: bool = True,
    collections: bool = True,
    vaults: bool = True,
    record: VerificationRecord | None = None,
    watch: bool = False,
) -> ObservedState:
    """The state the planner decides from. ``verify_outputs=False`` skips reading the published
    files for damage (a sensor tick: that re-reads the whole index; `rag build` verifies);
    ``collections``/``vaults`` False leave that side unobserved (so unplanned), for a sensor
    that triggers only the other. ``record``: the files verified before and unchanged since are
    not read again (rag_assets.base.verified). ``watch``: keep what the walk read, for the check
    after the publish (rag_assets.index.freshness.content_hash_if_unchanged)."""
    if collections:
        changes = detect_changes(
            cfg, save_stat_cache=save_stat_cache, verify_outputs=verify_outputs, record=record, watch=watch
        )
        names, signature, published = (
            list(discover_collections(cfg).collections),
            build_signature(cfg),
            published_settings(cfg),
        )
    else:
        changes, names, signature, published = ChangeReport([], "", None, False), [], None, None
    return ObservedState(
        collections=names,
        changes=changes,
        signature=signature,
        published=published,
        vault_changes=detect_vault_changes(cfg) if vaults else [],
        departed=departed_vaults(cfg) if vaults else {},
        rules_changed=_rules_changed(cfg) if vaults else set(),
        encoding=cfg.vector_encoding,
    )


def _rules_changed(cfg: RagConfig) -> set[str]:
    if not cfg.tier_vaults("safe"):
        return set()
    current = current_rules_fingerprint(cfg)
    built = built_rules_fingerprints(cfg)
    return {v.name for v in cfg.tier_vaults("safe") if v.name in built and built[v.name] != current}


def plan(
    cfg: RagConfig,
    state: ObservedState,
    *,
    collections: Iterable[str] | None = None,
    vaults: Iterable[str] | None = None,
    force: bool = False,
) -> Plan:
    """What to rebuild, and why. ``collections``/``vaults``: only these were asked for (still
    widened to every collection when the model or chunker changed: one index, one model);
    ``force``: everything, whatever changed."""
    result = Plan()
    asked = collections is not None or vaults is not None
    _plan_vaults(cfg, state, result, None if not asked else list(vaults or []), force)
    if not state.collections:
        return result
    widen = _settings_causes(state)
    if force:
        result.causes.append(Cause(Reason.FORCED, "collections", f"{len(state.collections)} collection(s)"))
        _everything(result, state)
    elif asked:
        result.collections = list(collections or [])
        result.publish = bool(result.collections)
        result.causes += [Cause(Reason.ASKED, name) for name in result.collections]
        if result.collections and widen:
            result.causes += widen
            _everything(result, state)
    else:
        _plan_incremental(state, result, widen)
    return result


def _everything(result: Plan, state: ObservedState) -> None:
    result.collections, result.partitions, result.publish, result.full = list(state.collections), None, True, True


def _settings_causes(state: ObservedState) -> list[Cause]:
    """Causes that re-embed every collection: the index was made with another model or chunker."""
    published, now = state.published, state.signature
    if published is None or now is None or not state.changes.has_index:
        return []
    causes = []
    if published.model is not None and (published.model, published.dimension) != (now.model, now.dimension):
        causes.append(
            Cause(
                Reason.MODEL_CHANGED,
                "public index",
                f"built with {published.model} ({published.dimension}), configured {now.model} ({now.dimension})",
            )
        )
    # A sidecar from before the chunker was recorded says nothing: trusted, not rebuilt.
    if published.chunking is not None and published.chunking != now.chunking:
        causes.append(Cause(Reason.CHUNKER_CHANGED, "public index", f"{published.chunking} -> {now.chunking}"))
    return causes


def _plan_incremental(state: ObservedState, result: Plan, widen: list[Cause]) -> None:
    report = state.changes
    causes = list(widen)
    causes += [Cause(Reason.DAMAGED, str(d.path), d.reason) for d in report.damage]
    published = state.published
    if report.has_index and published is not None and published.encoding != state.encoding:
        causes.append(Cause(Reason.ENCODING_CHANGED, "public index", f"{published.encoding} -> {state.encoding}"))
    if causes:
        result.causes += causes
        _everything(result, state)
        return
    if report.up_to_date:
        return
    result.publish = True
    if not report.has_index:
        result.causes.append(Cause(Reason.NO_INDEX, "public index", f"{len(state.collections)} collection(s)"))
        _everything(result, state)
        return
    result.collections = [c.collection for c in report.changed if c.status != "removed"]
    result.partitions = [key for c in report.changed if c.status != "removed" for key in c.partitions]
    for change in report.changed:
        result.causes += collection_causes(change)


def collection_causes(change: CollectionChange) -> list[Cause]:
    """Why one collection is re-indexed (or, removed, left out of the next publish)."""
    name = change.collection
    if change.status == "new":
        return [Cause(Reason.NEW_COLLECTION, name, f"{len(change.added)} files")]
    if change.status == "removed":
        return [Cause(Reason.COLLECTION_REMOVED, name, "its chunks are deleted from every output")]
    if change.resharded:
        return [Cause(Reason.RESHARDED, name)]
    renamed = dict(change.renamed)
    added = [p for p in change.added if p not in renamed.values()]
    removed = [p for p in change.removed if p not in renamed]
    causes = [
        Cause(reason, name, f"{len(paths)}: {', '.join(paths[:3])}" + (" ..." if len(paths) > 3 else ""))
        for reason, paths in (
            (Reason.FILES_ADDED, added),
            (Reason.FILES_CHANGED, change.changed),
            (Reason.FILES_REMOVED, removed),
            (Reason.FILES_RENAMED, [f"{old} -> {new}" for old, new in change.renamed]),
        )
        if paths
    ]
    return causes or [Cause(Reason.UNPUBLISHED, name)]


def _plan_vaults(cfg: RagConfig, state: ObservedState, result: Plan, asked: list[str] | None, force: bool) -> None:
    """The vaults to rebuild per tier (and why), and those to purge."""
    for change in state.vault_changes:
        if asked is not None and change.vault not in asked:
            continue
        if change.status == "missing" and not (force or asked):
            result.warnings.append(
                f"vault {change.vault!r}: folder {cfg.vault(change.vault).path} does not exist; its rows are kept"
            )
            continue
        cause = _vault_cause(change, state, Reason.ASKED if asked else Reason.FORCED if force else None)
        if cause is not None:
            result.vaults.setdefault(change.tier, []).append(change.vault)
            result.causes.append(cause)
    for tier, names in state.departed.items():
        result.purge[tier] = list(names)
        result.causes += [Cause(Reason.VAULT_DEPARTED, f"{tier} tier", name) for name in names]


def _vault_cause(change: VaultChange, state: ObservedState, always: Reason | None) -> Cause | None:
    """Why one vault is rebuilt in one tier (None: it is current); ``always``: the reason to
    rebuild it anyway (forced, or asked for by name)."""
    subject, tier = f"vault {change.vault}", f"{change.tier} tier"
    if change.status == "new":
        return Cause(Reason.VAULT_NEW, subject, tier)
    if change.status == "changed":
        rules = change.tier == "safe" and change.vault in state.rules_changed
        return Cause(Reason.SAFE_RULES_CHANGED if rules else Reason.VAULT_NOTES_CHANGED, subject, tier)
    return Cause(always, subject, tier) if always else None


def records_to_reembed(
    collections: Iterable[EmbeddedCollection | RecordFacts], signature: BuildSignature
) -> list[Cause]:
    """The loaded records made with another model or dimension than the configured one (the
    publish step re-embeds them: a partial run from the UI after the embedder changed)."""
    return [
        Cause(
            Reason.MODEL_CHANGED,
            c.collection,
            f"{c.model} ({c.dimension}) -> {signature.model} ({signature.dimension})",
        )
        for c in collections
        if (c.model, c.dimension) != (signature.model, signature.dimension)
    ]


def describe(result: Plan) -> list[str]:
    """The plan's causes as lines to print."""
    return [str(cause) for cause in result.causes]


__all__ = [
    "BuildSignature",
    "Cause",
    "ObservedState",
    "Plan",
    "Published",
    "Reason",
    "build_signature",
    "chunking_code_version",
    "chunking_key",
    "collection_causes",
    "describe",
    "observe",
    "plan",
    "records_to_reembed",
    "settings_code_version",
    "signature_of",
]
