#!/usr/bin/env python3
"""What access control costs a search: p50 of GET /search from a loopback client without a token
against the same search from a non-loopback client with a valid Bearer token, in one run.

    .venv/bin/python bench/access.py [--requests 1000] [--output-dir DIR]

The index: the repository's sample content (content/, site collections only) built with the
hashing embedder into a temporary folder (or --output-dir, reused when it holds a store). Two
apps over it, as ``rag serve`` makes them: one bound to 127.0.0.1 (its loopback client gets
every scope without looking at any token) and one bound to 198.18.0.1, whose client,
198.18.0.2, sends ``Authorization: Bearer <token>`` (scope safe): the authentication backend
finds the token's answer in its cache (the scrypt check ran once, in the warm-up), then the
rate limiter takes from the token's bucket (limits raised so none refuses), then the search.
Requests go through httpx's ASGI transport with the client address set, in this process, so
both paths pay the same (no) network cost and the difference is the middleware's; they
alternate, one of each, so drift in the machine's load hits both alike.

Printed: p50 and p90 of each path, the difference of the p50s (goal: under 1 ms), the first
verification of the token (scrypt), and the load average. Mode bm25, the same query each time.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402
import httpx  # noqa: E402

from rag_assets.config import load_config  # noqa: E402
from rag_assets.config.serving import RateLimit  # noqa: E402
from rag_assets.defs.runner import run_build  # noqa: E402
from rag_assets.serve.http import create_app  # noqa: E402
from rag_assets.serve.tokens import TokenStore  # noqa: E402

QUERY = {"q": "backup restore", "mode": "bm25", "k": "10"}
WARMUP = 50


def built_config(output_dir: Path, token_file: Path):
    cfg = load_config(None, content_dir=ROOT / "content", output_dir=output_dir, embedder="hashing", environ={})
    cfg = dataclasses.replace(cfg, vaults=())
    unlimited = RateLimit(per_second=1e4, burst=100_000)
    cfg = dataclasses.replace(cfg, serve=dataclasses.replace(cfg.serve, token_file=token_file, search_limit=unlimited))
    if not cfg.public_store_path.is_file():
        assert run_build(cfg, dg.DagsterInstance.ephemeral(), vaults=[]).success
    return cfg


async def timed(client: httpx.AsyncClient, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    response = await client.get("/search", params=QUERY, headers=headers)
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200 and response.json()["hits"], response.text[:300]
    return elapsed


async def measure(cfg, token: str, requests: int) -> dict[str, object]:
    loopback_app = create_app(cfg, preload=False, log_searches=False)
    remote_app = create_app(cfg, preload=False, log_searches=False, host="198.18.0.1")
    loopback = httpx.AsyncClient(
        transport=httpx.ASGITransport(loopback_app, client=("127.0.0.1", 40000)), base_url="http://127.0.0.1:8765"
    )
    remote = httpx.AsyncClient(
        transport=httpx.ASGITransport(remote_app, client=("198.18.0.2", 40000)), base_url="http://198.18.0.1:8765"
    )
    bearer = {"Authorization": f"Bearer {token}"}
    async with loopback, remote:
        started = time.perf_counter()
        await timed(remote, bearer)  # the first sight of the token: scrypt
        first = (time.perf_counter() - started) * 1000
        for _ in range(WARMUP):
            await timed(loopback, {})
            await timed(remote, bearer)
        plain, with_token = [], []
        for _ in range(requests):
            plain.append(await timed(loopback, {}))
            with_token.append(await timed(remote, bearer))
    anonymous = await anonymous_status(remote_app)
    p = lambda xs, q: statistics.quantiles(xs, n=100)[q - 1]  # noqa: E731
    return {
        "requests": requests,
        "loopback_no_token_ms": {"p50": round(statistics.median(plain), 3), "p90": round(p(plain, 90), 3)},
        "remote_bearer_cached_ms": {"p50": round(statistics.median(with_token), 3), "p90": round(p(with_token, 90), 3)},
        "overhead_p50_ms": round(statistics.median(with_token) - statistics.median(plain), 3),
        "first_verification_ms": round(first, 1),
        "anonymous_safe_status": anonymous,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


async def anonymous_status(app) -> int:
    """A sanity check that the remote app does check: no token, tier safe -> 401."""
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app, client=("198.18.0.3", 1)), base_url="http://198.18.0.1:8765"
    ) as client:
        return (await client.get("/search", params={**QUERY, "tier": "safe"})).status_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests per path (default 1000)")
    parser.add_argument("--output-dir", type=Path, help="build here (reused when it holds a store)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rag-bench-access-") as tmp:
        output = args.output_dir or Path(tmp) / "out"
        cfg = built_config(output, Path(tmp) / "config" / "tokens.json")
        token = TokenStore(cfg.serve.token_file).create("bench", ("safe",))
        print(json.dumps(asyncio.run(measure(cfg, token, args.requests)), indent=2))


if __name__ == "__main__":
    main()
