"""The public search in a real browser: rag-search.js and search.html, served by a plain static server.

Chromium (Debian's, driven by Playwright; rag_assets_tests/browser.py) loads the published
folder from ``python -m http.server`` and must rank as ``rag search`` does: for 100
questions over the Hugo docs built with the hashing embedder, the same chunks in the same
order with scores within 1e-4 (compared on ``rag search --chunks --min-score 0``, the browser's
``minScore: 0``; the pages, relevance and abstentions are test_browser_relevance.py's), with the vectors in the JSON (float) and in the binary vector
file (int16-bin). Its hashing embedder must give Python's vectors, its stemmer FTS5's terms,
each vector encoding must decode to what Python decodes, and a vector file that does not match
its sidecar must never be used.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import dagster as dg
import numpy as np
import orjson
import pytest

import rag_assets.index
import rag_assets.search.backends
from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.embed.hashing import HashingEmbedder
from rag_assets.index.index_json import read_index
from rag_assets.index.vector_file import parse_vector_file, published_vectors, render_vector_file
from rag_assets.search.bm25_terms import TOKENIZER, query_words
from rag_assets.serve.cli import main

from .browser import open_search, screenshot, static_server
from .conftest import CORPORA, REPO_ROOT
from .shared_build import shared_build

HUGO = CORPORA / "hugo-docs" / "content"
QUESTIONS = REPO_ROOT / "eval" / "questions" / "hugo-docs.jsonl"
SHIPPED_JS = Path(rag_assets.index.__file__).parent / "js"  # the package data, as shipped


def build(content: Path, out: Path, encoding: str = "float"):
    config = out / "rag.yaml"
    out.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"content_dir: {content}\noutput_dir: {out}\nembedder: hashing\nvaults: []\n"
        f"public_index: {{vector_encoding: {encoding}}}\n"
    )
    cfg = load_config(config, environ={})
    # An ephemeral instance: these tests look at the published files, not at the run history.
    assert run_build(cfg, dg.DagsterInstance.ephemeral(), vaults=[]).success
    return cfg


def shared_hugo(tmp_path_factory, encoding: str):
    """The Hugo docs built with ``encoding``, once per test session: under the temp root the
    xdist workers share, behind a file lock, so this module and test_browser_relevance.py (on
    either worker) read the same build instead of building it again. The tests only read it
    (their searches add search-log rows to its store, which no test here looks at)."""
    if not HUGO.is_dir():
        pytest.skip(f"{HUGO} is not present")
    out = shared_build(tmp_path_factory, f"browser-hugo-{encoding}", lambda folder: build(HUGO, folder, encoding))
    return load_config(out / "rag.yaml", environ={})


@pytest.fixture(scope="module", params=["float", "int16-bin"])
def hugo(request, tmp_path_factory):
    """The Hugo docs built with each encoding (each build shared with the other modules)."""
    return shared_hugo(tmp_path_factory, request.param)


@pytest.fixture
def one_store_open(monkeypatch):
    """``rag search`` (in-process, its whole command path) with each tier's store opened once
    and reused by the following searches, as ``rag serve`` keeps its index: the store's matrix
    and documents are loaded once instead of once per question. The index still reloads when
    the store's contents change (SearchIndex.loaded compares the build stamp)."""
    real = rag_assets.search.backends.open_index
    opened = {}

    def open_index(cfg, tier, **kwargs):
        # rag search opens the configured backend's index, reading documents on demand
        assert kwargs == {"documents": "on_demand"}, kwargs
        key = (str(cfg.config_path), tier)
        if key not in opened:
            opened[key] = real(cfg, tier, **kwargs)
        return opened[key]

    monkeypatch.setattr(rag_assets.search.backends, "open_index", open_index)
    return opened


def hundred_questions() -> list[str]:
    """The first 100 Hugo questions whose words FTS5 reads as single terms (a word it splits,
    "k3s_cert", is a phrase to FTS5, which the browser scores as separate words)."""
    questions = [json.loads(line)["q"] for line in QUESTIONS.read_text().splitlines() if line.strip()]
    plain = [q for q in questions if all(len(t) == 1 for t in TOKENIZER.terms(query_words(q)))]
    assert len(plain) >= 100
    return plain[:100]


def rag_search_top10(cfg, capsys, query: str) -> list[tuple[str, float, float | None]]:
    """``rag search QUERY --chunks --min-score 0 --json`` (in-process), as (ID, score, cosine) triples."""
    code = main(["search", query, "--chunks", "--min-score", "0", "--json", "--config", str(cfg.config_path)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    return [(hit["id"], hit["score"], hit["vectorScore"]) for hit in json.loads(printed.out)["hits"]]


def test_browser_top10_equals_rag_search_for_100_questions(hugo, page, capsys, one_store_open):
    questions = hundred_questions()
    expected = [rag_search_top10(hugo, capsys, q) for q in questions]
    assert len(one_store_open) == 1  # the 100 searches read one loaded store
    with static_server(hugo.public_dir) as url:
        open_search(page, url)
        got = page.evaluate(
            """async (questions) => {
                const out = [];
                for (const q of questions) {
                    const found = await window.ragSearch.search(q, { k: 10, view: "chunks", minScore: 0 });
                    out.push(found.hits.map((h) => [h.id, h.score, h.vectorScore]));
                }
                return out;
            }""",
            questions,
        )
        # The page itself, as a visitor uses it.
        page.fill("#q", "how do I add a menu")
        page.click("#go")
        page.wait_for_selector("#results li")
        status, first = page.inner_text("#status"), page.inner_text("#results li")
        screenshot(page, "browser-search")
    mismatched = [
        (q, e, g)
        for q, e, g in zip(questions, expected, got)
        if [h[0] for h in e] != [h[0] for h in g] or any(abs(a[1] - b[1]) > 1e-4 for a, b in zip(e, g))
    ]
    assert all(len(e) == 10 for e in expected)
    assert not mismatched, f"{len(mismatched)} of 100 differ; first: {mismatched[0]}"
    worst = max(abs(a[1] - b[1]) for e, g in zip(expected, got) for a, b in zip(e, g))
    # The cosines too (the hashing profile fuses with vector weight 0, so the scores alone would
    # not notice wrong vectors): the browser's, from its encoding, against the store's float32.
    # (The server names the cosine of its vector candidates only; the browser of every hit.)
    cosines = [(a[2], b[2]) for e, g in zip(expected, got) for a, b in zip(e, g) if a[2] is not None]
    assert len(cosines) > 400 and all(b is not None for _, b in cosines)
    worst_cosine = max(abs(a - b) for a, b in cosines)
    assert worst_cosine < 1e-4
    print(f"100 questions: top-10 equal, largest score difference {worst:.1e}, cosine {worst_cosine:.1e}")
    assert re.match(r"\d+ results \(hybrid\) in [\d.]+ ms", status), status
    assert "menu" in first.lower()


def test_hashing_embedder_and_stemmer_in_javascript_match_python(page):
    """The shipped rag-search.js itself (served from the package folder), on the Hugo docs' words."""
    if not HUGO.is_dir():
        pytest.skip(f"{HUGO} is not present")
    pages = [p.read_text(errors="replace") for p in sorted(HUGO.rglob("*.md"))]
    texts = pages[::25] + [
        "How do I set up VLANs? café naïve 東京タワー",
        "",
        "x_y__z 123 ½ Ⅻ µs İstanbul",
        "run running runs ran generalizations hopefully agreed feed " * 3,
    ]
    words = sorted({w for text in pages for w in re.findall(r"\w+", text.lower())})
    words += ["électricité", "µs", "i̇stanbul", "controlling", "bowdlerize", "probate"]
    with static_server(SHIPPED_JS) as url:
        page.goto(url + "/")
        got = page.evaluate(
            """async ([texts, words]) => {
                const js = await import("./rag-search.js");
                const embedder = new js.HashingEmbedder(384);
                const wide = new js.HashingEmbedder(1536);
                return {
                    vectors: texts.map((t) => Array.from(embedder.embed(t))),
                    wide: texts.slice(0, 10).map((t) => Array.from(wide.embed(t))),
                    terms: words.map((w) => js.ftsTerms(w)),
                };
            }""",
            [texts, words],
        )
    assert np.array_equal(np.array(got["vectors"], dtype=np.float32), HashingEmbedder(384).embed_documents(texts))
    assert np.array_equal(np.array(got["wide"], dtype=np.float32), HashingEmbedder(1536).embed_documents(texts[:10]))
    expected = [list(t) for t in TOKENIZER.terms(words)]
    wrong = [(w, e, g) for w, e, g in zip(words, expected, got["terms"]) if e != g]
    assert not wrong, f"{len(wrong)} of {len(words)} words stem differently; first: {wrong[:5]}"


SMALL_TREE = {
    "docs/vlan.md": "---\ntitle: VLANs\n---\n# VLANs\n\nTag guests per VLAN on a vlan-aware bridge.\n",
    "docs/backup.md": "---\ntitle: Backups\n---\n# Backups\n\nSnapshots of ZFS datasets, sent to another box.\n",
    "posts/hello.md": "---\ntitle: Hello\n---\nThe first post, about nothing in particular.\n",
}


@pytest.mark.parametrize("encoding", ["float16", "int16", "int8"])
def test_compact_encodings_decode_in_the_browser_as_in_python(encoding, write_tree, tmp_path, page):
    content = write_tree(SMALL_TREE)
    cfg = build(content, tmp_path / "out", encoding)
    index = read_index(cfg.index_path)
    assert index["vectorEncoding"] == encoding
    expected = published_vectors(cfg.public_dir, index, None)
    with static_server(cfg.public_dir) as url:
        open_search(page, url)
        matrix = page.evaluate("Array.from(window.ragSearch.matrix)")
        top = page.evaluate("window.ragSearch.search('zfs snapshots', {k: 1}).then((r) => r.hits[0].title)")
    assert np.array_equal(np.array(matrix, dtype=np.float32).reshape(expected.shape), expected)
    assert top == "Backups"


def segment_vector_files(cfg) -> list[Path]:
    """The vector files of the published index's segments, in its order."""
    index = orjson.loads(cfg.index_path.read_bytes())
    return [cfg.public_dir / s["vectors"]["file"] for s in index["segments"]]


def test_the_vector_file_reads_in_the_browser_as_in_python_and_a_bad_one_is_never_used(
    write_tree, tmp_path, page, chromium
):
    """int16-bin: the browser's Int16Array and Float32Array views hold Python's steps and scales
    (the segments' vector files joined in the index's order); a truncated segment file and one
    of other content each leave the search to BM25 alone with the reason given, never ranked
    with the wrong vectors."""
    cfg = build(write_tree(SMALL_TREE), tmp_path / "out", "int16-bin")
    meta = orjson.loads(cfg.meta_path.read_bytes())
    files = [parse_vector_file(path.read_bytes()) for path in segment_vector_files(cfg)]
    steps = np.vstack([f.steps for f in files])
    scales = np.concatenate([f.scales for f in files])
    matrix = np.vstack([f.matrix() for f in files])
    assert np.array_equal(published_vectors(cfg.public_dir, read_index(cfg.index_path), meta), matrix)
    path = segment_vector_files(cfg)[0].resolve()
    good = path.read_bytes()
    other = render_vector_file(files[0].matrix()[::-1], None)  # same size, wrong rows
    search = "window.ragSearch.search('zfs snapshots', {k: 1}).then((r) => [r.mode, r.hits[0].title, r.vectorProblem || null])"
    with static_server(cfg.public_dir) as url:
        open_search(page, url)
        views = page.evaluate("[Array.from(window.ragSearch.matrix), Array.from(window.ragSearch.scales)]")
        assert page.evaluate(search) == ["hybrid", "Backups", None]
        # A dense query vector (a sentence model's) takes the integer scan; a sparse one the float one.
        dense = np.sin(np.arange(1, steps.shape[1] + 1)).astype(np.float32)
        dense /= np.linalg.norm(dense)
        scanned = page.evaluate(
            """async ([q, name]) => {
                const { StepMatrix, parseVectorFile } = await import("./rag-vectors.js");
                const buffer = await (await fetch(name)).arrayBuffer();
                const scan = (wasm) => {
                    const matrix = new StepMatrix(parseVectorFile(buffer), { wasm });
                    return [!!matrix.scan, Array.from(matrix.denseCosines(Float32Array.from(q), new Float64Array(matrix.rows)))];
                };
                return [Array.from(window.ragSearch.cosines(Float32Array.from(q))), scan(true), scan(false)];
            }""",
            [dense.tolist(), str(segment_vector_files(cfg)[0].relative_to(cfg.public_dir))],
        )
        seen = {}
        for case, payload in (("truncated", good[:-6]), ("SHA-256", other)):
            path.write_bytes(payload)
            fresh = chromium.new_context()  # no HTTP cache: it would rightly keep the good file under its name
            try:
                visitor = fresh.new_page()
                open_search(visitor, url)
                seen[case] = visitor.evaluate(search)
                status = visitor.inner_text("#status")
            finally:
                fresh.close()
            assert "vectors unusable" in status and "BM25 only" in status, status
    assert np.array_equal(np.array(views[0], dtype=np.int16).reshape(steps.shape), steps)
    assert np.array_equal(np.array(views[1], dtype=np.float32), scales)
    # The page's scan is WebAssembly's; it and the JavaScript loop give the same (exact integer) sums.
    page_scan, (wasm_used, wasm), (js_used, js) = scanned
    assert wasm_used and not js_used and page_scan[: len(wasm)] == wasm == js
    assert np.abs(np.array(wasm) - files[0].matrix().astype(np.float64) @ dense).max() < 1e-5
    for case, (mode, title, problem) in seen.items():
        assert mode == "bm25" and title == "Backups" and case in problem, (case, problem)


def test_refresh_refetches_the_index_only_when_the_sidecar_changed(write_tree, tmp_path, page):
    files = {"docs/a.md": "---\ntitle: Alpha\n---\nAlpha particles and their decay.\n"}
    content = write_tree(files)
    cfg = build(content, tmp_path / "out")
    with static_server(cfg.public_dir) as url:
        open_search(page, url)
        fetched: list[str] = []
        page.on("request", lambda request: fetched.append(request.url.rsplit("/", 1)[-1].split("?")[0]))
        assert page.evaluate("window.ragSearch.refresh()") is False
        assert fetched == ["embeddings-meta.json"]
        (content / "docs" / "b.md").write_text("---\ntitle: Beta\n---\nBeta decay emits an electron.\n")
        sidecar = cfg.public_dir / "embeddings-meta.json"
        first_mtime = sidecar.stat().st_mtime
        build(content, tmp_path / "out")
        # As if the new build landed within the same second: a server that dates files to the
        # second then answers a revalidation (If-Modified-Since) with 304, the old sidecar.
        os.utime(sidecar, (first_mtime, first_mtime))
        fetched.clear()
        assert page.evaluate("window.ragSearch.refresh()") is True
        # The index names its segments by content: only the edited segment's files are fetched.
        segment_files = sorted(name.split(".", 1)[1] for name in fetched if name.count(".") == 2)
        assert segment_files == ["bm25.json", "chunks.json"]
        assert sorted(n for n in fetched if n.count(".") == 1) == ["embeddings-index.json", "embeddings-meta.json"]
        titles = page.evaluate("window.ragSearch.search('electron', {k: 1}).then((r) => r.hits.map((h) => h.title))")
    assert titles == ["Beta"]


def test_a_link_cannot_send_the_visitors_queries_to_another_host(write_tree, tmp_path, page):
    """search.html?embed= is in the address, so anyone can write it into a link: only this
    origin or this machine is used as the query-embedding endpoint."""
    content = write_tree({"docs/a.md": "---\ntitle: Alpha\n---\nAlpha particles and their decay.\n"})
    cfg = build(content, tmp_path / "out")
    with static_server(cfg.public_dir) as url:
        hosts: list[str] = []
        page.on("request", lambda request: hosts.append(request.url.split("/")[2]))
        for endpoint in ("http://192.0.2.1/embed", "http://127.0.0.1:9/embed"):
            page.goto(f"{url}/search.html?embedding=endpoint&embed={endpoint}")
            page.wait_for_selector("body[data-ready]", timeout=60_000)
            titles = page.evaluate(
                "window.ragSearch.search('alpha decay', {k: 1}).then((r) => r.hits.map((h) => h.title))"
            )
            assert titles == ["Alpha"]  # unreachable or refused endpoint: BM25 alone still answers
    assert "192.0.2.1" not in hosts  # the foreign endpoint was never asked
    assert "127.0.0.1:9" in hosts  # this machine's endpoint was (and, unreachable, fell back)


def test_refresh_fetches_a_vector_file_again_after_it_could_not_be_fetched(write_tree, tmp_path, page):
    """A vector file the page could not fetch (a 503 on each of the 3 attempts: a restarting
    server, a flaky network) left the search at BM25 for good: refresh() saw the same sidecar
    and fetched nothing, so only the next build brought the vectors back."""
    cfg = build(write_tree(SMALL_TREE), tmp_path / "out", "int16-bin")
    search = "window.ragSearch.search('zfs snapshots', {k: 1}).then((r) => [r.mode, r.vectorProblem || null])"
    with static_server(cfg.public_dir) as url:
        page.route("**/*.vectors.bin*", lambda route: route.fulfill(status=503, body="busy"))
        open_search(page, url)
        mode, problem = page.evaluate(search)
        assert mode == "bm25" and "503" in problem
        page.unroute("**/*.vectors.bin*")
        page.evaluate("window.ragSearch.refresh()")
        assert page.evaluate(search) == ["hybrid", None]
