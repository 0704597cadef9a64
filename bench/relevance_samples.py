"""Labelled searches for bench/fit_relevance.py: the searches the relevance models are fitted on.

A part of bench/fit_relevance.py (not run on its own). Each search is run once per mode with no
score floor, keeping the top ``--depth`` chunk candidates with the features ``SearchIndex``
computed for them, labelled relevant or not:

- SciFact train (the eval store ``rag eval`` builds): relevant when the document is in the
  query's qrels;
- question sets over built sites (``--site NAME=OUTPUT_DIR:QUESTIONS``) and page titles
  (``--titles-of NAME``, known-item searches);
- out of domain, every candidate irrelevant: SciFact's claims against each site, gibberish, and
  :data:`OFF_TOPIC` questions.

:func:`order_candidates` captures the hybrid searches ``--order`` chooses the fused weight on.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench import fit_order
from rag_assets.config import load_config
from rag_assets.evaluation.datasets import load_beir
from rag_assets.evaluation.eval_store import ensure_eval_store
from rag_assets.evaluation.runner import Evaluator, select_eval_embedder
from rag_assets.index.params import SearchParams
from rag_assets.search.relevance import MODE_FEATURES
from rag_assets.search.retrieval import SearchIndex, tier_embedder

MODES = ("hybrid", "vector", "bm25")

# Questions about things none of the corpora (SciFact, the Hugo docs, the sample homelab site)
# hold. Written for this script; they never name a page.
OFF_TOPIC = [
    "how long should I knead bread dough by hand",
    "what is the offside rule in football",
    "best time of year to prune apple trees",
    "who won the 1966 world cup final",
    "how do I remove a red wine stain from a carpet",
    "what is the capital city of Australia",
    "how many eggs go into a classic carbonara",
    "how do I change a flat tyre on a bicycle",
    "which chess opening is best for beginners",
    "how to train a puppy to stop biting",
    "what are the rules of cricket for a test match",
    "recipe for a vegan chocolate cake without eggs",
    "how to fold a fitted sheet neatly",
    "when did the roman empire fall",
    "how do I learn to play the ukulele",
    "what should I pack for a week of hiking in the alps",
    "how to negotiate a higher salary at a job offer",
    "what is the difference between a crocodile and an alligator",
    "how to keep basil alive on a windowsill",
    "how many calories does a marathon burn",
    "why is the sky blue at noon and red at sunset",
    "how to knit a scarf for beginners",
    "what is the plot of pride and prejudice",
    "how do I get a mortgage with a low credit score",
    "best way to clean a cast iron skillet",
    "how do tides work",
    "what wine goes with grilled salmon",
    "how to write a wedding speech for my brother",
    "what is the tallest mountain in africa",
    "how to sharpen a kitchen knife with a whetstone",
    "what does a sommelier do",
    "how do I teach my child to ride a bike",
    "how long do you boil an egg for a runny yolk",
    "which houseplants are safe for cats",
    "how to stop snoring at night",
    "when is the best time to visit japan for cherry blossoms",
    "how do I repot an orchid",
    "what are the symptoms of a sprained ankle",
    "how to make sourdough starter from scratch",
    "who painted the ceiling of the sistine chapel",
]


@dataclass
class Sample:
    """One search's candidates: features per mode, labels, and what the search was."""

    source: str
    in_domain: bool
    query: str = ""
    features: dict[str, np.ndarray] = field(default_factory=dict)  # mode -> (n, features)
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # mode -> (n,) 0/1 by rank


def gibberish(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 11)))
            for _ in range(rng.randint(1, 3))
        ]
        out.append(" ".join(words))
    return ["zzzzqqq", "qwertyuiop asdfgh", "xkcd zzyzx vvvvv", *out]


def searched(index: SearchIndex, embedder, query: str, depth: int, key_of) -> dict[str, tuple[np.ndarray, list[str]]]:
    """mode -> (features of the top ``depth`` chunk candidates, their page keys), best first."""
    out = {}
    for mode in MODES:
        params = SearchParams(k=depth, candidates=max(200, depth), mode=mode, min_score=0.0, view="chunks")
        result = index.search(query, None if mode == "bm25" else embedder, params)
        names = MODE_FEATURES[mode]
        x = np.array([[h.features.get(f, 0.0) for f in names] for h in result.hits], dtype=np.float64).reshape(
            -1, len(names)
        )
        out[mode] = (x, [key_of(h) for h in result.hits])
    return out


def labelled(source: str, query: str, found, relevant: set[str] | None) -> Sample:
    sample = Sample(source, relevant is not None, query)
    for mode, (x, keys) in found.items():
        sample.features[mode] = x
        sample.labels[mode] = np.array([1.0 if relevant and k in relevant else 0.0 for k in keys])
    return sample


def read_questions(path: Path) -> list[tuple[str, set[str]]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            out.append((item["q"], set(item["expect"])))
    return out


def scifact_train(args, embedder_name: str):
    """(SciFact's train split, its evaluator over the eval store embedded with ``embedder_name``)."""
    cfg = load_config(args.config, output_dir=args.output_dir)
    train = load_beir(args.dataset, "train")
    embedder, provider = select_eval_embedder(cfg, embedder_name)
    built = ensure_eval_store(cfg, train, embedder, provider=provider, log=lambda m: None)
    return train, Evaluator(built.path, train, embedder)


def open_sites(args, model: str):
    """Each ``--site NAME=OUT_DIR:QUESTIONS`` as (name, its public index, its query embedder, the
    question file); a site built with another model than ``model`` stops the fit."""
    for site in args.site:
        name, _, rest = site.partition("=")
        out_dir, _, questions = rest.partition(":")
        site_cfg = load_config(args.config, output_dir=out_dir)
        index = SearchIndex(site_cfg.public_store_path, log_searches=False)
        site_embedder = tier_embedder(site_cfg, "public", index)
        if site_embedder.model != model:
            raise SystemExit(f"{out_dir} was built with {site_embedder.model}, not {model}")
        yield name, index, site_embedder, Path(questions)


def collect(args, embedder_name: str) -> list[Sample]:
    train, evaluator = scifact_train(args, embedder_name)
    scifact = evaluator.index
    corpus_key = lambda h: evaluator.corpus_id_of.get(h.document_id, "")  # noqa: E731
    page_key = lambda h: f"{h.collection}/{h.slug}"  # noqa: E731
    samples: list[Sample] = []
    claims = [train.queries[q] for q in evaluator.query_ids]
    t0 = time.perf_counter()
    for q in evaluator.query_ids[: args.scifact_queries]:
        relevant = {d for d, v in evaluator.qrels[q].items() if v > 0}
        samples.append(
            labelled(
                "scifact-train",
                train.queries[q],
                searched(scifact, evaluator.embedder, train.queries[q], args.depth, corpus_key),
                relevant,
            )
        )
    indexes = {"scifact": (scifact, evaluator.embedder, corpus_key)}
    for name, index, site_embedder, questions in open_sites(args, evaluator.embedder.model):
        indexes[name] = (index, site_embedder, page_key)
        for question, expect in read_questions(questions):
            samples.append(
                labelled(
                    f"{name}-questions",
                    question,
                    searched(index, site_embedder, question, args.depth, page_key),
                    expect,
                )
            )
        for claim in claims[: args.ood_claims]:
            samples.append(
                labelled(
                    f"scifact-claims-vs-{name}",
                    claim,
                    searched(index, site_embedder, claim, args.depth, page_key),
                    None,
                )
            )
        if name in args.titles_of:
            samples.extend(title_searches(name, index, site_embedder, args.titles, args.depth))
    for name, (index, emb, key) in indexes.items():
        for text in gibberish(args.gibberish):
            samples.append(labelled(f"gibberish-vs-{name}", text, searched(index, emb, text, args.depth, key), None))
        for text in OFF_TOPIC if name != "scifact" else ():  # SciFact's biomedicine holds health questions
            samples.append(labelled(f"off-topic-vs-{name}", text, searched(index, emb, text, args.depth, key), None))
    print(f"{embedder_name}: {len(samples)} searches in {time.perf_counter() - t0:.1f}s", flush=True)
    return samples


def title_searches(name: str, index: SearchIndex, embedder, count: int, depth: int) -> list[Sample]:
    """Known-item searches: ``count`` of the site's page titles (a seeded draw), each a query
    whose one relevant page is the page of that title. People type a page's name as often as
    a question; the other sources hardly ever name a page, so without these the ``title``
    feature is fitted to nothing."""
    documents = index.loaded().documents.values()
    pages = sorted({(d["title"], f"{d['collection']}/{d['slug']}") for d in documents if d.get("title")})
    random.Random(5).shuffle(pages)
    page_key = lambda h: f"{h.collection}/{h.slug}"  # noqa: E731
    return [
        labelled(f"{name}-titles", title, searched(index, embedder, title, depth, page_key), {page})
        for title, page in pages[:count]
    ]


def order_candidates(args, embedder_name: str) -> list[fit_order.Candidates]:
    """SciFact train's hybrid searches and each site's questions', captured for choosing the order."""
    train, evaluator = scifact_train(args, embedder_name)
    corpus_key = lambda h: evaluator.corpus_id_of.get(h.document_id, "")  # noqa: E731
    page_key = lambda h: f"{h.collection}/{h.slug}"  # noqa: E731
    out = []
    for q in evaluator.query_ids[: args.scifact_queries]:
        relevant = [d for d, v in evaluator.qrels[q].items() if v > 0]
        query = train.queries[q]
        out.append(
            fit_order.captured("scifact-train", evaluator.index, evaluator.embedder, query, relevant, corpus_key)
        )
    for name, index, site_embedder, questions in open_sites(args, evaluator.embedder.model):
        for question, expect in read_questions(questions):
            out.append(fit_order.captured(f"{name}-questions", index, site_embedder, question, expect, page_key))
    return out


def replace_sites(args, embedder: str):
    copy = argparse.Namespace(**vars(args))
    copy.site = [s.replace("{embedder}", embedder) for s in args.site]
    return copy
