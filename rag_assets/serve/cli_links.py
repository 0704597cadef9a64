"""`rag related NOTE` and the vaults' link reports that `rag check` prints.

``related`` reads one tier's store (as `rag search` does: the CLI is the user's own, every
tier is theirs): the note's links, backlinks and nearest notes by vector, each with the
reason (:mod:`rag_assets.search.related`). The link report reads what each vault's build
recorded (:mod:`rag_assets.index.links`); a vault's Private-tier rows hold every vault, so
they are read first, and a Safe vault's sanitised rows when the Private store lacks it.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rag_assets.serve.cli_numbers import int_between
from rag_assets.serve.exit_codes import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:  # annotations only: `rag --help` builds no config models
    from rag_assets.config import RagConfig

ISSUES_PRINTED = 10


def print_link_reports(cfg: RagConfig) -> None:
    """Per configured vault, its links' resolution and the first links that did not resolve."""
    from rag_assets.index.links import stored_link_report  # `rag --help` does not load the store code

    for vault in cfg.vaults:
        report = stored_link_report(cfg.store_path("private"), vault.name)
        if report is None and vault.tier == "safe":
            report = stored_link_report(cfg.store_path("safe"), vault.name)
        if report is None or not report.total:
            continue
        print(f"  [vault {vault.name}] links: {report.summary()}")
        for line in report.issues[:ISSUES_PRINTED]:
            print(f"      {line}")
        more = (
            sum(report.statuses[s] for s in ("unresolved", "ambiguous", "outside")) + report.problems - ISSUES_PRINTED
        )
        if more > 0:
            print(f"      ... and {more} more (the vault's asset metadata in Dagster lists up to 200)")


def add_related_parser(commands, common: argparse.ArgumentParser) -> None:
    """The ``related`` sub-command."""
    related = commands.add_parser(
        "related",
        parents=[common],
        help="a note's links, backlinks and nearest notes by vector, each with the reason",
        description=(
            "Name a note (collection/slug, a slug, or its title) of one tier's store: lists the notes it links to "
            "and those linking to it (resolved within its own vault when it was built) and the notes nearest to it "
            "by vector, each with why it is listed, and its links that resolve to no note."
        ),
    )
    related.add_argument("note", help="collection/slug (as search hits show it), a slug, or the note's title")
    related.add_argument(
        "--tier",
        choices=("public", "safe", "private"),
        default="private",
        help="which store (default: private, which holds every vault)",
    )
    related.add_argument("--collection", metavar="VAULT", help="look the note up in this vault (or collection) only")
    related.add_argument("-k", type=int_between(0, 50), default=5, help="nearest notes by vector (0-50, default 5)")
    related.add_argument("--json", action="store_true", help="print JSON")
    related.set_defaults(handler=cmd_related)


def cmd_related(cfg: RagConfig, args: argparse.Namespace) -> int:
    """Print the note's neighbours (or JSON); exit 2 when the note or the store is not there."""
    from rag_assets.index.params import SearchError
    from rag_assets.search.backends import open_index
    from rag_assets.search.related import related_notes
    from rag_assets.serve.questions import TierQuestions

    note = TierQuestions(cfg)(args.tier, args.note)  # the Safe store's names are sanitised: so is the name asked
    index = open_index(cfg, args.tier, log_searches=False)
    try:
        if not index.exists():
            raise SearchError(f"the {args.tier} tier has no store yet; build it with `rag build`")
        related = related_notes(index, note, collection=args.collection, k=args.k)
    except SearchError as exc:
        print(f"rag: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        index.close()
    if args.json:
        print(json.dumps(related.to_json(), indent=2, ensure_ascii=False))
        return EXIT_OK
    print(f"{related.collection}/{related.slug}: {related.title}")
    for label, items in (("links to", related.links), ("linked from", related.backlinks), ("similar", related.similar)):
        print(f"  {label} ({len(items)}):")
        for item in items:
            print(f"    {item.collection}/{item.slug}  {item.title}: {item.reason}")
    if related.unresolved:
        print(f"  not resolved ({len(related.unresolved)}):")
        for link in related.unresolved:
            print(f"    {link['target'] or '(this note)'}: {link.get('problem') or link['status']}")
    return EXIT_OK
