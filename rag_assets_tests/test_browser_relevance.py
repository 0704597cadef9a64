"""Browser search agrees with the server (issue 26): over 100 Hugo questions and 30 off-topic
queries, ``search.html``'s ``rag-search.js`` in Chromium gives the pages ``rag search`` gives,
in the same order, with the same calibrated relevance (to 1e-4) and the same abstentions (no
hit reaches min_score); the page shows that relevance, says when nothing answers, and shows
snippets as plain text with the query's words highlighted."""

from __future__ import annotations

import json
import random
import string

import pytest

from rag_assets.serve.cli import main

from .browser import open_search, screenshot, static_server
from .test_browser_search import hundred_questions, one_store_open, shared_hugo  # noqa: F401 (a fixture)

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
    "recipe for a vegan chocolate cake without eggs",
    "how to fold a fitted sheet neatly",
    "when did the roman empire fall",
    "how do I learn to play the ukulele",
    "what is the difference between a crocodile and an alligator",
    "how to keep basil alive on a windowsill",
    "how many calories does a marathon burn",
    "how to knit a scarf for beginners",
    "what is the plot of pride and prejudice",
    "who painted the ceiling of the sistine chapel",
]


def gibberish(n: int) -> list[str]:
    rng = random.Random(26)
    return ["zzzzqqq"] + [
        " ".join("".join(rng.choices(string.ascii_lowercase, k=rng.randint(5, 9))) for _ in range(2))
        for _ in range(n - 1)
    ]


@pytest.fixture(scope="module")
def hugo(tmp_path_factory):
    """test_browser_search.py's float build of the Hugo docs (one build for both modules)."""
    return shared_hugo(tmp_path_factory, "float")


def server_pages(cfg, capsys, query: str) -> list[tuple[str, float]]:
    """``rag search QUERY --json`` (pages, the default floor) as (collection/slug, relevance)."""
    code = main(["search", query, "--json", "--config", str(cfg.config_path)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    return [(f"{h['collection']}/{h['slug']}", h["relevance"]) for h in json.loads(printed.out)["hits"]]


def same_ranking(expected: list[tuple[str, float]], got: list[tuple[str, float]]) -> bool:
    """Same pages in the same order, relevance within 1e-4 (pages whose relevance ties within
    that may swap places)."""
    if len(expected) != len(got) or any(abs(e[1] - g[1]) > 1e-4 for e, g in zip(expected, got)):
        return False
    return all(
        e[0] == g[0] or abs(e[1] - g[1]) <= 1e-4 and {e[0], g[0]} <= {p for p, _ in expected}
        for e, g in zip(expected, got)
    )


def browser_pages(page, queries: list[str], model: dict | None = None) -> list[list[tuple[str, float]]]:
    """Each query's page hits in the open page's browser search, as (collection/slug, relevance);
    ``model``: a hybrid relevance model (its JSON) the page's index uses instead of its own."""
    got = page.evaluate(
        """async ([queries, model]) => {
            if (model) window.ragSearch.lexical.settings.relevance.models.hybrid = model;
            const out = [];
            for (const q of queries) {
                const found = await window.ragSearch.search(q, { k: 10, view: "pages" });
                out.push(found.hits.map((h) => [`${h.collection}/${h.slug}`, h.relevance]));
            }
            return out;
        }""",
        [queries, model],
    )
    return [[(p, r) for p, r in hits] for hits in got]


def assert_same_pages(queries: list[str], expected: list, got: list) -> None:
    """The browser ranked every query's pages as the server did (:func:`same_ranking`)."""
    mismatched = [(q, e, g) for q, e, g in zip(queries, expected, got) if not same_ranking(e, g)]
    assert not mismatched, f"{len(mismatched)} of {len(queries)} differ; first: {mismatched[0]}"


def test_browser_pages_relevance_and_abstentions_equal_the_servers(hugo, page, capsys, one_store_open):
    questions = hundred_questions()
    off_topic = OFF_TOPIC + gibberish(10)
    queries = questions + off_topic
    expected = [server_pages(hugo, capsys, q) for q in queries]
    assert len(one_store_open) == 1  # the 130 searches read one loaded store
    with static_server(hugo.public_dir) as url:
        open_search(page, url)
        got = browser_pages(page, queries)
    assert_same_pages(queries, expected, got)
    answered = sum(bool(e) for e in expected[: len(questions)])
    abstained = sum(not e for e in expected[len(questions) :])
    assert answered >= 90, "the questions are answered"
    assert abstained >= 25 and not expected[len(questions) + len(OFF_TOPIC)], "gibberish (zzzzqqq) finds nothing"
    print(
        f"{len(queries)} queries: same pages and relevance; {answered}/100 answered, {abstained}/30 off-topic abstained"
    )


def test_the_page_shows_relevance_abstains_and_highlights_plain_text(hugo, page):
    with static_server(hugo.public_dir) as url:
        open_search(page, url)
        page.fill("#q", "zzzzqqq")
        page.click("#go")
        page.wait_for_function("document.getElementById('status').textContent.includes('threshold')")
        assert page.locator("#results li").count() == 0
        page.fill("#q", "how do I add a menu")
        page.click("#go")
        page.wait_for_selector("#results li")
        where = page.locator("#results li .where").all_inner_texts()
        shown = [float(w.rsplit("relevance ", 1)[1]) for w in where]
        assert shown == sorted(shown, reverse=True) and shown[0] >= 0.5
        snippets = page.locator("#results .snippet").all_inner_texts()
        assert not any(mark in s for s in snippets for mark in ("```", "](", "{{<", "## "))
        marked = page.locator("#results .snippet mark").all_inner_texts()
        assert "menu" in {m.lower() for m in marked} and {m.lower() for m in marked} <= {"how", "add", "menu"}
        screenshot(page, "browser-search-relevance")


def test_the_fused_score_feature_ranks_alike_in_the_browser(hugo, page, capsys, one_store_open, monkeypatch):
    """Issue 30: a hybrid model that reads the fused score (as the local profile's does) gives
    the browser the server's pages and relevance. This Hugo build is hashing's, whose shipped
    model has no ``fused``: both sides get the same one with it, weight 20."""
    import dataclasses

    import rag_assets.search.retrieval as retrieval
    from rag_assets.search.relevance import LogisticModel, shipped_models

    shipped = shipped_models()
    old = shipped.model("hashing", "hybrid")
    model = LogisticModel((*old.features, "fused"), (*old.coef, 20.0), old.intercept - 20.0)
    models = {**shipped.models, "hashing": {**shipped.models["hashing"], "hybrid": model}}
    monkeypatch.setattr(retrieval, "shipped_models", lambda: dataclasses.replace(shipped, models=models))
    queries = hundred_questions()[:40]
    expected = [server_pages(hugo, capsys, q) for q in queries]
    with static_server(hugo.public_dir) as url:
        open_search(page, url)
        got = browser_pages(page, queries, model.to_json())
    assert_same_pages(queries, expected, got)
