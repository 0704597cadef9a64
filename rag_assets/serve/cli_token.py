"""``rag token create|list|revoke``: the tokens that open the Safe (and Private, and admin) parts of
a ``rag serve`` reached from other machines. Loopback needs none. See :mod:`rag_assets.serve.tokens`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rag_assets.serve.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from rag_assets.serve.tokens import GRANTABLE_SCOPES, TokenError, TokenStore, parse_scopes, token_file_path

if TYPE_CHECKING:  # annotations only: `rag --help` builds no config models
    from rag_assets.config import RagConfig


def add_token_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    token = commands.add_parser(
        "token",
        parents=[common],
        help="create, list and revoke the access tokens of `rag serve` beyond loopback",
        description=(
            "Tokens for clients on other machines: off loopback the Public tier is open to everyone, the Safe "
            "tier needs a token with scope safe, the Private tier one with scope private on a server started "
            "with --allow-private-remote, and /admin one with scope admin. Only a salted scrypt hash is kept, "
            "in $RAG_TOKEN_FILE, else serve.token_file of rag.yaml, else ~/.config/rag-assets/tokens.json "
            "(mode 0600; never inside the output folder). A running server sees changes on its next request."
        ),
        epilog="examples: rag token create --name laptop --scope safe;  rag token list;  rag token revoke laptop",
    )
    actions = token.add_subparsers(title="actions", metavar="ACTION")

    create = actions.add_parser(
        "create",
        parents=[common],
        help="make a token and print it (once: it cannot be shown again)",
        description="Make a token and print it once. Give it to the client: `Authorization: Bearer <token>`, or "
        "the web page's Sign in form.",
    )
    create.add_argument("--name", required=True, help="a name to list and revoke it by (letters, digits, . _ -)")
    create.add_argument(
        "--scope",
        required=True,
        metavar="SCOPES",
        help=f"comma-separated, from {', '.join(GRANTABLE_SCOPES)}: safe reads the Safe tier, private the Private "
        "tier (only on a server started with --allow-private-remote), admin the /admin console",
    )
    create.add_argument("--expires", type=int, metavar="DAYS", help="refuse the token after DAYS days (default: never)")
    create.set_defaults(handler=cmd_token_create)

    listing = actions.add_parser(
        "list",
        parents=[common],
        help="names, scopes, creation and expiry of every token",
        description="The tokens: name, scopes, created, expires. Never a token or its hash.",
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=cmd_token_list)

    revoke = actions.add_parser(
        "revoke",
        parents=[common],
        help="delete a token; a running server refuses it at once",
        description="Delete the token named NAME; the next request presenting it gets a 401.",
    )
    revoke.add_argument("name", metavar="NAME", help="the token's name (see `rag token list`)")
    revoke.set_defaults(handler=cmd_token_revoke)
    token.set_defaults(handler=lambda cfg, args: _usage(token))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _store(cfg: RagConfig) -> TokenStore:
    return TokenStore(token_file_path(cfg))


def cmd_token_create(cfg: RagConfig, args: argparse.Namespace) -> int:
    try:
        store = _store(cfg)
        token = store.create(args.name, parse_scopes(args.scope), args.expires)
    except TokenError as exc:
        print(f"rag token: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(token)
    print(
        f"Token {args.name!r} created in {store.path}; it is shown only this once. Send it as "
        "`Authorization: Bearer <token>`, or paste it into the page's Sign in form.",
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_token_list(cfg: RagConfig, args: argparse.Namespace) -> int:
    try:
        store = _store(cfg)
    except TokenError as exc:
        print(f"rag token: {exc}", file=sys.stderr)
        return EXIT_USAGE
    rows = [r.listing() for r in store.list()]
    if args.json:
        print(json.dumps({"file": str(store.path), "tokens": rows}, indent=2))
        return EXIT_OK
    if not rows:
        print(f"No tokens in {store.path}; `rag token create --name NAME --scope safe` makes one.")
        return EXIT_OK
    print(f"{'NAME':<24} {'SCOPES':<20} {'CREATED':<26} EXPIRES")
    for row in rows:
        expires = row["expires"] or "never"
        if row["expired"]:
            expires += " (expired)"
        print(f"{row['name']:<24} {','.join(row['scopes']):<20} {row['created']:<26} {expires}")
    return EXIT_OK


def cmd_token_revoke(cfg: RagConfig, args: argparse.Namespace) -> int:
    try:
        store = _store(cfg)
        removed = store.revoke(args.name)
    except TokenError as exc:
        print(f"rag token: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not removed:
        print(f"rag token: no token named {args.name!r}; `rag token list` shows the names", file=sys.stderr)
        return EXIT_FAILED
    print(f"Token {args.name!r} revoked.")
    return EXIT_OK
