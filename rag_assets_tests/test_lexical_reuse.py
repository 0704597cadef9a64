"""A segment's BM25 file made from the previous one indexes only the changed chunks and is
byte for byte the file a full render writes (rag_assets.index.lexical_reuse)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import dagster as dg
import numpy as np
import orjson
import pytest

from rag_assets.config import load_config
from rag_assets.defs.runner import run_build
from rag_assets.index import generations, lexical_reuse, store
from rag_assets.index.fields import FieldWeights
from rag_assets.index.lexical_reuse import PreviousLexical, collect_digests, render_segment, save_digests
from rag_assets.index.lexical_segments import render_segment_lexical, segment_rowids
from rag_assets.index.segments import SegmentFile, sha256_of
from rag_assets.records import Chunk, Document, EmbeddedCollection

PAGES = {  # slug: (title, tags, chunk texts)
    "alpha": ("Alpha guide", ["setup"], ["Install the server on Debian.", "Configure the firewall rules."]),
    "beta": ("Beta notes", [], ["Café au lait and crème brûlée.", "日本語のテキストも索引されます。"]),
    "gamma": ("Gamma", ["misc", "emoji"], ["Rockets 🚀 launch at dawn.", "Install the server on Debian."]),
    "delta": ("Delta", [], ["A page that will be removed later.", "Its second chunk."]),
}


def collection(pages: dict[str, tuple[str, list[str], list[str]]]) -> EmbeddedCollection:
    docs, chunks = [], []
    for slug, (title, tags, texts) in sorted(pages.items()):
        docs.append(Document("docs", slug, f"docs/{slug}.md", title, "", tags, {}, "", "2026-01-01", slug))
        for i, text in enumerate(texts):
            heading = [f"{title} part {i}"]
            chunks.append(
                Chunk(
                    f"docs/{slug}/chunk-{i}", text, "docs", slug, title, i, len(texts), heading, len(text.split()), tags
                )
            )
    vectors = np.ones((len(chunks), 8), dtype=np.float32)
    return EmbeddedCollection("docs", "h", docs, chunks, vectors, "m", 8)


class Renders:
    """Renders a segment as a publish does (file, digests), counting the rows FTS5 indexed."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.data = tmp_path / "data"
        self.folder = self.data / "segments"
        self.folder.mkdir(parents=True)
        self.store = tmp_path / "store.db"
        self.scanned: list[int] = []
        scan = lexical_reuse.scan_rows

        def counting(columns, rows, positions, fields, n):
            self.scanned.append(len(rows))
            return scan(columns, rows, positions, fields, n)

        monkeypatch.setattr(lexical_reuse, "scan_rows", counting)

    def publish(
        self, col: EmbeddedCollection, previous: PreviousLexical | None, fields: FieldWeights = FieldWeights()
    ) -> tuple[PreviousLexical, bytes]:
        name = f"seg-{len(self.scanned)}.bm25.json"
        store.sync_contents(self.store, [col], model="m", dimension=8, built_at="t")
        with closing(sqlite3.connect(self.store)) as conn:
            rowids = segment_rowids(conn, [c.id for c in col.chunks])
            payload, digests = render_segment(conn, rowids, fields, previous)
            full = render_segment_lexical(conn, rowids, fields)
        assert payload == full  # byte for byte
        (self.folder / name).write_bytes(payload)
        file = SegmentFile(name, len(payload), sha256_of(self.folder / name))
        save_digests(self.data, file, fields, digests)
        return PreviousLexical(self.folder, file, self.data), payload


def edited(pages: dict) -> dict:
    changed = dict(pages)
    del changed["delta"]  # a document removed
    title, tags, texts = changed["alpha"]
    changed["alpha"] = (title, tags, [texts[0], "Configure the zebra crossing rules."])  # one chunk edited
    changed["gamma"] = ("Gamma renamed", *changed["gamma"][1:])  # a title: every chunk of it
    changed["epsilon"] = ("Épsilon", ["new"], ["Ünïcödé wörds and 🚀 again.", "Install the server on Debian."])
    return changed


def test_an_edit_indexes_only_the_changed_chunks_and_writes_the_full_renders_bytes(tmp_path, monkeypatch):
    renders = Renders(tmp_path, monkeypatch)
    first, _ = renders.publish(collection(PAGES), None)
    assert renders.scanned == [8]
    second, payload = renders.publish(collection(edited(PAGES)), first)
    # alpha's edited chunk, gamma's two (a new title) and epsilon's first (its second chunk's
    # text is alpha's first chunk's, but its title and headings differ): 5 of 8 chunks.
    assert renders.scanned[1] == 5
    assert "zebra" in orjson.loads(payload)["terms"] and "remov" not in orjson.loads(payload)["terms"]
    # Nothing changed: nothing indexed, the same bytes.
    _, again = renders.publish(collection(edited(PAGES)), second)
    assert renders.scanned[2] == 0 and again == payload


@pytest.mark.parametrize("damage", ["file", "digests", "weights", "missing digests"])
def test_a_damaged_or_foreign_previous_file_means_indexing_every_chunk(tmp_path, monkeypatch, damage):
    renders = Renders(tmp_path, monkeypatch)
    first, _ = renders.publish(collection(PAGES), None)
    digests = lexical_reuse.digests_folder(renders.data) / "seg-0.digests"
    fields = FieldWeights()
    if damage == "file":
        data = bytearray((first.folder / first.file.name).read_bytes())
        data[-10] ^= 1
        (first.folder / first.file.name).write_bytes(bytes(data))
    elif damage == "digests":
        data = bytearray(digests.read_bytes())
        data[40] ^= 1
        digests.write_bytes(bytes(data))
    elif damage == "weights":
        fields = FieldWeights(title=3.0)
    else:
        digests.unlink()
    renders.publish(collection(edited(PAGES)), first, fields)  # still the full render's bytes
    assert renders.scanned == [8, 8]


def test_digests_go_with_their_bm25_files(tmp_path):
    data = tmp_path / "data"
    for name in ("a.bm25.json", "b.bm25.json"):
        save_digests(data, SegmentFile(name, 1, "0" * 64), FieldWeights(), [b"x" * 16])
    (lexical_reuse.digests_folder(data) / "stray").mkdir()  # not a digests file: left alone
    assert collect_digests(data, {"a.bm25.json", "a.chunks.json"}) == ["b.digests"]
    assert sorted(p.name for p in lexical_reuse.digests_folder(data).iterdir()) == ["a.digests", "stray"]


def test_another_segments_digests_copied_over_are_not_taken(tmp_path, monkeypatch):
    # Digests of the same row count, whole, of the same weights, but made with another file.
    renders = Renders(tmp_path, monkeypatch)
    first, _ = renders.publish(collection(PAGES), None)
    # The same rows in the reverse order (the slugs are not indexed): taken for seg-0's, they
    # would point each row at another row's postings.
    other = {f"{chr(ord('z') - i)}-{slug}": page for i, (slug, page) in enumerate(sorted(PAGES.items()))}
    renders.publish(collection(other), None)
    digests = lexical_reuse.digests_folder(renders.data)
    (digests / "seg-0.digests").write_bytes((digests / "seg-1.digests").read_bytes())
    renders.publish(collection(edited(PAGES)), first)
    assert renders.scanned == [8, 8, 8]  # every chunk indexed, the full render's bytes


def test_digests_that_cannot_be_kept_do_not_fail_the_publish(tmp_path, monkeypatch, caplog):
    renders = Renders(tmp_path, monkeypatch)
    (renders.data / lexical_reuse.DIGESTS_FOLDER).write_text("")  # a file where the folder goes
    first, _ = renders.publish(collection(PAGES), None)
    assert "could not keep the row digests" in caplog.text
    renders.publish(collection(edited(PAGES)), first)
    assert renders.scanned == [8, 8]


def test_a_published_edit_writes_bm25_files_equal_to_full_renders(write_tree, tmp_path, monkeypatch):
    pages = {
        f"docs/page-{i}.md": f"---\ntitle: Page {i}\n---\n# Part\n\nPage {i} is about otters {i}.\n" for i in range(6)
    }
    content = write_tree(pages)
    out = tmp_path / "out"
    out.mkdir()
    config = out / "rag.yaml"
    config.write_text(f"content_dir: {content}\noutput_dir: {out}\nembedder: hashing\nvaults: []\n")
    cfg = load_config(config, environ={})
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance, vaults=[]).success
        (content / "docs" / "page-2.md").write_text("---\ntitle: Page 2\n---\n# Part\n\nPage 2 is about zebras now.\n")
        scanned: list[int] = []
        scan = lexical_reuse.scan_rows
        monkeypatch.setattr(
            lexical_reuse, "scan_rows", lambda columns, rows, *a: scanned.append(len(rows)) or scan(columns, rows, *a)
        )
        assert run_build(cfg, instance, vaults=[]).success
    assert scanned == [1]  # the edited page's one chunk, of the segment's six
    gen = generations.published(cfg)
    index = orjson.loads(gen.index_path.read_bytes())
    with closing(sqlite3.connect(gen.store_path)) as conn:
        for segment in index["segments"]:
            chunks = orjson.loads((cfg.data_dir / segment["chunks"]["file"]).read_bytes())
            ids = [c["id"] for c in chunks["chunks"]]
            expected = render_segment_lexical(conn, segment_rowids(conn, ids), FieldWeights())
            assert (cfg.data_dir / segment["lexical"]["file"]).read_bytes() == expected
    digests = {p.stem for p in lexical_reuse.digests_folder(cfg.data_dir).iterdir()}
    assert {Path(s["lexical"]["file"]).name.removesuffix(".bm25.json") for s in index["segments"]} <= digests


def test_an_unchanged_collection_is_not_named_again_when_the_slot_holds_it_under_other_rowids(write_tree, tmp_path):
    # Store slots sync by diff, each with its own history, so the same chunk may have another
    # rowid in the slot a publish takes than in the previous generation's: the previous BM25
    # files (whose rowids are the browser's tie order) must then not be named again.
    from rag_assets.index import vector_blocks

    pages = {f"docs/page-{i}.md": f"---\ntitle: Page {i}\n---\nPage {i} is about otters.\n" for i in range(4)}
    pages["posts/hello.md"] = "---\ntitle: Hello\n---\nA post about nothing.\n"
    content = write_tree(pages)
    out = tmp_path / "out"
    out.mkdir()
    config = out / "rag.yaml"
    config.write_text(f"content_dir: {content}\noutput_dir: {out}\nembedder: hashing\nvaults: []\n")
    cfg = load_config(config, environ={})
    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance, vaults=[]).success
        current = generations.published(cfg).store_path.resolve()
        for slot in sorted((cfg.data_dir / "stores").glob("rag-store-public.*.db")):
            if slot.resolve() == current:
                continue
            with closing(store.connect(slot)) as conn, store.transaction(conn):
                # docs' chunks written again: the same rows under new rowids
                conn.execute("CREATE TEMP TABLE moved AS SELECT * FROM chunks WHERE id LIKE 'docs/%'")
                conn.execute("DELETE FROM chunks WHERE id LIKE 'docs/%'")
                conn.execute("INSERT INTO chunks SELECT * FROM moved")
                vector_blocks.refresh(conn)
        (content / "posts" / "hello.md").write_text("---\ntitle: Hello\n---\nA post about zebras.\n")
        assert run_build(cfg, instance, vaults=[]).success  # posts changed; docs' rows moved
    gen = generations.published(cfg)
    index = orjson.loads(gen.index_path.read_bytes())
    with closing(sqlite3.connect(gen.store_path)) as conn:
        for segment in index["segments"]:
            chunks = orjson.loads((cfg.data_dir / segment["chunks"]["file"]).read_bytes())
            rowids = segment_rowids(conn, [c["id"] for c in chunks["chunks"]])
            expected = render_segment_lexical(conn, rowids, FieldWeights())
            assert (cfg.data_dir / segment["lexical"]["file"]).read_bytes() == expected, segment["collection"]
