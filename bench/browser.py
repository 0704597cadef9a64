#!/usr/bin/env python3
"""The browser search at 10,000 chunks: load time, per-query latency and bytes, per vector encoding.

    .venv/bin/python bench/browser.py [--files 7400] [--dimension 1536] [--queries 200] [--repeat 3]

Generates a corpus from the Hugo docs (unique copies, as bench/incremental.py makes them:
7,400 files give about 10,000 chunks), builds it with the hashing embedder at
``--dimension`` (1536: a remote model's size, where bytes matter) once per
``public_index.vector_encoding`` (the later builds reuse the caches and only republish), and
serves each published folder from a loopback static server, plain and gzip-compressed.
Debian's Chromium (Playwright) then opens ``search.html`` in a fresh context (no cache):

- load: from ``RagSearch.open`` to ready (sidecar, index and BM25 file fetched, parsed,
  vectors decoded), median of ``--repeat`` loads;
- bytes: what the browser received for the sidecar, index, BM25 file and script, with and
  without ``Content-Encoding: gzip`` (level 6, what static hosts commonly serve);
- query: ``RagSearch.search`` latency over ``--queries`` questions (the Hugo question set,
  then document titles) after load, in one page: p50 and p95 (hybrid mode, chunk view);
- dense scan: the vector scan alone for a dense query vector (what an index built with a
  sentence model costs; the hashing embedder's sparse query vectors visit only their
  non-zero components), median of 20;
- dense query: a whole ``RagSearch.search`` (hybrid) with that dense query vector in place of
  the hashing one, over the questions: p50 and p95 (what a visitor waits for with a sentence
  model, apart from embedding the query).

``--encodings`` chooses the encodings (all five by default: float, float16, int16, int8 in
the JSON, and int16-bin, the binary vector file).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import http.server
import importlib.util
import json
import statistics
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import dagster as dg  # noqa: E402

from rag_assets.config import load_config  # noqa: E402
from rag_assets.defs.runner import run_build  # noqa: E402

HUGO = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"
QUESTIONS = ROOT / "eval" / "questions" / "hugo-docs.jsonl"
CHROMIUM = "/usr/bin/chromium"
# And the index's segment files (segments/<key>.<kind>), counted by kind; vectors.bin: int16-bin only.
FILES = ("embeddings-meta.json", "embeddings-index.json", "rag-search.js", "rag-vectors.js")
SEGMENT_KINDS = ("chunks.json", "bm25.json", "vectors.bin")


def generate_corpus(content: Path, files: int) -> None:
    """bench/incremental.py's generator (imported by path: this folder is off sys.path)."""
    spec = importlib.util.spec_from_file_location("bench_incremental", ROOT / "bench" / "incremental.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    module.generate_corpus(HUGO, content, files, 10)


def build(content: Path, out: Path, dimension: int, encoding: str):
    config = out / "rag.yaml"
    config.write_text(
        f"content_dir: {content}\noutput_dir: {out}\nvaults: []\n"
        f"embedder: {{name: hashing, hashing: {{dimension: {dimension}}}}}\n"
        f"public_index: {{vector_encoding: {encoding}}}\n"
    )
    cfg = load_config(config, environ={})
    assert run_build(cfg, dg.DagsterInstance.ephemeral(), vaults=[]).success
    return cfg


class _Handler(http.server.SimpleHTTPRequestHandler):
    """A static file handler that gzips (level 6, cached) when the server is told to and the
    client accepts it; quiet."""

    gzip_on = False
    cache: dict[str, bytes] = {}

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        path = Path(self.translate_path(self.path))
        if not (self.gzip_on and "gzip" in self.headers.get("Accept-Encoding", "") and path.is_file()):
            return super().do_GET()
        body = self.cache.get(str(path.resolve())) or self.cache.get(str(path))
        if body is None:
            body = self.cache[str(path)] = gzip.compress(path.read_bytes(), 6)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextlib.contextmanager
def serve(folder: Path, gzip_on: bool):
    # Compressed before the first request, as a host serving precompressed files would.
    present = [name for name in FILES if (folder / name).is_file()]
    cache = {str(folder / name): gzip.compress((folder / name).read_bytes(), 6) for name in present} if gzip_on else {}
    handler = type("Handler", (_Handler,), {"gzip_on": gzip_on, "cache": cache})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


LOAD = """async () => {
    const { RagSearch } = await import("./rag-search.js");
    const t0 = performance.now();
    const rag = await RagSearch.open("./");
    window.rag = rag;
    return { ms: performance.now() - t0, chunks: rag.chunks.length };
}"""

QUERIES = """async (questions) => {
    for (const q of questions.slice(0, 5)) await window.rag.search(q);  // warm-up
    const times = [];
    for (const q of questions) {
        const t0 = performance.now();
        await window.rag.search(q, { k: 10 });
        times.push(performance.now() - t0);
    }
    // A dense query vector (a sentence model's) makes the vector scan visit every component.
    const dense = new Float32Array(window.rag.dimension).map((_, i) => Math.sin(i + 1));
    const scans = [];
    for (let i = 0; i < 20; i++) {
        const t0 = performance.now();
        window.rag.cosines(dense);
        scans.push(performance.now() - t0);
    }
    // The whole search with that dense vector as the query's (a sentence model's, already embedded).
    const hashing = window.rag.queryVector;
    window.rag.queryVector = async () => dense;
    const denseTimes = [];
    for (const q of questions) {
        const t0 = performance.now();
        await window.rag.search(q, { k: 10 });
        denseTimes.push(performance.now() - t0);
    }
    window.rag.queryVector = hashing;
    return { times, scans, denseTimes };
}"""


def measure(browser, url: str, questions: list[str], repeat: int) -> dict:
    loads, received, times, scans, dense = [], {}, [], [], []
    for attempt in range(repeat):
        context = browser.new_context()
        page = context.new_page()
        sizes: list = []
        page.on("requestfinished", lambda request: sizes.append(request))
        page.goto(url + "/")  # a directory listing: an origin to import the module from
        loaded = page.evaluate(LOAD)
        loads.append(loaded["ms"])
        if attempt == 0:
            for request in sizes:
                name = request.url.rsplit("/", 1)[-1].split("?")[0]
                kind = name.split(".", 1)[-1]
                if name in FILES or kind in SEGMENT_KINDS:
                    key = name if name in FILES else f"segments/*.{kind}"
                    received[key] = received.get(key, 0) + request.sizes()["responseBodySize"]
            timed = page.evaluate(QUERIES, questions)
            times, scans, dense = timed["times"], sorted(timed["scans"]), sorted(timed["denseTimes"])
        context.close()
    times.sort()
    return {
        "chunks": loaded["chunks"],
        "load_ms": statistics.median(loads),
        "bytes": sum(received.values()),
        "per_file": received,
        "p50_ms": statistics.median(times),
        "p95_ms": times[int(0.95 * (len(times) - 1))],
        "dense_scan_ms": statistics.median(scans),
        "dense_p50_ms": statistics.median(dense),
        "dense_p95_ms": dense[int(0.95 * (len(dense) - 1))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=7400)
    parser.add_argument("--dimension", type=int, default=1536)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--encodings", nargs="+", default=["float", "float16", "int16", "int8", "int16-bin"])
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    questions = [json.loads(line)["q"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        content, out = Path(tmp) / "content", Path(tmp) / "out"
        out.mkdir()
        generate_corpus(content, args.files)
        titles = sorted({p.stem.replace("-", " ") for p in HUGO.rglob("*.md")})
        questions = (questions + titles)[: args.queries]
        results = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            for encoding in args.encodings:
                cfg = build(content, out, args.dimension, encoding)
                for gzip_on in (False, True):
                    with serve(cfg.public_dir, gzip_on) as url:
                        row = measure(browser, url, questions, args.repeat)
                    results.append((encoding, gzip_on, row))
                    print(
                        f"{encoding:>9} {'gzip' if gzip_on else 'plain':>5}: {row['chunks']} chunks, "
                        f"{row['bytes'] / 1e6:7.2f} MB received {json.dumps(row['per_file'])}, "
                        f"load {row['load_ms']:6.0f} ms, query p50 {row['p50_ms']:5.1f} ms p95 {row['p95_ms']:5.1f} ms, "
                        f"dense vector scan {row['dense_scan_ms']:5.1f} ms, "
                        f"dense query p50 {row['dense_p50_ms']:5.1f} ms p95 {row['dense_p95_ms']:5.1f} ms",
                        flush=True,
                    )
            browser.close()
    print(f"\n{args.dimension} dimensions, {len(questions)} queries, loads: median of {args.repeat}")
    print(
        f"{'encoding':>9} {'served':>6} {'chunks':>7} {'MB':>7} {'bytes/chunk':>12} {'load ms':>8} {'p50 ms':>7} "
        f"{'p95 ms':>7} {'dense scan ms':>14} {'dense p50':>10} {'dense p95':>10}"
    )
    for encoding, gzip_on, row in results:
        print(
            f"{encoding:>9} {'gzip' if gzip_on else 'plain':>6} {row['chunks']:>7} {row['bytes'] / 1e6:>7.2f} "
            f"{row['bytes'] / row['chunks']:>12.0f} {row['load_ms']:>8.0f} {row['p50_ms']:>7.1f} {row['p95_ms']:>7.1f} "
            f"{row['dense_scan_ms']:>14.1f} {row['dense_p50_ms']:>10.1f} {row['dense_p95_ms']:>10.1f}"
        )


if __name__ == "__main__":
    main()
