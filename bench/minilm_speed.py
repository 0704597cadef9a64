#!/usr/bin/env python3
"""Speed of the minilm embedder (all-MiniLM-L6-v2 in numpy) against sentence-transformers on torch.

    .venv/bin/python bench/minilm_speed.py [--corpus DIR] [--passages N] [--words N]
                                           [--repeat N] [--queries N] [--batch-size N]

One run, both embedders, the same inputs: passages of --words words of the Hugo docs
(as bench/local_model.py makes them; past 256 word pieces, so every one is truncated,
the figures are for full-length chunks), embedded --repeat times by each, the runs
alternating (numpy, torch, numpy, ...) so that a change in the machine's load falls on
both. Prints passages/s (median), the numpy provider on one worker and on every core
(``workers``), then the latency of one short query (p50, p90 over --queries), the time
to load each model, and the lowest cosine between the two providers' vectors. The load
average is printed with every figure. Without sentence-transformers the torch columns
are skipped and the numpy figures still printed.

int8 weights are not offered: numpy has no int8 BLAS (an int8 matmul runs in a plain
loop, far slower than float32), so they would only save memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Keep bench/ off the path: a bench module must never shadow a library's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from rag_assets.embed.base import Embedder  # noqa: E402
from rag_assets.embed.local import LocalEmbedder, local_model_status  # noqa: E402
from rag_assets.embed.minilm import MiniLMEmbedder, cpu_count, minilm_status  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"
SHORT_QUERY = "how do I add a menu entry"


def load() -> str:
    """The 1-minute load average, printed beside every figure (2 cores here: above 2 is contention)."""
    return f"load {os.getloadavg()[0]:.2f}"


def hugo_passages(corpus: Path, count: int, words: int) -> list[str]:
    """bench/local_model.py's passages (its loader, imported by path: bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_local_model", ROOT / "bench" / "local_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.passages(corpus, count, words)


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def loaded(name: str, make: Callable[[], Embedder]) -> Embedder:
    """The embedder with its model loaded (by a first query), the load time printed."""
    start = time.perf_counter()
    embedder = make()
    embedder.embed_query("warm up")
    print(f"load {name:<22} {time.perf_counter() - start:6.2f} s  (import + weights + first query; {load()})")
    return embedder


def throughput(embedders: dict[str, Embedder], texts: Sequence[str], repeat: int) -> dict[str, list[float]]:
    """Passages/s of each embedder, ``repeat`` runs each, alternating embedders run by run."""
    rates: dict[str, list[float]] = {name: [] for name in embedders}
    for _name, embedder in embedders.items():
        embedder.embed_documents(texts[: min(8, len(texts))])  # warm-up allocations
    for _ in range(repeat):
        for name, embedder in embedders.items():
            rates[name].append(len(texts) / timed(lambda: embedder.embed_documents(texts)))
    return rates


def query_latency(embedder: Embedder, queries: int) -> tuple[float, float]:
    """p50 and p90 in ms of embedding one short query."""
    times = sorted(timed(lambda: embedder.embed_query(SHORT_QUERY)) * 1000 for _ in range(queries))
    return statistics.median(times), times[min(len(times) - 1, int(0.9 * len(times)))]


def lowest_cosine(a: Embedder, b: Embedder, texts: Sequence[str]) -> float:
    return float(np.min(np.sum(a.embed_documents(texts) * b.embed_documents(texts), axis=1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    ok, why = minilm_status()
    if not ok:
        raise SystemExit(f"minilm embedder unavailable: {why}")
    texts = hugo_passages(args.corpus, args.passages, args.words)
    cores = cpu_count()
    print(f"passages         {len(texts)} x {args.words} words of {args.corpus}; {cores} cores; {load()}")
    embedders: dict[str, Embedder] = {
        "numpy, 1 worker": loaded("numpy, 1 worker", lambda: MiniLMEmbedder(batch_size=args.batch_size, workers=1)),
        f"numpy, {cores} workers": loaded(
            f"numpy, {cores} workers", lambda: MiniLMEmbedder(batch_size=args.batch_size)
        ),
    }
    torch_ok, torch_why = local_model_status()
    if torch_ok:
        embedders["sentence-transformers"] = loaded(
            "sentence-transformers", lambda: LocalEmbedder(batch_size=args.batch_size)
        )
    else:
        print(f"sentence-transformers skipped: {torch_why}")
    for name, rates in throughput(embedders, texts, args.repeat).items():
        runs = ", ".join(f"{r:.1f}" for r in rates)
        print(f"passages/s {name:<22} {statistics.median(rates):7.1f} median  (runs: {runs}; {load()})")
    for name, embedder in embedders.items():
        p50, p90 = query_latency(embedder, args.queries)
        print(f"query ms   {name:<22} p50 {p50:6.2f}  p90 {p90:6.2f}  ({args.queries} x {SHORT_QUERY!r}; {load()})")
    if torch_ok:
        cosine = lowest_cosine(embedders[f"numpy, {cores} workers"], embedders["sentence-transformers"], texts)
        print(f"parity           lowest cosine numpy vs sentence-transformers over the passages: {cosine:.7f}")


if __name__ == "__main__":
    main()
