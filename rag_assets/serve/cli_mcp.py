"""``rag mcp``: the MCP server over stdio, the way desktop and coding agents launch one."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from rag_assets.serve.exit_codes import EXIT_OK

if TYPE_CHECKING:  # annotations only: `rag --help` builds no config models
    from rag_assets.config import RagConfig


def add_mcp_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    mcp = commands.add_parser(
        "mcp",
        parents=[common],
        help="MCP server over stdio (search, get_context, get_document, list_collections, related, ask) for AI agents",
        description=(
            "Serve the Model Context Protocol over stdin/stdout, for a desktop or coding agent to launch "
            "(`rag serve` offers the same tools over streamable HTTP at /mcp). Tools: search, get_context, "
            "get_document, list_collections, and ask when a chat model is configured (llm: in rag.yaml). "
            "Tier public by default, safe on request; private too, since a stdio client runs on this machine. Logs go to stderr; stdout carries only the protocol."
        ),
    )
    mcp.set_defaults(handler=cmd_mcp)


def cmd_mcp(cfg: RagConfig, args: argparse.Namespace) -> int:
    import logging

    import anyio

    from rag_assets.serve.mcp_server import serve_stdio

    # stdout is the protocol channel: every log line must go to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="rag mcp: %(levelname)s %(name)s: %(message)s")
    anyio.run(serve_stdio, cfg)
    return EXIT_OK
