"""Benchmark the link-graph signal in ranking: hit@1, hit@5 and MRR@10 with and without it.

Builds ``--vault`` (default ``eval/vaults/link-signal``, a fixture vault of 17 linked notes) into
a Private store in a temporary folder, as a vault build does (Obsidian syntax, links resolved,
the ``--embedder``), then asks every question of ``--questions`` (default
``eval/questions/link-signal.jsonl``: 32 questions, each naming the note(s) that answer it) in
each ``--modes`` with ``link_boost`` at each of ``--factors`` (1 is the signal off). A question
scores a hit@k when an expected note is among the first k pages. The figures do not depend on
the machine's load; the load average is printed with them all the same.

Usage: ``python bench/link_signal.py [--vault DIR] [--questions FILE] [--embedder hashing|local]
[--factors 1,1.25,1.5,2] [--modes hybrid,bm25]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(REPO_ROOT))

from rag_assets.config import VaultConfig, load_config  # noqa: E402
from rag_assets.embed.selection import select_embedder  # noqa: E402
from rag_assets.index.params import SearchParams  # noqa: E402
from rag_assets.privacy.vaults import build_vault_tier  # noqa: E402
from rag_assets.search.retrieval import SearchIndex  # noqa: E402


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vault", type=Path, default=REPO_ROOT / "eval" / "vaults" / "link-signal")
    parser.add_argument("--questions", type=Path, default=REPO_ROOT / "eval" / "questions" / "link-signal.jsonl")
    parser.add_argument("--embedder", default="hashing", help="hashing (default) or local (the local extra's model)")
    parser.add_argument("--factors", default="1,1.25,1.5,2", help="link_boost values, comma-separated; 1 = off")
    parser.add_argument("--modes", default="hybrid,bm25")
    return parser.parse_args()


def build(vault_dir: Path, out: Path, embedder_name: str):
    """The vault built into a Private store under ``out``; (store path, embedder)."""
    cfg = load_config(
        None,
        content_dir=out / "content",
        output_dir=out / "out",
        embedder=embedder_name,
        private_embedder=embedder_name,
        environ={},
    )
    vault = VaultConfig("lab", vault_dir.resolve(), "private")
    selection = select_embedder(cfg.private_embedding, environ={})
    build_vault_tier(cfg, vault, "private", selection.embedder, provider=selection.provider)
    return cfg.store_path("private"), selection.embedder


def score(index: SearchIndex, embedder, questions: list[dict], mode: str, factor: float) -> dict[str, float]:
    """hit@1, hit@5 and MRR@10 over the questions, pages view, nothing cut by the threshold."""
    hits1, hits5, rr = [], [], []
    for q in questions:
        params = SearchParams(k=10, mode=mode, min_score=0.0, link_boost=factor)
        ids = [
            f"{h.collection}/{h.slug}" for h in index.search(q["q"], None if mode == "bm25" else embedder, params).hits
        ]
        ranks = [i for i, doc in enumerate(ids, start=1) if doc in q["expect"]]
        first = ranks[0] if ranks else None
        hits1.append(first == 1)
        hits5.append(first is not None and first <= 5)
        rr.append(1.0 / first if first else 0.0)
    return {"hit@1": statistics.mean(hits1), "hit@5": statistics.mean(hits5), "mrr@10": statistics.mean(rr)}


def main() -> None:
    """Build, ask, print one line per mode and factor."""
    args = parse_args()
    questions = [json.loads(line) for line in args.questions.read_text(encoding="utf-8").splitlines() if line.strip()]
    factors = [float(f) for f in args.factors.split(",")]
    with tempfile.TemporaryDirectory(prefix="link-signal-") as tmp:
        db, embedder = build(args.vault, Path(tmp), args.embedder)
        index = SearchIndex(db, log_searches=False)
        print(f"{len(questions)} questions over {args.vault.name} ({args.embedder} embedder)")
        for mode in args.modes.split(","):
            for factor in factors:
                s = score(index, embedder, questions, mode, factor)
                label = "off" if factor == 1.0 else f"x{factor:g}"
                print(
                    f"{mode:7} link signal {label:6} hit@1 {s['hit@1']:.3f}  hit@5 {s['hit@5']:.3f}  "
                    f"MRR@10 {s['mrr@10']:.3f}  (load average {os.getloadavg()[0]:.2f})"
                )


if __name__ == "__main__":
    main()
