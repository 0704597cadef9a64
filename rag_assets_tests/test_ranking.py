"""One ranking, shown honestly (issue 26): hits come in the order of the relevance they show,
collection weights included, through the CLI, HTTP and MCP; for the queries a newcomer tried on
the sample content with the default offline profile (hashing embedder, the repository's
rag.yaml and its collection weights), the page whose title and slug match comes first."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import dagster as dg
import pytest
import yaml
from mcp import ClientSession, StdioServerParameters, stdio_client
from starlette.testclient import TestClient

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.serve.cli import main as rag
from rag_assets.serve.http import create_app

from .conftest import REPO_ROOT, SAMPLE_CONTENT

# query -> the page whose title and slug it names
TITLED = {
    "how do I set up vlans on proxmox": "posts/homelab-proxmox-setup",
    "wireguard": "posts/wireguard-remote-access",
    "restic offsite backups": "posts/restic-offsite-backups",
}
QUERIES = [*TITLED, "zfs snapshots", "proxmox backup restore", "grafana dashboards", "nix flakes"]


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    """The repository's rag.yaml (its collection weights) over the sample content, built offline."""
    root = tmp_path_factory.mktemp("ranking")
    weights = yaml.safe_load((REPO_ROOT / "rag.yaml").read_text(encoding="utf-8"))["weights"]
    config = root / "rag.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "content_dir": str(SAMPLE_CONTENT),
                "output_dir": str(root / "out"),
                "weights": weights,
                "embedder": {"name": "hashing"},
                "identity_map": None,
                "vaults": [],
                "llm": {"name": "none"},
            }
        ),
        encoding="utf-8",
    )
    cfg = load_config(config, embedder="hashing", private_embedder="hashing", environ={})
    assert cfg.collection_weights.get("docs") == 1.5, "the repository's weights are in play"
    with dg.instance_for_test() as instance:
        assert run_build(cfg, instance, vaults=[]).success
    return config


def pages(hits: list[dict]) -> list[tuple[str, float]]:
    return [(f"{h['collection']}/{h['slug']}", h["relevance"]) for h in hits]


def assert_honest(query: str, ranked: list[tuple[str, float]]) -> None:
    figures = [r for _, r in ranked]
    assert figures == sorted(figures, reverse=True), (query, ranked)
    if query in TITLED:
        assert ranked and ranked[0][0] == TITLED[query], (query, ranked)


def test_cli_ranks_by_the_relevance_it_prints(config, capsys):
    for query in QUERIES:
        assert rag(["search", query, "--config", str(config), "--json", "--min-score", "0"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert_honest(query, pages(found["hits"]))
        for hit in found["hits"]:
            sections = [s["relevance"] for s in hit["sections"]]
            assert sections == sorted(sections, reverse=True) and hit["relevance"] == sections[0]
        assert rag(["search", query, "--config", str(config)]) == 0
        lines = [line for line in capsys.readouterr().out.splitlines() if line and not line.startswith((" ", "("))]
        shown = [float(line.rsplit(" ", 1)[1]) for line in lines]
        assert shown == sorted(shown, reverse=True), (query, lines)


def test_http_ranks_by_relevance(config):
    cfg = load_config(config, environ={})
    with TestClient(create_app(cfg, preload=False, log_searches=False), base_url="http://127.0.0.1") as client:
        for query in QUERIES:
            found = client.get("/search", params={"q": query, "min_score": 0}).json()
            assert_honest(query, pages(found["hits"]))
            chunks = client.get("/search", params={"q": query, "min_score": 0, "view": "chunks"}).json()["hits"]
            assert [h["relevance"] for h in chunks] == sorted((h["relevance"] for h in chunks), reverse=True)


def test_mcp_search_ranks_by_relevance(config):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rag_assets.serve.cli", "mcp", "--config", str(config)],
        env={"PYTHONPATH": str(REPO_ROOT), "RAG_EMBEDDER": "hashing", "RAG_PRIVATE_EMBEDDER": "hashing"},
        cwd=str(config.parent),
    )

    async def main() -> dict[str, list]:
        with anyio.fail_after(120):
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    out = {}
                    for query in QUERIES:
                        result = await session.call_tool("search", {"query": query, "min_relevance": 0})
                        assert not result.is_error, result.content[0].text
                        out[query] = pages(result.structured_content["hits"])
                    return out

    for query, ranked in anyio.run(main).items():
        assert_honest(query, ranked)
