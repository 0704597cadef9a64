#!/usr/bin/env python3
"""Time to first token and total time of POST /ask (server-sent events) against a loopback chat
model with a fixed delay per token, so the figure isolates this project's overhead.

    .venv/bin/python bench/ask.py [--output-dir DIR] [--content DIR] [--questions 60] [--token-delay 0.02] [--tokens 40]

The index: the Hugo docs corpus (../shared/corpora/hugo-docs) built with the hashing embedder
into a temporary folder (or --output-dir, reused when it holds a store). The model: the
tests' chat server (rag_assets_tests/chat_server.py) speaking Ollama's /api/chat on
127.0.0.1, answering every question with ``--tokens`` words, each (the first included)
after ``--token-delay`` seconds. The server: `rag serve` in a child process (uvicorn, log
level warning), the chat server and the client (httpx, one request at a time) in this one.

Questions: page titles of the corpus turned into questions ("how do I use <title> in
Hugo?"), seeded; those that abstain (nothing passes the relevance threshold; no model call)
are counted apart. Per answered question:

- TTFT: request sent -> first ``token`` event received;
- overhead = TTFT - token delay: retrieval, packing, prompt, the chat request and the
  relaying of the first piece, everything but the model's own delay;
- total: request sent -> ``done`` event.

Printed: p50 / p90 of each, and of the ``sources`` event (retrieval alone). Goal: overhead
p50 under 50 ms. Warm: five questions are asked first and not counted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
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
from rag_assets.defs.runner import run_build  # noqa: E402
from rag_assets_tests.chat_server import ChatServer  # noqa: E402

HUGO_DOCS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"
WARMUP = 5


def build(output_dir: Path, content: Path) -> None:
    cfg = load_config(
        None, content_dir=content, output_dir=output_dir, embedder="hashing", private_embedder="hashing", environ={}
    )
    if cfg.public_store_path.is_file():
        print(f"reusing the index in {output_dir}", file=sys.stderr)
        return
    started = time.perf_counter()
    with dg.DagsterInstance.ephemeral() as instance:
        outcome = run_build(cfg, instance, full=True)
    if not outcome.success:
        raise SystemExit(f"build failed: {outcome.error or outcome.failed_checks}")
    print(f"built {content} into {output_dir} in {time.perf_counter() - started:.0f}s", file=sys.stderr)


def questions(content: Path, count: int, seed: int = 7) -> list[str]:
    titles = []
    for page in sorted(content.rglob("*.md")):
        match = re.search(r"^title:\s*['\"]?(.+?)['\"]?\s*$", page.read_text(encoding="utf-8", errors="replace"), re.M)
        if match and len(match.group(1).split()) <= 6:
            titles.append(match.group(1))
    random.Random(seed).shuffle(titles)
    return [f"How do I use {t} in Hugo?" for t in titles[: count + WARMUP]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(output_dir: Path, content: Path, chat_url: str) -> tuple[subprocess.Popen, str]:
    config = output_dir / "bench-ask.yaml"
    config.write_text(
        f"content_dir: '{content}'\noutput_dir: '{output_dir}'\nidentity_map: null\nembedder: hashing\n"
        f"llm: {{name: ollama, ollama: {{host: '{chat_url}'}}}}\n"
    )
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import logging, sys; from rag_assets.serve.cli import main; sys.exit(main())",
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit(f"rag serve did not start: {process.stderr.read().decode()[-2000:]}")


def ask_once(client: httpx.Client, url: str, question: str) -> dict:
    """One streamed answer's timings, in ms, from the client's side."""
    started = time.perf_counter()
    marks: dict = {}
    kind = None
    with client.stream("POST", f"{url}/ask", json={"question": question, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
                marks.setdefault(kind, (time.perf_counter() - started) * 1000)
            elif line.startswith("data: ") and kind == "sources":
                marks["abstained"] = json.loads(line[6:])["abstained"]
            elif line.startswith("data: ") and kind == "error":
                raise SystemExit(f"the answer failed: {line[6:]}")
    return marks


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output-dir", type=Path, help="where to build (or find) the index")
    parser.add_argument("--content", type=Path, default=HUGO_DOCS, help="the content folder (default: the Hugo docs)")
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--token-delay", type=float, default=0.02, help="seconds before each streamed piece")
    parser.add_argument("--tokens", type=int, default=40, help="pieces per answer")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        output_dir = args.output_dir or Path(tmp)
        build(output_dir, args.content)
        answer = " ".join(f"word{i}" for i in range(args.tokens - 1)) + " [1]."
        with ChatServer(token_delay=args.token_delay, answer=lambda prompt: answer) as chat:
            process, url = start_server(output_dir, args.content, chat.url)
            try:
                with httpx.Client(timeout=60) as client:
                    runs = [ask_once(client, url, q) for q in questions(args.content, args.questions)]
            finally:
                process.terminate()
                process.wait(10)
    measured = runs[WARMUP:]
    answered = [r for r in measured if not r.get("abstained")]
    delay_ms = args.token_delay * 1000
    if not answered:
        raise SystemExit("every question abstained; nothing to time")
    figures = {
        "sources event (retrieval)": [r["sources"] for r in answered],
        "time to first token": [r["token"] for r in answered],
        "overhead (TTFT - token delay)": [r["token"] - delay_ms for r in answered],
        "total (done event)": [r["done"] for r in answered],
    }
    print(
        f"POST /ask on {args.content} (hashing), {len(answered)} answered questions "
        f"({len(measured) - len(answered)} abstained, not timed), {args.tokens} tokens of {delay_ms:g} ms each"
    )
    print(f"{'':32} {'p50 ms':>8} {'p90 ms':>8}")
    for name, values in figures.items():
        print(f"{name:32} {statistics.median(values):8.1f} {percentile(values, 0.9):8.1f}")
    overhead = statistics.median(figures["overhead (TTFT - token delay)"])
    print(f"goal: overhead p50 < 50 ms: {'met' if overhead < 50 else 'NOT met'} ({overhead:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
