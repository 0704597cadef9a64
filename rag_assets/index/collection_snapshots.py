"""Each collection's snapshot for change detection: walked, or taken as `rag watch`'s journal
vouches for it (rag_assets.ingest.journal_snapshots says when it may)."""

from __future__ import annotations

from collections.abc import Sequence

from rag_assets.config import RagConfig
from rag_assets.ingest import journal_snapshots
from rag_assets.ingest.sources import snapshot_collection
from rag_assets.ingest.stat_cache import StatCache
from rag_assets.ingest.walker import Listing, WalkPolicy, list_folder
from rag_assets.ingest.watch import WatchBuilder
from rag_assets.records import CollectionSnapshot


def take_snapshots(
    cfg: RagConfig,
    names: Sequence[str],
    stat_cache: StatCache,
    policy: WalkPolicy,
    builder: WatchBuilder | None,
    reuse: journal_snapshots.Reuse | None,
) -> tuple[dict[str, CollectionSnapshot], dict[str, bool]]:
    """Each collection's snapshot, walked or (with ``reuse``) as the journal vouches for it;
    and for each walked one, whether the journal cannot vouch for it next time (links)."""
    snapshots: dict[str, CollectionSnapshot] = {}
    linked: dict[str, bool] = {}
    hard_links = False
    for name in names:
        if reuse is not None and name in reuse.snapshots:
            continue
        snapshots[name], linked[name], hard = walk_collection(cfg, name, stat_cache, policy, builder)
        hard_links = hard_links or hard
    for name in names:
        if name in snapshots:
            continue
        if hard_links:
            # A file with a second name: the other name may be in a collection the journal
            # took as unchanged (an edit through a hard link is an event at one name only).
            snapshots[name], linked[name], _ = walk_collection(cfg, name, stat_cache, policy, builder)
        elif reuse is not None:
            snapshots[name] = reuse.snapshots[name]
    return {name: snapshots[name] for name in names}, linked


def walk_collection(
    cfg: RagConfig, name: str, stat_cache: StatCache, policy: WalkPolicy, builder: WatchBuilder | None
) -> tuple[CollectionSnapshot, bool, bool]:
    """One collection walked and hashed, whether the journal cannot vouch for it (the folder
    is a symlink, or holds one or a hard-linked file), and whether it holds a hard-linked
    file; with a ``builder``, what its walk read goes into the watch."""
    root = cfg.content_dir / name
    if builder is not None:
        builder.add_path(root, links_too=True)  # before it is listed
    listing = list_folder(root, policy, prefix=f"{name}/") if root.is_dir() else Listing()
    snapshot = snapshot_collection(cfg.content_dir, name, stat_cache, policy=policy, listing=listing)
    if builder is not None:
        builder.add_listing(listing, cfg.content_dir, snapshot.files, prefix=f"{name}/")
    return snapshot, listing.links or listing.hard_links or root.is_symlink(), listing.hard_links
