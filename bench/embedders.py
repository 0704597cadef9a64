#!/usr/bin/env python3
"""What the HTTP embedding clients cost on our side of the wire; prints figures.

    .venv/bin/python bench/embedders.py [--corpus DIR] [--dimension 1536] [--batches 20]
                                        [--total 2000] [--runs 3] [--threads 1 2 4] [--quick]

A real provider's latency hides the client's own cost (building the JSON body,
decoding ~1.5 MB of floats per batch at 1536 dimensions, checking and normalising
the vectors), so this measures it against the loopback test server
(``rag_assets_tests.embedding_server.EmbeddingServer``), started here in a child
process on 127.0.0.1 so that its work does not share the client's GIL.

Passages: paragraphs of the Hugo docs Markdown (as in bench/local_model.py) joined
into passages of --words words, reused in order when the corpus has fewer than a
run needs. Printed, as medians:

1. Client overhead per batch of --batch-size passages, for OpenAICompatibleEmbedder
   and OllamaEmbedder (both at --dimension): the wall time of one
   ``embed_documents`` call, the time of the same request sent raw (pre-serialised
   body, response bytes read but not decoded) on a keep-alive ``httpx.Client``,
   and their difference, the client overhead, in ms and as a share of the call;
   then where that overhead goes (encode, decode, check), timed in-process. The
   two kinds of call alternate, batch by batch, after a warm-up pass that fills
   the server's vector memo, so both see the same server; the vector compute a
   cold server adds is printed apart (``EmbeddingServer.vector_for``, uncached).
2. Throughput of OpenAICompatibleEmbedder with 1, 2, 4 threads, one client each,
   embedding --total passages in batches (median of --runs runs, thread counts
   interleaved, after each client has opened its connection).
3. HashingEmbedder (offline) on the same passages, for contrast: first pass on a
   new instance (cold bucket memo) and warm runs.

The server runs on the same cores as the client, so the figures bound the client,
not a real provider, whose network and model time come on top.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))
sys.path.append(str(Path(__file__).resolve().parent))

from local_model import iter_passages  # noqa: E402  (the same passages as the local-model bench)

from rag_assets.base.http_retry import batched, decode_json  # noqa: E402
from rag_assets.embed import HashingEmbedder  # noqa: E402
from rag_assets.embed.http import RemoteEmbedder  # noqa: E402
from rag_assets.embed.ollama import OllamaEmbedder  # noqa: E402
from rag_assets.embed.openai_compat import OpenAICompatibleEmbedder  # noqa: E402
from rag_assets_tests.embedding_server import EmbeddingServer  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"
OPENAI_MODEL = "text-embedding-3-small"

ClientFactory = Callable[[str, int, int], RemoteEmbedder]


# --------------------------------------------------------------------------- inputs
def corpus_passages(corpus: Path, words: int) -> list[str]:
    """Every passage of exactly ``words`` words the corpus yields, consecutive paragraphs joined."""
    result = list(iter_passages(corpus, words))
    if not result:
        raise SystemExit(f"{corpus} has no passage of {words} words")
    return result


def take(passages: Sequence[str], count: int) -> list[str]:
    """``count`` passages, cycling through the corpus's when it has fewer."""
    return [passages[i % len(passages)] for i in range(count)]


# --------------------------------------------------------------------------- server
def _serve(conn: Connection, dimension: int) -> None:
    """Child process: serve both protocols at ``dimension`` until the parent says stop (or dies)."""
    with EmbeddingServer(dimension=dimension, ollama_dimension=dimension) as server:
        conn.send(server.url)
        try:
            conn.recv()
        except EOFError:
            pass


@contextmanager
def server_process(dimension: int) -> Iterator[str]:
    """The loopback server in its own process (spawned: no forked threads), yielding its URL.

    In-process, the server's JSON encoding would hold the client's GIL and make the
    threaded throughput figures measure contention between the two instead.
    """
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(child, dimension), name="embedding-server", daemon=True)
    process.start()
    try:
        if not parent.poll(60):
            raise SystemExit("the embedding server did not start within 60 s")
        yield parent.recv()
    finally:
        try:
            parent.send("stop")
        except OSError:
            pass
        process.join(10)
        if process.is_alive():
            process.terminate()
            process.join()


# --------------------------------------------------------------------------- clients
def openai_client(url: str, dimension: int, batch_size: int) -> RemoteEmbedder:
    return OpenAICompatibleEmbedder(
        base_url=f"{url}/v1", model=OPENAI_MODEL, dimension=dimension, batch_size=batch_size
    )


def ollama_client(url: str, dimension: int, batch_size: int) -> RemoteEmbedder:
    # The default model, nomic-embed-text, also exercises the document prefix.
    return OllamaEmbedder(host=url, dimension=dimension, batch_size=batch_size)


CLIENTS: dict[str, ClientFactory] = {"openai": openai_client, "ollama": ollama_client}


def encode_body(payload: dict[str, Any]) -> bytes:
    """The request body exactly as httpx serialises ``json=`` (0.28)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def request_for(client: RemoteEmbedder, texts: Sequence[str]) -> tuple[str, bytes]:
    """Endpoint and body of the single request ``client.embed_documents(texts)`` sends."""
    prepared = [client.prepare_document(t) for t in texts]
    return client._endpoint(), encode_body(client._payload(prepared))  # noqa: SLF001  (the exact wire request)


def raw_post(http: httpx.Client, endpoint: str, body: bytes) -> bytes:
    """Send a pre-serialised body and read the answer's bytes: transport plus server, no client work."""
    response = http.post(endpoint, content=body, headers={"Content-Type": "application/json"})
    if response.status_code != 200:
        raise SystemExit(f"raw request to {endpoint} failed: HTTP {response.status_code}")
    return response.content


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


# --------------------------------------------------------------------------- 1. overhead
@dataclass
class Overhead:
    """Medians per batch, in seconds."""

    client: float
    raw: float
    encode: float
    decode: float
    check: float

    @property
    def overhead(self) -> float:
        return self.client - self.raw


def measure_overhead(make: ClientFactory, url: str, dimension: int, batches: list[list[str]]) -> Overhead:
    """Client call vs the same raw request, alternating per batch, then the overhead's parts."""
    client = make(url, dimension, len(batches[0]))
    requests = [request_for(client, batch) for batch in batches]
    with httpx.Client(timeout=30) as http:
        responses = [raw_post(http, endpoint, body) for endpoint, body in requests]  # warm-up: server memo, connection
        client.embed_documents(batches[0])  # warm-up: the client's connection
        client_s, raw_s = [], []
        for i, (batch, (endpoint, body)) in enumerate(zip(batches, requests)):

            def call() -> Any:
                return client.embed_documents(batch)

            def raw() -> Any:
                return raw_post(http, endpoint, body)

            if i % 2 == 0:  # alternate, so neither kind always runs right after the other
                t_client, vectors = timed(call)
                t_raw, _ = timed(raw)
            else:
                t_raw, _ = timed(raw)
                t_client, vectors = timed(call)
            client_s.append(t_client)
            raw_s.append(t_raw)
            assert vectors.shape == (len(batch), dimension), vectors.shape
    client.close()
    encode, decode, check = overhead_parts(client, batches, responses)
    return Overhead(statistics.median(client_s), statistics.median(raw_s), encode, decode, check)


def overhead_parts(
    client: RemoteEmbedder, batches: list[list[str]], responses: list[bytes]
) -> tuple[float, float, float]:
    """Median per batch of the client's three steps, in-process: encode the request, decode the
    JSON answer, check and normalise the vectors. The overhead's remainder (httpx, copies, GC) is
    left unattributed."""
    encode_s, decode_s, check_s = [], [], []
    for batch, raw in zip(batches, responses):
        encode_s.append(timed(lambda: request_for(client, batch))[0])
        t_decode, body = timed(lambda: decode_json(raw))  # the client's own decoder
        decode_s.append(t_decode)
        check_s.append(timed(lambda: client._parse(body, len(batch)))[0])  # noqa: SLF001
    return statistics.median(encode_s), statistics.median(decode_s), statistics.median(check_s)


def server_compute_per_batch(batches: list[list[str]], dimension: int) -> float:
    """The server's vector computation per batch, uncached: ``vector_for`` on distinct texts.

    The server memoises vectors, so after the warm-up the raw requests pay JSON and HTTP
    only; this is the compute a cold server would add. This process's memo starts empty
    (the server runs in another process), so each first call computes. Measured once,
    before anything else, as the median over batches of distinct texts.
    """
    texts = list(dict.fromkeys(t for batch in batches for t in batch))
    size = len(batches[0])
    times = [
        timed(lambda: [EmbeddingServer.vector_for(t, dimension) for t in group])[0] / len(group) * size
        for group in batched(texts, size)
    ]
    return statistics.median(times)


# --------------------------------------------------------------------------- 2. throughput
def embed_all(client: RemoteEmbedder, batches: Sequence[list[str]]) -> int:
    for batch in batches:
        client.embed_documents(batch)
    return sum(len(b) for b in batches)


def warm_server(url: str, dimension: int, texts: list[str], batch_size: int) -> None:
    """One untimed pass over the distinct texts, so every run finds the server's memo full."""
    client = openai_client(url, dimension, batch_size)
    client.embed_documents(list(dict.fromkeys(texts)))
    client.close()


def throughput(url: str, dimension: int, texts: list[str], batch_size: int, threads: int) -> float:
    """Chunks/s with ``threads`` OpenAI-compatible clients, one per thread, sharing the batches."""
    batches = [list(b) for b in batched(texts, batch_size)]
    clients = [openai_client(url, dimension, batch_size) for _ in range(threads)]
    for client in clients:
        client.embed_query("warm up")  # opens its keep-alive connection outside the timed part
    shares = [batches[i::threads] for i in range(threads)]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        start = time.perf_counter()
        done = sum(pool.map(embed_all, clients, shares))
        elapsed = time.perf_counter() - start
    for client in clients:
        client.close()
    assert done == len(texts)
    return done / elapsed


def throughput_runs(
    url: str, dimension: int, texts: list[str], batch_size: int, thread_counts: list[int], runs: int
) -> dict[int, list[float]]:
    """Chunks/s per thread count, ``runs`` each, interleaved (1, 2, 4, 1, 2, 4, ...) so that
    the load of others on the shared cores drifts over all thread counts alike."""
    warm_server(url, dimension, texts, batch_size)
    rates: dict[int, list[float]] = {n: [] for n in thread_counts}
    for _ in range(runs):
        for n in thread_counts:
            rates[n].append(throughput(url, dimension, texts, batch_size, n))
    return rates


# --------------------------------------------------------------------------- 3. hashing
def hashing_rates(texts: list[str], dimension: int, batch_size: int, runs: int) -> tuple[float, float]:
    """Chunks/s of HashingEmbedder: the first pass of a new instance, and the median of warm runs."""
    embedder = HashingEmbedder(dimension=dimension)
    batches = batched(texts, batch_size)

    def one_pass() -> float:
        elapsed, _ = timed(lambda: [embedder.embed_documents(b) for b in batches])
        return len(texts) / elapsed

    first = one_pass()
    return first, statistics.median(one_pass() for _ in range(runs))


# --------------------------------------------------------------------------- report
def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def print_report(
    args: argparse.Namespace,
    distinct: int,
    compute: float,
    overheads: dict[str, Overhead],
    rates: dict[int, list[float]],
    hashing: tuple[float, float],
) -> None:
    print(f"corpus      {args.corpus}: {distinct} distinct passages of {args.words} words (reused in order)")
    print(
        f"vectors     {args.dimension} dimensions, batches of {args.batch_size}, "
        f"server in a child process, {os.cpu_count()} CPUs"
    )
    print("note        the loopback server shares these cores: the figures bound the client, not a provider")
    print()
    print(f"1. per batch of {args.batch_size}, median of {args.batches} batches (ms)")
    print(f"   {'client':<8}{'call':>8}{'raw':>8}{'overhead':>10}{'share':>7}   {'encode':>7}{'decode':>7}{'check':>7}")
    for name, o in overheads.items():
        print(
            f"   {name:<8}{ms(o.client):>8}{ms(o.raw):>8}{ms(o.overhead):>10}{o.overhead / o.client:>7.0%}   "
            f"{ms(o.encode):>7}{ms(o.decode):>7}{ms(o.check):>7}"
        )
    print("   call = embed_documents; raw = the same request pre-serialised, answer read, not decoded;")
    print("   overhead = call - raw; encode/decode/check = its main parts, timed in-process")
    print("   (the rest of the overhead is unattributed: httpx, copies, GC)")
    print(f"   server vector compute, uncached (vector_for): {ms(compute)} ms per batch, not in raw (memoised)")
    print()
    print(f"2. OpenAICompatibleEmbedder, {args.total} chunks, median of {args.runs} run{'s' if args.runs > 1 else ''}")
    print(f"   {'threads':<8}{'chunks/s':>10}{'speed-up':>10}   runs")
    base = statistics.median(rates[min(rates)])
    for threads, values in rates.items():
        med = statistics.median(values)
        runs = ", ".join(f"{v:.0f}" for v in values)
        print(f"   {threads:<8}{med:>10.0f}{med / base:>9.2f}x   {runs}")
    print()
    first, warm = hashing
    print(
        f"3. HashingEmbedder, same {args.total} chunks: {warm:.0f} chunks/s warm (median of {args.runs}), "
        f"{first:.0f} first pass"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--dimension", type=int, default=1536)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--batches", type=int, default=20, help="batches per client for the overhead figures")
    parser.add_argument("--total", type=int, default=2000, help="chunks per throughput run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--quick", action="store_true", help="smoke test: 5 batches, 500 chunks, 1 run")
    args = parser.parse_args()
    if args.quick:
        args.batches, args.total, args.runs = min(args.batches, 5), min(args.total, 500), 1
    if not args.corpus.is_dir():
        raise SystemExit(f"corpus not found: {args.corpus}")

    passages = corpus_passages(args.corpus, args.words)
    batches = [list(b) for b in batched(take(passages, args.batches * args.batch_size), args.batch_size)]
    texts = take(passages, args.total)
    compute = server_compute_per_batch(batches, args.dimension)
    with server_process(args.dimension) as url:
        overheads = {name: measure_overhead(make, url, args.dimension, batches) for name, make in CLIENTS.items()}
        rates = throughput_runs(url, args.dimension, texts, args.batch_size, args.threads, args.runs)
    hashing = hashing_rates(texts, args.dimension, args.batch_size, args.runs)
    print_report(args, len(passages), compute, overheads, rates, hashing)


if __name__ == "__main__":
    main()
