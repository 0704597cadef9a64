"""Incremental builds: `rag build` after edits must publish exactly what a full rebuild publishes,
do only the work the edits call for, say "up to date" when nothing changed, and survive kill -9.

Everything runs for real: Markdown files on disk, the `rag` CLI (in-process, and as a
subprocess for the kill tests), Dagster runs, SQLite files. Small trees and a small chunk
size (a rag.yaml written by the tests) keep the builds fast while still giving documents
of several chunks, so edits and restructurings move chunk boundaries.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import dagster as dg
import orjson
import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from rag_assets.base.verified import RECORD_NAME
from rag_assets.config import RagConfig, load_config
from rag_assets.defs.jobs import UPDATE_COLLECTION_JOB
from rag_assets.defs.runner import run_build
from rag_assets.embed.cache import EmbeddingCache
from rag_assets.index import generations
from rag_assets.index.consistency import check_public_outputs
from rag_assets.index.freshness import detect_changes
from rag_assets.index.index_json import read_index
from rag_assets.index.manifest import read_manifest
from rag_assets.index.record_facts import FACTS_SUFFIX
from rag_assets.serve.cli import main

from .conftest import REPO_ROOT

# Small chunks: a ~100-word document becomes 2-4 chunks, so edits shift chunk boundaries.
SMALL_CHUNKS_YAML = "chunking:\n  target_words: 40\n  overlap_words: 8\n  min_words: 12\n"

VOCAB = tuple(
    """proxmox vlan bridge router switch firewall backup snapshot dataset pool cluster node kernel
    module service timer socket journal volume mount partition container image registry network
    subnet gateway tunnel certificate renewal schedule monitor alert metric dashboard query index
    shard replica compose ingress storage quota rsync borg restic grafana prometheus""".split()
)
COLLECTION_POOL = ("posts", "docs", "journal", "guides", "notes")
TOKEN_RE = re.compile(r"\buq\d+x\b")  # every paragraph carries one unique word like uq17x


# --- content model ---------------------------------------------------------------------------


@dataclasses.dataclass
class Section:
    level: int
    heading: str
    paras: list[str]


@dataclasses.dataclass
class Page:
    title: str
    tags: list[str]
    date: str  # frontmatter date, so updated_at never depends on mtimes
    intro: list[str]
    sections: list[Section]

    def render(self) -> str:
        front = f"---\ntitle: {self.title}\ndate: {self.date}\ntags: [{', '.join(self.tags)}]\n---\n"
        blocks = list(self.intro)
        for s in self.sections:
            blocks.append("#" * s.level + " " + s.heading)
            blocks.extend(s.paras)
        return front + "\n\n".join(blocks) + "\n"


def doc_id(rel: str) -> str:
    collection, rest = rel.split("/", 1)
    return f"{collection}/{rest.rsplit('.', 1)[0]}"


class ContentTree:
    """A content folder and a model of its Markdown files, edited by the operations below."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pages: dict[str, Page] = {}
        self.tokens_ever: set[str] = set()
        self.doc_ids_ever: set[str] = set()
        self._n = 0

    def _next(self) -> int:
        self._n += 1
        return self._n

    def token(self) -> str:
        token = f"uq{self._next()}x"
        self.tokens_ever.add(token)
        return token

    def paragraph(self, rng: random.Random, words: tuple[int, int] = (10, 22)) -> str:
        ws = [rng.choice(VOCAB) for _ in range(rng.randint(*words))]
        ws.insert(rng.randint(1, len(ws)), self.token())  # never first: capitalize() would change it
        return " ".join(ws).capitalize() + "."

    def heading(self, rng: random.Random) -> str:
        return f"{rng.choice(VOCAB).title()} {rng.choice(VOCAB)} {self._next()}"

    def new_page(self, rng: random.Random, sections: int | None = None) -> Page:
        count = rng.randint(1, 3) if sections is None else sections
        return Page(
            title=f"{rng.choice(VOCAB).title()} notes {self._next()}",
            tags=rng.sample(VOCAB, 2),
            date=f"2026-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
            intro=[self.paragraph(rng)],
            sections=[
                Section(rng.choice((2, 3)), self.heading(rng), [self.paragraph(rng) for _ in range(rng.randint(1, 2))])
                for _ in range(count)
            ],
        )

    def write(self, rel: str, page: Page | None = None, *, to_disk: bool = True) -> None:
        if page is not None:
            self.pages[rel] = page
        self.doc_ids_ever.add(doc_id(rel))
        if not to_disk:
            return
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.pages[rel].render(), encoding="utf-8")

    def collections(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if p.is_dir())

    def doc_ids(self) -> set[str]:
        return {doc_id(rel) for rel in self.pages}

    def live_tokens(self) -> set[str]:
        return {t for page in self.pages.values() for t in TOKEN_RE.findall(page.render())}

    def seed_initial(self, write: bool = True) -> None:
        """Three collections, six files (one in a subfolder); ``write=False`` only models them."""
        for i, rel in enumerate(
            (
                "posts/alpha.md",
                "posts/bravo.md",
                "posts/guides/charlie.md",
                "docs/install.md",
                "docs/faq.md",
                "journal/2026-01.md",
            )
        ):
            self.write(rel, self.new_page(random.Random(i), sections=2 + i % 2), to_disk=write)

    # The operations a hypothesis example chains. Each returns what it did (for failure reports).
    def apply(self, op: tuple[str, int, int]) -> str:
        kind, pick, seed = op
        rng = random.Random(seed)
        rels = sorted(self.pages)
        cols = self.collections()
        if kind in ("append", "replace", "delete", "rename", "restructure"):
            if not rels:
                return f"{kind}: no file left"
            rel = rels[pick % len(rels)]
            page = self.pages[rel]
            if kind == "append":
                target = rng.randrange(len(page.sections) + 1)
                (page.intro if target == 0 else page.sections[target - 1].paras).append(self.paragraph(rng))
                self.write(rel)
            elif kind == "replace":
                slots = [page.intro] + [s.paras for s in page.sections]
                slots = [s for s in slots if s]
                paras = rng.choice(slots)
                paras[rng.randrange(len(paras))] = self.paragraph(rng)
                self.write(rel)
            elif kind == "delete":
                (self.root / rel).unlink()
                del self.pages[rel]
            elif kind == "rename":
                collection = rel.split("/", 1)[0]
                new = f"{collection}/{rng.choice(('', 'moved/', 'guides/'))}{Path(rel).stem}-r{self._next()}.md"
                (self.root / new).parent.mkdir(parents=True, exist_ok=True)
                os.rename(self.root / rel, self.root / new)  # keeps the mtime, like `mv`
                self.pages[new] = self.pages.pop(rel)
                self.doc_ids_ever.add(doc_id(new))
                return f"rename {rel} -> {new}"
            else:  # restructure: headings change, sections move, merge or split
                self._restructure(page, rng)
                self.write(rel)
            return f"{kind} {rel}"
        if kind == "add":
            rel = f"{cols[pick % len(cols)]}/{rng.choice(('', 'sub/'))}new-{self._next()}.md"
            self.write(rel, self.new_page(rng))
            return f"add {rel}"
        if kind == "add_collection":
            free = [c for c in COLLECTION_POOL if c not in cols]
            if not free:
                return "add_collection: pool exhausted"
            name = free[pick % len(free)]
            for _ in range(rng.randint(1, 2)):
                self.write(f"{name}/page-{self._next()}.md", self.new_page(rng))
            return f"add_collection {name}"
        if kind == "remove_collection":
            if len(cols) < 2:  # `rag build` with no collection at all is a usage error
                return "remove_collection: last collection kept"
            name = cols[pick % len(cols)]
            shutil.rmtree(self.root / name)
            for rel in [r for r in self.pages if r.startswith(f"{name}/")]:
                del self.pages[rel]
            return f"remove_collection {name}"
        raise AssertionError(kind)

    def _restructure(self, page: Page, rng: random.Random) -> None:
        variant = rng.randrange(4)
        if variant == 0 and len(page.sections) > 1:  # sections move
            page.sections = page.sections[1:] + page.sections[:1]
        elif variant == 1:  # nesting changes
            for s in page.sections:
                s.level = 5 - s.level  # 2 <-> 3
        elif variant == 2 and len(page.sections) > 1:  # two sections merge
            first, second = page.sections[0], page.sections.pop(1)
            first.paras.extend(second.paras)
        else:  # the intro becomes a section of its own, under a new heading
            page.sections.insert(0, Section(2, self.heading(rng), page.intro))
            page.intro = [self.paragraph(rng)]
        s = rng.choice(page.sections)
        s.heading = self.heading(rng)  # and a heading is renamed


OPS = ("append", "replace", "delete", "rename", "add", "restructure", "add_collection", "remove_collection")
operations = st.lists(
    st.tuples(st.sampled_from(OPS), st.integers(0, 999), st.integers(0, 2**32 - 1)), min_size=1, max_size=4
)


# --- reading the outputs ---------------------------------------------------------------------


def cfg_for(content: Path, out: Path, config: Path | None) -> RagConfig:
    return load_config(config, content_dir=content, output_dir=out, embedder="hashing", environ={})


def cli_args(content: Path, out: Path, config: Path | None) -> list[str]:
    args = ["--content-dir", str(content), "--output-dir", str(out)]
    return args + (["--config", str(config)] if config else [])


def read_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def store_dump(path: Path) -> dict[str, Any]:
    """Everything the store holds that a build decides (built_at aside), read independently."""
    with closing(ro(path)) as conn:
        return {
            "chunks": conn.execute(
                "SELECT id, document_id, chunk_index, text, heading_path, word_count, embedding FROM chunks ORDER BY id"
            ).fetchall(),
            "documents": conn.execute(
                "SELECT id, collection, slug, title, tags, updated_at, chunk_count FROM documents ORDER BY id"
            ).fetchall(),
            "fts_rows": conn.execute("SELECT COUNT(*) FROM fts_chunks_docsize").fetchone()[0],
            "meta": conn.execute("SELECT model, dimension FROM embeddings_meta").fetchall(),
        }


def fts_count(path: Path, word: str) -> int:
    with closing(ro(path)) as conn:
        return conn.execute("SELECT COUNT(*) FROM fts_chunks WHERE fts_chunks MATCH ?", (f'"{word}"',)).fetchone()[0]


def assert_store_sound(path: Path) -> None:
    """SQLite integrity, FTS index == content table, FTS rows == chunks, no orphan rows."""
    with closing(ro(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        chunk_rowids = {r[0] for r in conn.execute("SELECT rowid FROM chunks")}
        fts_ids = {r[0] for r in conn.execute("SELECT id FROM fts_chunks_docsize")}
        assert fts_ids == chunk_rowids, "FTS rows and chunk rows differ"
        orphans = conn.execute(
            "SELECT COUNT(*) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id WHERE d.id IS NULL"
        ).fetchone()[0]
        assert orphans == 0
    with closing(sqlite3.connect(path)) as conn:
        # FTS5's own check of the index against the external content table (raises if corrupt).
        conn.execute("INSERT INTO fts_chunks(fts_chunks) VALUES('integrity-check')")


def manifest_view(data: dict[str, Any]) -> dict[str, Any]:
    """The manifest without its timestamps, and without the digest of each collection's store
    rowids (two stores built apart number their rows apart)."""
    return {
        "documents": {
            k: (d["path"], d["contentHash"], d["chunkCount"], d["lastModified"]) for k, d in data["documents"].items()
        },
        "collections": {
            name: {k: v for k, v in entry.items() if k != "rowidsSha256"} for name, entry in data["collections"].items()
        },
        "totals": (data["stats"]["totalDocuments"], data["stats"]["totalChunks"]),
        "model": (data["model"], data["dimension"]),
    }


HEADER_KEYS = ("version", "model", "dimension", "provider", "contentHash", "totalChunks", "collections")


def assert_same_outputs(inc: RagConfig, full: RagConfig) -> None:
    a, b = read_index(inc.index_path), read_index(full.index_path)
    assert {k: a[k] for k in HEADER_KEYS} == {k: b[k] for k in HEADER_KEYS}
    a_chunks = {c["id"]: c for c in a["chunks"]}
    b_chunks = {c["id"]: c for c in b["chunks"]}
    assert sorted(a_chunks) == sorted(b_chunks), "chunk IDs differ between incremental and full build"
    for cid, chunk in a_chunks.items():
        other = b_chunks[cid]
        assert chunk["text"] == other["text"], cid
        assert chunk["metadata"] == other["metadata"], cid
        assert chunk["embedding"] == other["embedding"], cid  # both rounded to vector_decimals
    assert [c["id"] for c in a["chunks"]] == [c["id"] for c in b["chunks"]], "chunk order differs"
    meta_a, meta_b = read_json(inc.meta_path), read_json(full.meta_path)
    assert {k: meta_a[k] for k in (*HEADER_KEYS, "sizeBytes")} == {k: meta_b[k] for k in (*HEADER_KEYS, "sizeBytes")}

    sa, sb = store_dump(inc.public_store_path), store_dump(full.public_store_path)
    assert [r[0] for r in sa["chunks"]] == [r[0] for r in sb["chunks"]]
    assert sa["chunks"] == sb["chunks"]  # texts, heading paths and float32 embedding blobs
    assert sa["documents"] == sb["documents"]
    assert sa["meta"] == sb["meta"]
    for cfg, dump in ((inc, sa), (full, sb)):
        assert dump["fts_rows"] == len(dump["chunks"])
        assert_store_sound(cfg.public_store_path)
        report = check_public_outputs(cfg)
        assert report.ok, report.problems
    assert manifest_view(read_manifest(inc.manifest_path)) == manifest_view(read_manifest(full.manifest_path))


def assert_nothing_left_of(cfg: RagConfig, gone_docs: set[str], gone_tokens: set[str]) -> None:
    """Deleted, renamed or removed documents and replaced paragraphs leave no trace anywhere."""
    index = read_index(cfg.index_path)
    manifest = read_manifest(cfg.manifest_path)
    with closing(ro(cfg.public_store_path)) as conn:
        store_chunk_ids = [r[0] for r in conn.execute("SELECT id FROM chunks")]
        store_doc_ids = {r[0] for r in conn.execute("SELECT id FROM documents")}
    for doc in gone_docs:
        prefix = f"{doc}/chunk-"
        assert not [c["id"] for c in index["chunks"] if c["id"].startswith(prefix)], doc
        assert not [cid for cid in store_chunk_ids if cid.startswith(prefix)], doc
        assert doc not in store_doc_ids
        assert doc not in manifest["documents"]
    texts = " ".join(c["text"] for c in index["chunks"])
    for word in gone_tokens:
        assert fts_count(cfg.public_store_path, word) == 0, word
        assert not re.search(rf"\b{word}\b", texts), word


# --- 1. incremental == full --------------------------------------------------------------------


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    # No shrinking: each example costs two builds, and a failing list of at most four
    # operations is readable as it is.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(ops=operations)
def test_incremental_build_publishes_what_a_full_rebuild_publishes(
    tmp_path: Path, ops: list[tuple[str, int, int]]
) -> None:
    check_incremental_equals_full(tmp_path, ops, SMALL_CHUNKS_YAML)


# Sharded collections (posts and docs from the start, guides when an example adds it): the
# incremental build re-indexes the shards of what changed and publishing rejoins them.
SHARDED_YAML = SMALL_CHUNKS_YAML + "shards:\n  posts: 2\n  docs: 3\n  guides: 2\n"


@settings(
    max_examples=3,  # each example is two builds; the unsharded test above explores more
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(ops=operations)
def test_incremental_build_of_sharded_collections_publishes_what_a_full_rebuild_publishes(
    tmp_path: Path, ops: list[tuple[str, int, int]]
) -> None:
    check_incremental_equals_full(tmp_path, ops, SHARDED_YAML)
    records = tmp_path / "template" / "inc" / "data" / "intermediate" / "embeddings"
    kept = ["docs~0", "docs~1", "docs~2", "journal", "posts~0", "posts~1"]
    # Each record with its facts beside it (rag_assets.defs.io_managers), and nothing else.
    assert sorted(p.name for p in records.iterdir()) == sorted([*kept, *(k + FACTS_SUFFIX for k in kept)])


def check_incremental_equals_full(tmp_path: Path, ops: list[tuple[str, int, int]], config_yaml: str) -> None:
    """Apply ``ops`` to the initial tree, build incrementally and from scratch, compare."""
    # The first build of the initial tree is the same for every example: made once, then copied
    # (content and outputs, mtimes kept, so the stat cache stays valid) into each example's folder.
    template = tmp_path / "template"
    if not template.is_dir():
        seed_tree = ContentTree(template / "content")
        seed_tree.seed_initial()
        config = template / "rag.yaml"
        config.write_text(config_yaml)
        assert main(["build", *cli_args(template / "content", template / "inc", config)]) == 0
    with tempfile.TemporaryDirectory(prefix="rag-incremental-") as tmp:
        tmp_dir = Path(tmp)
        shutil.copytree(template, tmp_dir, dirs_exist_ok=True)
        config = tmp_dir / "rag.yaml"
        content, inc_out, full_out = tmp_dir / "content", tmp_dir / "inc", tmp_dir / "full"
        tree = ContentTree(content)
        tree.seed_initial(write=False)
        assert {rel: (content / rel).read_text() for rel in tree.pages} == {
            rel: p.render() for rel, p in tree.pages.items()
        }

        done = [tree.apply(op) for op in ops]
        for op in ops:
            event(op[0])  # shown by --hypothesis-show-statistics
        assert main(["build", *cli_args(content, inc_out, config)]) == 0, done  # incremental, same output dir
        assert main(["build", "--force", *cli_args(content, full_out, config)]) == 0, done  # no caches at all

        inc, full = cfg_for(content, inc_out, config), cfg_for(content, full_out, config)
        assert_same_outputs(inc, full)
        # Independent of the full build: the manifest lists exactly the files on disk.
        assert set(read_manifest(inc.manifest_path)["documents"]) == tree.doc_ids(), done
        live = tree.live_tokens()
        assert_nothing_left_of(inc, tree.doc_ids_ever - tree.doc_ids(), tree.tokens_ever - live)
        for word in live:  # every surviving paragraph is searchable, as often as after a full build
            assert fts_count(inc.public_store_path, word) == fts_count(full.public_store_path, word) > 0, word
        assert main(["check", *cli_args(content, inc_out, config)]) == 0


def test_rename_over_a_file_of_the_same_size_and_mtime_is_indexed(tmp_path: Path, capsys) -> None:
    """`mv a.md b.md` where a and b have the same size and mtime (files unpacked from a tar or
    zip archive, or copied with `cp -p`/`rsync -t`, share whole-second mtimes).

    The stat cache keys a file's hash by (path, size, mtime) only, and a rename keeps the
    mtime, so b.md's old hash is reused; the document cache then hands back b's old chunks.
    """
    content = tmp_path / "content"
    (content / "posts").mkdir(parents=True)
    a, b = content / "posts" / "a.md", content / "posts" / "b.md"
    a.write_text("# Alpha\n\nalpha words about zfs uqalphax.\n")
    b.write_text("# Bravo\n\nbravo words about lvm uqbravox.\n")
    assert a.stat().st_size == b.stat().st_size
    stamp = 1_767_225_600  # 2026-01-01T00:00:00Z, as an archive would set it
    for path in (a, b):
        os.utime(path, (stamp, stamp))
    out = tmp_path / "out"
    assert main(["build", *cli_args(content, out, None)]) == 0
    b.unlink()
    os.rename(a, b)
    assert main(["build", *cli_args(content, out, None)]) == 0
    assert main(["build", "--force", *cli_args(content, tmp_path / "full", None)]) == 0
    capsys.readouterr()
    cfg = cfg_for(content, out, None)
    texts = {c["id"]: c["text"] for c in read_index(cfg.index_path)["chunks"]}
    full_texts = {
        c["id"]: c["text"] for c in read_index(cfg_for(content, tmp_path / "full", None).index_path)["chunks"]
    }
    assert list(full_texts) == ["posts/b/chunk-0"] and "uqalphax" in full_texts["posts/b/chunk-0"]
    assert texts == full_texts, "the incremental index holds b.md's old text"
    assert fts_count(cfg.public_store_path, "uqbravox") == 0


# --- 2. only the changed work is done ----------------------------------------------------------


def test_one_file_edit_parses_one_document_and_embeds_only_the_changed_chunks(tmp_path: Path, capsys) -> None:
    config = tmp_path / "rag.yaml"
    config.write_text(SMALL_CHUNKS_YAML)
    content = tmp_path / "content"
    tree = ContentTree(content)
    rng = random.Random(7)
    tree.write("posts/long.md", tree.new_page(rng, sections=5))  # several chunks
    tree.write("posts/short.md", tree.new_page(rng, sections=1))
    tree.write("posts/more.md", tree.new_page(rng, sections=1))
    tree.write("docs/a.md", tree.new_page(rng, sections=2))
    tree.write("docs/b.md", tree.new_page(rng, sections=1))
    tree.write("journal/j.md", tree.new_page(rng, sections=1))
    cfg = cfg_for(content, tmp_path / "out", config)
    intermediate = cfg.intermediate_dir

    def pickle_stamps(collections: tuple[str, ...]) -> dict[str, int]:
        return {
            f"{asset.name}/{c}": (asset / c).stat().st_mtime_ns for asset in intermediate.iterdir() for c in collections
        }

    with dg.DagsterInstance.ephemeral() as instance:
        assert run_build(cfg, instance).success
        before = read_index(cfg.index_path)["chunks"]
        before_texts = {c["id"]: c["text"] for c in before}
        posts_before = [c for c in before if c["metadata"]["collection"] == "posts"]
        long_before = [c for c in posts_before if c["metadata"]["slug"] == "long"]
        assert len(long_before) >= 4
        untouched = pickle_stamps(("docs", "journal"))
        cached_before = EmbeddingCache(cfg.embedding_cache_path).count()

        # Edit the last section only: the first chunks of long.md keep their text.
        tree.pages["posts/long.md"].sections[-1].paras[-1] = tree.paragraph(rng)
        tree.write("posts/long.md")

        changes = detect_changes(cfg)
        assert [(c.collection, c.status, c.added, c.changed, c.removed) for c in changes.changed] == [
            ("posts", "changed", [], ["posts/long.md"], [])
        ]
        outcome = run_build(cfg, instance, collections=[c.collection for c in changes.changed])
        assert outcome.success, outcome.error
        assert [c.collection for c in outcome.collections] == ["posts"]
        meta = outcome.collections[0].metadata
        assert meta["parsed_documents"]["parsed_now"] == 1
        assert meta["parsed_documents"]["unchanged"] == 2

        after = read_index(cfg.index_path)["chunks"]
        posts_after = [c for c in after if c["metadata"]["collection"] == "posts"]
        new_texts = [c["text"] for c in posts_after if c["text"] not in set(before_texts.values())]
        assert 1 <= len(new_texts) < len([c for c in posts_after if c["metadata"]["slug"] == "long"])
        assert meta["embeddings"]["cache_misses"] == len(new_texts)
        assert meta["embeddings"]["cache_hits"] == len(posts_after) - len(new_texts)
        assert EmbeddingCache(cfg.embedding_cache_path).count() - cached_before == len(set(new_texts))

        # The store rewrote only the chunks whose text changed (plus added, minus removed ones).
        after_texts = {c["id"]: c["text"] for c in after}
        written = [cid for cid, text in after_texts.items() if before_texts.get(cid) != text]
        deleted = [cid for cid, text in before_texts.items() if after_texts.get(cid) != text]
        store_meta = outcome.publish_metadata["public_store"]
        assert (store_meta["chunks_written"], store_meta["chunks_deleted"]) == (len(written), len(deleted))
        assert store_meta["full_rewrite"] is False

        # One run per build; the second one's range is posts alone, so the other collections
        # were not run at all: no rewritten intermediate record.
        runs = instance.get_runs(dg.RunsFilter(job_name=UPDATE_COLLECTION_JOB))  # newest first
        assert len(instance.get_runs()) == len(runs) == 2
        assert runs[0].tags.get("dagster/partition") == "posts"
        assert (
            runs[1].tags["dagster/asset_partition_range_start"],
            runs[1].tags["dagster/asset_partition_range_end"],
        ) == ("docs", "posts")
        assert pickle_stamps(("docs", "journal")) == untouched
        assert check_public_outputs(cfg).ok

    # Through the CLI: an edit in journal builds journal alone.
    capsys.readouterr()
    tree.pages["journal/j.md"].intro.append(tree.paragraph(rng))
    tree.write("journal/j.md")
    assert main(["build", *cli_args(content, cfg.output_dir, config)]) == 0
    printed = capsys.readouterr().out
    assert "[journal] 1 changed" in printed and "Building 1 collection(s)" in printed
    assert "[journal] 1 documents" in printed
    assert "[posts]" not in printed and "[docs]" not in printed
    assert pickle_stamps(("docs",)) == {k: v for k, v in untouched.items() if k.endswith("/docs")}
    assert check_public_outputs(cfg).ok


# --- 3. no-op and rag check --------------------------------------------------------------------


def output_stamps(cfg: RagConfig) -> dict[str, tuple[int, int]]:
    """Size and mtime of every output and cache file. Not the verification record
    (``data/verified.json``): checks write it by design, noting which files they verified, and
    whether the build already noted its outputs depends on how fast it ran (a file changed within
    0.1 s of its check is not noted)."""
    return {
        str(p.relative_to(cfg.output_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(cfg.output_dir.rglob("*"))
        if p.is_file() and not p.name.endswith(("-shm", "-wal")) and p.name != RECORD_NAME
    }


def test_no_change_is_up_to_date_and_rag_check_names_what_changed(tmp_path: Path, capsys) -> None:
    content = tmp_path / "content"
    tree = ContentTree(content)
    tree.seed_initial()
    args = cli_args(content, tmp_path / "out", None)
    cfg = cfg_for(content, tmp_path / "out", None)
    assert main(["build", *args]) == 0
    capsys.readouterr()

    stamps = output_stamps(cfg)
    assert main(["build", *args]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["check", *args]) == 0
    assert "Fresh" in capsys.readouterr().out
    assert output_stamps(cfg) == stamps  # neither command rewrote anything

    rng = random.Random(3)
    tree.pages["posts/bravo.md"].intro.append(tree.paragraph(rng))
    tree.write("posts/bravo.md")
    assert main(["check", *args]) == 1
    printed = capsys.readouterr().out
    assert "Stale" in printed and "[posts] 1 changed" in printed
    assert re.search(r"changed\s+posts/bravo\.md", printed)
    assert "[docs]" not in printed and "[journal]" not in printed
    assert output_stamps(cfg) == stamps  # `rag check` writes nothing but its record, not even the stat cache

    tree.write("docs/new.md", tree.new_page(rng))
    (content / "journal" / "2026-01.md").unlink()
    assert main(["check", *args]) == 1
    printed = capsys.readouterr().out
    assert re.search(r"added\s+docs/new\.md", printed) and re.search(r"removed\s+journal/2026-01\.md", printed)

    assert main(["build", *args]) == 0
    capsys.readouterr()
    assert main(["check", *args]) == 0
    shutil.rmtree(content / "journal")
    assert main(["check", *args]) == 1
    assert "[journal] no longer a collection (its folder was removed or is left out)" in capsys.readouterr().out
    assert main(["build", *args]) == 0
    assert main(["check", *args]) == 0
    assert "journal" not in read_index(cfg.index_path)["collections"]
    assert check_public_outputs(cfg).ok


# --- 4. kill -9 --------------------------------------------------------------------------------

BULK_FILES = 300


def write_bulk_tree(root: Path, n: int) -> None:
    rng = random.Random(11)
    words = [f"{w}{i}" for i, w in enumerate(VOCAB * 40)]
    folder = root / "bulk"
    folder.mkdir(parents=True)
    for i in range(n):
        sections = "\n".join(
            f"## Part {s}\n\n" + " ".join(rng.choice(words) for _ in range(60)) + ".\n" for s in range(3)
        )
        (folder / f"doc-{i:04d}.md").write_text(f"---\ntitle: Doc {i}\ndate: 2026-01-01\n---\n# Doc {i}\n\n{sections}")


def subprocess_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("RAG_", "DAGSTER_", "OPENROUTER", "OPENAI", "OLLAMA"))
    }
    env.update(RAG_EMBEDDER="hashing", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def published_state(cfg: RagConfig) -> dict[str, Any]:
    """What each output holds, timestamps aside; asserts each one is readable on the way."""
    index = read_index(cfg.index_path)  # parses, so it is whole
    meta = read_json(cfg.meta_path)
    manifest = read_manifest(cfg.manifest_path)
    assert_store_sound(cfg.public_store_path)
    dump = store_dump(cfg.public_store_path)
    assert dump["fts_rows"] == len(dump["chunks"])
    return {
        "index": ({k: index[k] for k in HEADER_KEYS}, index["chunks"]),
        "meta": {k: meta[k] for k in HEADER_KEYS},
        "store": dump,
        "manifest": manifest_view(manifest),
    }


def edit_for_trial(content: Path, trial: int) -> tuple[str, str]:
    """Append a ~450-word section to one file: its chunk count grows, so chunk IDs change."""
    rel = f"bulk/doc-{trial:04d}.md"
    word = f"uqkill{trial}x"
    rng = random.Random(100 + trial)
    extra = " ".join(rng.choice(VOCAB) for _ in range(450))
    with (content / rel).open("a", encoding="utf-8") as handle:
        handle.write(f"\n## Added in trial {trial}\n\n{word} {extra}.\n")
    return rel, word


def kill_when(proc: subprocess.Popen, event, timeout: float = 60.0) -> bool:
    """SIGKILL the build as soon as ``event()`` is true; False if it finished first."""
    deadline = time.perf_counter() + timeout
    while proc.poll() is None and time.perf_counter() < deadline:
        if event():
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            return True
        time.sleep(0.0005)
    proc.wait(timeout=60)
    return False


def kill_after(proc: subprocess.Popen, delay: float) -> bool:
    time.sleep(delay)
    if proc.poll() is not None:
        return False
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    return True


def test_kill_9_during_build_keeps_outputs_readable_and_the_next_build_recovers(tmp_path: Path) -> None:
    content, out = tmp_path / "content", tmp_path / "out"
    write_bulk_tree(content, BULK_FILES)
    cfg = cfg_for(content, out, None)
    assert main(["build", *cli_args(content, out, None)]) == 0
    cmd = [sys.executable, "-m", "rag_assets.serve.cli", "build", *cli_args(content, out, None)]
    env = subprocess_env()

    def start() -> subprocess.Popen:
        return subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # Measure one incremental build after a one-file edit, with the moments it reports.
    edit_for_trial(content, 0)
    marks: dict[str, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    printed = []
    for line in proc.stdout:
        printed.append(line)
        now = time.perf_counter() - t0
        if line.startswith("Building "):
            marks.setdefault("started", now)  # imports done, Dagster runs begin
        elif line.startswith("[bulk] ") and "documents" in line:
            marks.setdefault("indexed", now)  # index_collection done, publish_index begins
        elif line.startswith("Built in"):
            marks.setdefault("published", now)
    proc.stdout.close()
    assert proc.wait(timeout=120) == 0, "".join(printed)
    duration = time.perf_counter() - t0
    assert {"started", "indexed", "published"} <= set(marks), marks

    # Kills at random moments spread over a whole build, one in each third, then kills at the
    # moments that matter (timing alone rarely hits them on a loaded machine): right after the
    # generation swap, and while the new generation's files are being written. The first third
    # is the interpreter's start, the config and the change detection (the Dagster runs begin,
    # "started", at 31-51% of the build, measured at load 10), where two kills (3-20% and
    # 20-45%, as before) sampled the same phase; the runs still get two, and the swap and the
    # generation's writing their own.
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    spread = [
        (f"{d:.2f}s", d)
        for d in (rng.uniform(lo, hi) * duration for lo, hi in ((0.03, 0.33), (0.33, 0.66), (0.66, 0.95)))
    ]
    triggers = ["right after the swap", "while the generation is written"]
    current = generations.current_link(cfg)
    folder = generations.generations_dir(cfg)

    results = []
    for trial, (label, when) in enumerate([*spread, *[(t, None) for t in triggers]], start=1):
        old = published_state(cfg)
        rel, word = edit_for_trial(content, trial)
        before = os.readlink(current)
        known = set(os.listdir(folder))
        proc = start()
        if when is not None:
            killed_it = kill_after(proc, when)
        elif label == "right after the swap":
            killed_it = kill_when(proc, lambda: os.readlink(current) != before)
        else:
            killed_it = kill_when(proc, lambda: bool(set(os.listdir(folder)) - known))

        # Every output parses, passes its integrity checks, and all are of one build.
        killed = published_state(cfg)
        strong = check_public_outputs(cfg)

        # The next normal build completes, is consistent, contains the edit and leaves nothing behind.
        assert main(["build", *cli_args(content, out, None)]) == 0, f"trial {trial} (kill {label}, seed {seed})"
        final = published_state(cfg)
        report = check_public_outputs(cfg)
        assert report.ok, report.problems
        assert any(word in c["text"] for c in read_index(cfg.index_path)["chunks"])
        assert fts_count(cfg.public_store_path, word) >= 1
        sha = hashlib.sha256((content / rel).read_bytes()).hexdigest()
        assert read_manifest(cfg.manifest_path)["documents"][doc_id(rel)]["contentHash"] == sha
        assert main(["check", *cli_args(content, out, None)]) == 0
        assert not list(out.rglob("*.tmp")), f"trial {trial}: temporary files left behind"
        assert len(os.listdir(folder)) <= 2, f"trial {trial}: old generations left behind"

        # Each output is the old version or the new one, and all of them the same one.
        states = {}
        for name in ("index", "meta", "store", "manifest"):
            assert killed[name] in (old[name], final[name]), f"trial {trial}: {name} is neither old nor new"
            states[name] = "old" if killed[name] == old[name] else "new"
        results.append((trial, label, killed_it, states, strong.problems))

    summary = "\n".join(
        f"trial {t} kill {label}{'' if killed_it else ' (build had already finished)'}: "
        + ", ".join(f"{k}={v}" for k, v in states.items())
        + (f"; INCONSISTENT: {problems}" if problems else "; consistent")
        for t, label, killed_it, states, problems in results
    )
    print(f"kill -9 trials (seed {seed}; build {duration:.2f}s, marks {marks}):\n{summary}")
    # Publishing swaps one generation for another in a single rename (rag_assets.index.generations):
    # a kill at any instant leaves every output of one build, so this must hold in every trial.
    for t, label, _killed_it, states, problems in results:
        assert not problems, f"trial {t} (kill {label}, seed {seed}): {problems}\n{summary}"
        assert len(set(states.values())) == 1, f"trial {t} (kill {label}, seed {seed}): mixed outputs {states}"


def test_intermediate_records_are_replaced_whole_never_truncated(tmp_path: Path) -> None:
    """A kill while a record is written must not leave a truncated pickle that every later
    publish fails to load: records go to a temporary file that is renamed into place, so a
    write that dies half-way (here: an object that fails to pickle after the file is opened)
    leaves the previous record intact and no partial file under the record's name."""
    import pickle

    from upath import UPath

    from rag_assets.defs.io_managers import AtomicPickleIOManager

    record = UPath(tmp_path / "embeddings" / "docs")
    manager = AtomicPickleIOManager(base_dir=str(tmp_path))
    manager.dump_to_path(None, {"collection": "docs", "chunks": [1, 2, 3]}, record)
    before = record.read_bytes()

    class Unpicklable:
        def __reduce__(self):
            raise pickle.PicklingError("boom half-way")

    with pytest.raises(pickle.PicklingError):
        manager.dump_to_path(None, {"collection": "docs", "chunks": [Unpicklable()]}, record)
    assert record.read_bytes() == before
    assert pickle.loads(before)["chunks"] == [1, 2, 3]
    assert sorted(p.name for p in record.parent.iterdir()) == ["docs"]


def test_a_change_reverted_after_a_build_killed_before_publishing_is_not_published(tmp_path: Path) -> None:
    """Edit posts/alpha.md (a draft), `rag build` is killed after posts' index_collection run and
    before publish_index, the draft is reverted (`git checkout`, editor undo), then another
    collection is edited and `rag build` runs. Against the manifest, posts is unchanged, so it is
    not re-indexed, but publishing loads every collection's intermediate record, and posts' one
    still holds the draft. (The same state follows a build that fails in a later collection, or a
    partition materialised in the Dagster UI without publishing.)
    """
    content, out = tmp_path / "content", tmp_path / "out"
    tree = ContentTree(content)
    tree.seed_initial()
    cfg = cfg_for(content, out, None)
    assert main(["build", *cli_args(content, out, None)]) == 0
    alpha = content / "posts" / "alpha.md"
    original = alpha.read_bytes()
    alpha.write_bytes(original + b"\nA draft paragraph with uqdraftx that must never ship.\n")

    record = cfg.intermediate_dir / "embeddings" / "posts"
    stamp = record.stat().st_mtime_ns

    def record_rewritten() -> bool:
        if record.stat().st_mtime_ns == stamp:
            return False
        try:
            return "uqdraftx" in " ".join(c.text for c in pickle.loads(record.read_bytes()).chunks)
        except Exception:  # still being written
            return False

    cmd = [sys.executable, "-m", "rag_assets.serve.cli", "build", *cli_args(content, out, None)]
    proc = subprocess.Popen(
        cmd, env=subprocess_env(), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if not kill_when(proc, record_rewritten) or "uqdraftx" in orjson.dumps(read_index(cfg.index_path)).decode():
        pytest.skip("timing: the build reached publish_index before the kill (a very loaded machine)")
    assert check_public_outputs(cfg).ok  # nothing was published: the old outputs are intact

    alpha.write_bytes(original)  # the draft is reverted
    faq = "docs/faq.md"
    tree.pages[faq].intro.append(tree.paragraph(random.Random(9)))
    tree.write(faq)
    code = main(["build", *cli_args(content, out, None)])
    texts = " ".join(c["text"] for c in read_index(cfg.index_path)["chunks"])
    assert "uqdraftx" not in texts, f"the reverted draft was published from the stale intermediate record (exit {code})"
    assert fts_count(cfg.public_store_path, "uqdraftx") == 0
    assert code == 0
    assert main(["check", *cli_args(content, out, None)]) == 0
