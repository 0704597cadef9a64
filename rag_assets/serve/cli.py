"""The ``rag`` command: a front over the same Dagster assets the UI runs.

``rag build`` executes the ``update_collection`` job once over the collections to
build (indexing and publishing), then ``update_safe_vaults`` and ``update_private_vaults``
once each over the vaults (see rag_assets/defs/runner.py), in-process, against the same definitions that
``dagster dev`` loads, so the CLI and the UI can never build different indexes.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from rag_assets.index.params import MAX_BUDGET, MAX_LINK_BOOST, MAX_PER_DOCUMENT
from rag_assets.serve.cli_ask import add_ask_parser
from rag_assets.serve.cli_links import add_related_parser
from rag_assets.serve.cli_mcp import add_mcp_command
from rag_assets.serve.cli_numbers import finite_float, int_between
from rag_assets.serve.cli_token import add_token_command
from rag_assets.serve.cli_watch import add_watch_command
from rag_assets.serve.exit_codes import EXIT_OK, EXIT_USAGE

Handler = Callable[..., int]


def lazy(module: str, name: str) -> Handler:
    """A command handler imported only when that command runs.

    Start-up time is import time: `rag --help` and `rag search` must not pay for what only
    `rag build` (Dagster, the planner, the privacy scanners) or `rag serve` (Starlette) loads.
    """

    def handler(cfg: object, args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(cfg, args)

    return handler


def configuration_error(exc: Exception) -> str | None:
    """The one-line message for a configuration mistake, or None when ``exc`` is not one."""
    from rag_assets.config import ConfigError
    from rag_assets.embed import UnknownEmbedderError
    from rag_assets.privacy.identity import IdentityMapError

    if isinstance(exc, (ConfigError, UnknownEmbedderError)):
        return f"rag: configuration error: {exc}"
    if isinstance(exc, IdentityMapError):
        return f"rag: configuration error: {exc}; fix the file that identity_map in rag.yaml names"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    from rag_assets.config import load_config

    try:
        cfg = load_config(
            args.config,
            content_dir=args.content_dir,
            output_dir=args.output_dir,
            embedder=getattr(args, "embedder", None),
            private_embedder=getattr(args, "private_embedder", None),
        )
        return args.handler(cfg, args)
    except ValueError as exc:  # every configuration error is a ValueError; the others propagate
        message = configuration_error(exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
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
        epilog="Run `rag COMMAND --help` for a command's options. Docs: README.md and docs/ (the site).",
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
    build.add_argument(
        "--executor",
        choices=("in_process", "celery"),
        default=os.environ.get("RAG_EXECUTOR") or "in_process",
        help="in_process (default; $RAG_EXECUTOR): one run over the collections in this process; celery: one run "
        "per collection on Celery workers (the distributed extra; needs DAGSTER_HOME shared with the workers)",
    )
    build.add_argument(
        "--celery-config",
        metavar="PATH",
        default=os.environ.get("RAG_CELERY_CONFIG") or "celery.yaml",
        help="with --executor celery: the dagster-celery config the workers were started with (-y); default "
        "$RAG_CELERY_CONFIG or ./celery.yaml",
    )
    build.add_argument(
        "--parallel-runs",
        type=int,
        metavar="N",
        default=None,
        help="with --executor celery: collection runs in flight at once (default 4; about the number of workers "
        "and more)",
    )
    build.add_argument(
        "--partitions-per-run",
        type=int,
        metavar="N",
        default=1,
        help="with --executor celery: collections per run (default 1); more amortise the per-step cost of a "
        "Celery task, fewer spread the work more evenly",
    )
    build.add_argument("-v", "--verbose", action="store_true", help="show Dagster's step logs")
    build.set_defaults(handler=lazy("rag_assets.serve.cli_build", "cmd_build"))

    check = commands.add_parser(
        "check",
        parents=[common],
        help="exit 0 if the index matches the content, 1 if it is stale; writes only its record of verified files",
        description="Compare the content on disk with the last build and say which collections changed and why.",
    )
    check.add_argument(
        "--deep",
        action="store_true",
        help="re-verify every output and cache file, also those unchanged since their last verification",
    )
    check.set_defaults(handler=lazy("rag_assets.serve.cli_build", "cmd_check"))

    add_watch_command(commands, common)

    status = commands.add_parser(
        "status",
        parents=[common],
        help="show what the published index holds",
        description="Model, dimension, chunks, size, build time, content hash and per-collection counts.",
    )
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(handler=lazy("rag_assets.serve.status", "cmd_status"))

    audit = commands.add_parser(
        "audit",
        parents=[common],
        help="rescan every field of a tier's store for secrets and identifying values; exit 1 on findings",
        description=(
            "Leak audit: every text field of the tier's SQLite store (chunks: text, headings, IDs; documents: "
            "title, slug, tags, frontmatter) and of its log file (the search and answer logs, sessions included) is "
            "rescanned with the "
            "full secret detector (and, for the Safe tier, the identity map). Findings show the row, field, kind "
            "and a masked preview, never the secret. The Private "
            "tier keeps secrets on purpose and is not audited."
        ),
    )
    audit.add_argument(
        "--tier",
        choices=("safe", "public", "all"),
        default="safe",
        help="which store to audit (default: safe; all: safe and public)",
    )
    audit.add_argument("--json", action="store_true", help="print the findings as JSON")
    audit.set_defaults(handler=lazy("rag_assets.serve.cli_query", "cmd_audit"))

    tiers = ("public", "safe", "private")

    def add_search_options(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("query", help="what to look for, in plain words (no query syntax needed)")
        cmd.add_argument("--tier", choices=tiers, default="public", help="which store to search (default: public)")
        cmd.add_argument(
            "-k",
            type=int_between(1, 1000),
            default=None,
            help="number of results: pages, or chunks with --chunks (default: 10)",
        )
        cmd.add_argument("--collections", metavar="A,B", help="only these collections (or vaults), comma-separated")
        cmd.add_argument(
            "--filter",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="frontmatter field must equal VALUE (repeatable), e.g. status=active or tags=proxmox",
        )
        cmd.add_argument(
            "--tag", action="append", default=[], metavar="TAG", help="document must carry this tag (repeatable)"
        )
        cmd.add_argument(
            "--prefix", metavar="SLUG", help="only documents whose slug (or collection/slug) starts with this"
        )
        cmd.add_argument(
            "--mode", choices=("hybrid", "vector", "bm25"), default="hybrid", help="ranking (default: hybrid)"
        )
        cmd.add_argument(
            "--fusion",
            choices=("zscore", "rrf", "convex"),
            help="how vector and BM25 lists combine (default: the store's profile, chosen per embedder; see docs/search.md)",
        )
        cmd.add_argument(
            "--vector-weight", type=finite_float(0), help="weight of the vector list in the fusion (0: off)"
        )
        cmd.add_argument("--bm25-weight", type=finite_float(0), help="weight of the BM25 list in the fusion (0: off)")
        cmd.add_argument(
            "--min-score",
            type=finite_float(),
            metavar="R",
            help="drop results whose calibrated relevance (0-1, comparable across queries) is under R "
            "(default: 0.5, the line chosen on held-in data; 0 shows everything)",
        )
        cmd.add_argument(
            "--mmr",
            type=finite_float(0, 1),
            metavar="LAMBDA",
            help="MMR re-ranking: 1.0 relevance only, lower = more diverse",
        )
        cmd.add_argument(
            "--link-boost",
            type=finite_float(1, MAX_LINK_BOOST),
            metavar="F",
            help="vault notes linked with the best hit's note gain: their relevance odds times F (default 1: off)",
        )
        cmd.add_argument(
            "--chunks",
            action="store_true",
            help="one result per chunk instead of one per page (a page's matching sections listed beneath it)",
        )
        cmd.add_argument(
            "--per-doc",
            type=int_between(1, MAX_PER_DOCUMENT),
            metavar="N",
            help="chunk results, at most N per document (implies --chunks)",
        )
        cmd.add_argument(
            "--rerank",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="re-score the top fused candidates with the reranker of rag.yaml (default: on when one is configured)",
        )
        cmd.add_argument("--json", action="store_true", help="print JSON")

    search = commands.add_parser(
        "search",
        parents=[common],
        help="hybrid (vector + BM25) search of a tier's store",
        description=(
            "Search one tier's SQLite store: cosine similarity of the query embedding (the model that built the "
            "store) fused with FTS5 BM25. Each hit gets a calibrated relevance in [0, 1] that means the same "
            "across queries (the collection weight on its odds), and hits are ranked by it; hits under --min-score are dropped, so a question the "
            "content does not answer returns nothing. Results are pages: `collection/slug ::heading/path "
            "relevance` lines with the page's other matching sections indented beneath (--chunks for one line "
            "per chunk), or JSON with --json (every hit has `relevance` and `sections`). Every search is logged "
            "in the store (see `rag log`)."
        ),
    )
    add_search_options(search)
    search.set_defaults(handler=lazy("rag_assets.serve.cli_query", "cmd_search"))

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
    context.add_argument("--budget", type=int_between(1, MAX_BUDGET), default=1500, help="token budget (default: 1500)")
    context.set_defaults(handler=lazy("rag_assets.serve.cli_query", "cmd_context"))

    add_ask_parser(commands, common)
    add_related_parser(commands, common)

    log = commands.add_parser(
        "log",
        parents=[common],
        help="recent searches and the weakest ones (lowest best relevance)",
        description=(
            "Reads the search_log and answer_log tables of a tier's log file (beside its store): what was asked, "
            "how well it matched, how fast."
        ),
    )
    log.add_argument("--tier", choices=tiers, default="public", help="which store's log (default: public)")
    log.add_argument("-n", type=int_between(1, 10_000), default=10, help="rows per list (default: 10)")
    log.add_argument("--json", action="store_true", help="print JSON")
    log.set_defaults(handler=lazy("rag_assets.serve.cli_query", "cmd_log"))

    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="the web page at /, the HTTP API (GET /search, /context, /status; POST /ask) and MCP at /mcp",
        description=(
            "Serve the page for people at /, the HTTP API and MCP at /mcp with uvicorn. "
            "Bad parameters get a 400 with a message, never a 500."
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int_between(0, 65535), default=8765, help="port (default: 8765)")
    serve.add_argument(
        "--allow-private-remote",
        action="store_true",
        help="also serve the Private tier when bound to a non-loopback address (refused by default)",
    )
    serve.set_defaults(handler=lazy("rag_assets.serve.cli_query", "cmd_serve"))

    add_mcp_command(commands, common)
    add_token_command(commands, common)

    evaluate = commands.add_parser(
        "eval",
        parents=[common],
        help="retrieval quality: a BEIR benchmark (--dataset) or your own questions over the built index (--questions)",
        description=(
            "Two modes; choose one. --dataset DIR: index a BEIR-layout dataset (corpus.jsonl, queries.jsonl, "
            "qrels/<split>.tsv) as a collection of its own with the configured (or given) embedder, through the "
            "embedding cache, and report nDCG@10, recall@10, recall@100 and MRR@10. --questions FILE: search the "
            "index already built in the output folder (the public tier's store; run `rag build` first) for each "
            'question of a JSON-lines file, one {"q": "...", "expect": ["collection/slug", ...]} per line, and '
            "report hit@1, hit@5, hit@10 and MRR@10, judged per page (a question scores when any expected page "
            "is among the first k pages). Both score BM25 alone, vector alone and hybrid with the default search "
            "settings."
        ),
        epilog=(
            "examples: rag eval --dataset ../shared/corpora/beir-scifact;  "
            "rag eval --questions eval/questions/sample.jsonl --json"
        ),
    )
    evaluate.add_argument("--dataset", metavar="DIR", help="BEIR dataset folder, e.g. ../shared/corpora/beir-scifact")
    evaluate.add_argument(
        "--questions",
        action="extend",
        nargs="+",
        metavar="FILE",
        help='question file(s), JSON lines {"q": ..., "expect": ["collection/slug", ...]}, scored against the built index',
    )
    evaluate.add_argument(
        "--split", choices=("test", "train", "dev"), help="qrels split, with --dataset (default: test)"
    )
    evaluate.add_argument(
        "--embedder", metavar="NAME", help="embedding provider for the corpus and queries, with --dataset"
    )
    evaluate.add_argument(
        "--backend",
        choices=("sqlite", "postgres"),
        help="the store searched (default: store.backend): postgres syncs the eval store (or, with --questions, reads "
        "the public tier) into PostgreSQL at store.url / $RAG_STORE_URL and searches it there",
    )
    evaluate.add_argument("--json", action="store_true", help="print the figures as JSON")
    evaluate.set_defaults(handler=lazy("rag_assets.serve.cli_query", "cmd_eval"))

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
    config.set_defaults(handler=lazy("rag_assets.serve.cli_build", "cmd_config"))
    return parser


if __name__ == "__main__":
    sys.exit(main())
