"""Every file a build publishes and every link it makes is checked, and a plain ``rag build``
repairs it.

On a real build of a small content tree (once per public vector encoding that publishes other
files), each published file is truncated, replaced with ``[]`` or deleted, and each link
deleted or re-pointed at another file; then ``rag check`` and ``rag status`` must fail naming
it, ``/status`` over HTTP must list it, a plain ``rag build`` must repair it, ``rag check`` must
be clean again and the file must hold what it held before. Links and the files that can be made
again from the rest of their generation (the static files, the BM25 file, the vector file) are
repaired in place: the same bytes, in the same generation, nothing rebuilt. The others (the
index, the sidecar, the manifest, the store) are republished as a new generation: the same
content apart from the generation's name, its build time and the digests that cover them.

The tree (CONTENT: two collections of two documents, with frontmatter, tags and headings)
publishes every file, link and segment kind the sample content does, as
test_the_cases_cover_every_file_and_link_a_build_publishes checks; each republish a repair
calls for runs Dagster over every collection, which costs about a quarter more CPU on the
sample's five collections and 46 files, for nothing these tests look at.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from rag_assets.config import RagConfig, load_config
from rag_assets.index import generations, store_slots
from rag_assets.index.manifest import read_manifest
from rag_assets.serve.cli import main
from rag_assets.serve.http import create_app

from .live_server import ServerThread

ENCODINGS = ("float", "int16-bin")
COMMON_FILES = (
    "embeddings-index.json",
    "embeddings-meta.json",
    "rag-manifest.json",
    "rag-store-public.db",
    "rag-search.js",
    "rag-vectors.js",
    "search.html",
)
COMMON_LINKS = (
    "data/current",
    "public/embeddings-index.json",
    "public/embeddings-meta.json",
    "data/rag-manifest.json",
    "data/rag-store-public.db",
    "public/segments",
    "public/rag-search.js",
    "public/rag-vectors.js",
    "public/search.html",
)
# What int16-bin publishes in the generation besides: nothing (its vectors are in the segments).
EXTRA: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {"float": ((), ()), "int16-bin": ((), ())}
# The index's segment files (data/segments, rag_assets.index.segments) of each kind, by encoding.
SEGMENT_KINDS = {"float": ("chunks", "lexical", "ledger"), "int16-bin": ("vectors",)}
# Made again from the rest of their generation: repaired in place, byte for byte.
IN_PLACE_FILES = {"rag-search.js", "rag-vectors.js", "search.html"}
# What a republish changes in a file besides its bytes' generation name: build times, and the
# digests of files that name the generation.
# (The sidecar's "files" entry of the manifest is its digest, and the manifest names the generation.)
VOLATILE_KEYS = {
    "generation",
    "builtAt",
    "lastFullBuild",
    "lastIncrementalUpdate",
    "indexedAt",
    "indexSha256",
    "sha256",
    "rag-manifest.json",
    "ledger",  # the manifest's ledger segments, compared as the documents they hold
}


def published_files(encoding: str) -> tuple[str, ...]:
    return COMMON_FILES + EXTRA[encoding][0]


def published_links(encoding: str) -> tuple[str, ...]:
    return COMMON_LINKS + EXTRA[encoding][1]


@dataclass(frozen=True)
class Site:
    config: Path
    out: Path
    content: Path

    def cfg(self) -> RagConfig:
        return load_config(self.config, environ={})


# Two collections (each its own segments, several in the index) of two documents each.
CONTENT = {
    f"{collection}/{name}.md": (
        f"---\ntitle: {name.title()} {collection}\ntags: [{collection}, {name}]\ndate: 2026-01-0{i + 1}\n---\n"
        f"# {name.title()}\n\nNotes on {name} in {collection}: zfs pools, vlan bridges and backups.\n\n"
        f"## Details of {name}\n\nSnapshots are kept weekly and checked with a scrub.\n"
    )
    for i, (collection, name) in enumerate(
        (("posts", "proxmox"), ("posts", "router"), ("docs", "install"), ("docs", "restore"))
    )
}


def write_config(folder: Path, encoding: str, content: Path) -> Path:
    config = folder / "rag.yaml"
    config.write_text(
        f"content_dir: {content}\noutput_dir: {folder / 'out'}\nembedder: hashing\nvaults: []\n"
        f"public_index: {{vector_encoding: {encoding}}}\n"
    )
    return config


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Site]:
    """CONTENT built once per encoding with the hashing embedder."""
    content = tmp_path_factory.mktemp("content")
    for rel, text in CONTENT.items():
        (content / rel).parent.mkdir(parents=True, exist_ok=True)
        (content / rel).write_text(text)
    sites = {}
    for encoding in ENCODINGS:
        folder = tmp_path_factory.mktemp(f"built-{encoding}")
        config = write_config(folder, encoding, content)
        assert main(["build", "--config", str(config)]) == 0
        sites[encoding] = Site(config, folder / "out", content)
    return sites


def site_copy(built: dict[str, Site], encoding: str, tmp_path: Path) -> Site:
    """A copy of the built site (links kept) that a test may damage."""
    config = write_config(tmp_path, encoding, built[encoding].content)
    shutil.copytree(built[encoding].out, tmp_path / "out", symlinks=True)
    return Site(config, tmp_path / "out", built[encoding].content)


def cli(site: Site, *command: str) -> int:
    return main([*command, "--config", str(site.config)])


# --- the damage -----------------------------------------------------------------------------


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def empty_list(path: Path) -> None:
    path.write_bytes(b"[]")


def delete(path: Path) -> None:
    path.unlink()


FILE_DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncated": truncate,
    "replaced-by-[]": empty_list,
    "deleted": delete,
}


def repoint(link: Path) -> None:
    """Point the link at another real file (or folder) of the output: it still resolves."""
    target = os.readlink(link)
    if link.name == generations.CURRENT_LINK:
        other = generations.GENERATIONS_FOLDER  # a real folder, not a generation
    else:
        swap = "embeddings-meta.json" if not target.endswith("embeddings-meta.json") else "embeddings-index.json"
        other = str(Path(target).with_name(swap))
    link.unlink()
    os.symlink(other, link)


LINK_DAMAGE: dict[str, Callable[[Path], None]] = {"deleted": delete, "re-pointed": repoint}

FILE_CASES = [
    pytest.param(encoding, name, how, id=f"{encoding}-{name}-{how}")
    for encoding in ENCODINGS
    for name in (published_files(encoding) if encoding == "float" else EXTRA[encoding][0])
    for how in FILE_DAMAGE
]
LINK_CASES = [
    pytest.param(encoding, link, how, id=f"{encoding}-{link}-{how}")
    for encoding in ENCODINGS
    for link in (published_links(encoding) if encoding == "float" else EXTRA[encoding][1])
    for how in LINK_DAMAGE
]


# --- what must hold -------------------------------------------------------------------------


def assert_reported(site: Site, named: Path, capsys) -> None:
    """`rag check`, `rag status` and `/status` fail on the damage, naming it and the way out."""
    capsys.readouterr()
    assert cli(site, "check") == 1
    out = capsys.readouterr().out
    assert str(named) in out and "rag build" in out, out
    assert cli(site, "status") == 1
    out = capsys.readouterr().out
    assert str(named) in out and "rag build" in out, out
    with ServerThread(create_app(site.cfg(), preload=False)) as server:
        body = server.get("/status").json()
    assert str(named) in {item["path"] for item in body["damaged"]}, body["damaged"]


def assert_repaired(site: Site, capsys) -> str:
    """A plain `rag build` repairs; `rag check` is clean again. What the build printed."""
    capsys.readouterr()
    assert cli(site, "build") == 0
    printed = capsys.readouterr().out
    assert cli(site, "check") == 0, capsys.readouterr().out
    assert cli(site, "status") == 0
    return printed


def without_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    return value


def store_rows(path: Path) -> dict[str, list]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("documents", "chunks", "search_profile")
        } | {"sources": conn.execute("SELECT collection, content_hash, documents FROM sources ORDER BY 1").fetchall()}


def assert_same_content(name: str, before: bytes, after_path: Path, old_gen: str, new_gen: str) -> None:
    """The republished file holds what the damaged one held, apart from the build's name and time."""
    if name.endswith(".db"):
        return  # compared as rows by the caller (SQLite's pages are not the content)
    if name == generations.MANIFEST_NAME:
        after = orjson.dumps(read_manifest(after_path))  # its ledger segments joined (before: the caller's)
    else:
        after = after_path.read_bytes()
    if name.endswith(".json"):
        assert without_volatile(orjson.loads(after.replace(new_gen.encode(), old_gen.encode()))) == without_volatile(
            orjson.loads(before)
        )
    else:
        assert after.replace(new_gen.encode(), old_gen.encode()) == before


def segment_file(site: Site, kind: str) -> Path:
    """The first segment file of ``kind`` that the published index or manifest names."""
    gen = generations.published(site.cfg())
    if kind == "ledger":
        entry = orjson.loads(gen.manifest_path.read_bytes())["ledger"][0]["ledger"]
    else:
        entry = orjson.loads(gen.index_path.read_bytes())["segments"][0][kind]
    return site.out / "data" / "segments" / Path(entry["file"]).name


SEGMENT_CASES = [
    pytest.param(encoding, kind, how, id=f"{encoding}-segment-{kind}-{how}")
    for encoding in ENCODINGS
    for kind in SEGMENT_KINDS[encoding]
    for how in FILE_DAMAGE
]


# --- the tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_cases_cover_every_file_and_link_a_build_publishes(built, encoding) -> None:
    """The lists below are what a build publishes: a new output must be added to them."""
    site = built[encoding]
    gen = generations.published(site.cfg())
    written = [p.name for p in gen.folder.iterdir() if not p.name.endswith(("-wal", "-shm"))]  # SQLite's own
    assert sorted(written) == sorted(published_files(encoding))
    # The generation's store is a link to its store slot, damaged as a file (FILE_CASES) through it.
    assert store_slots.slot_named(gen.store_path) in {store_slots.slot_path(site.cfg(), n) for n in range(3)}
    links = sorted(str(p.relative_to(site.out)) for p in site.out.rglob("*") if p.is_symlink() and p != gen.store_path)
    assert links == sorted(published_links(encoding))


@pytest.mark.parametrize(("encoding", "name", "how"), FILE_CASES)
def test_a_damaged_published_file_is_reported_and_repaired_by_a_plain_build(
    built, tmp_path, capsys, encoding, name, how
) -> None:
    site = site_copy(built, encoding, tmp_path)
    gen = generations.published(site.cfg())
    path = gen.folder / name
    before = path.read_bytes()
    if name == generations.MANIFEST_NAME:
        before = orjson.dumps(read_manifest(path))  # with its ledger segments joined
    rows = store_rows(path) if name.endswith(".db") else None
    FILE_DAMAGE[how](path)
    assert_reported(site, path, capsys)

    printed = assert_repaired(site, capsys)
    now = generations.published(site.cfg())
    repaired = now.folder / name
    if name in IN_PLACE_FILES:
        # Made again beside the rest of its generation: nothing re-indexed or republished.
        assert now.id == gen.id and "Building" not in printed and "repaired" in printed
        assert repaired.read_bytes() == before
    else:
        assert now.id != gen.id and "republishing" in printed
        assert_same_content(name, before, repaired, gen.id, now.id)
        if rows is not None:
            assert store_rows(repaired) == rows


@pytest.mark.parametrize(("encoding", "kind", "how"), SEGMENT_CASES)
def test_a_damaged_segment_file_is_reported_and_made_again_by_a_plain_build(
    built, tmp_path, capsys, encoding, kind, how
) -> None:
    """A segment is damaged in place (truncated, replaced) or lost: reported, then rendered again
    by the republish the damage calls for, with the same name and bytes (a ledger part with the
    same entries: its documents' first indexing time went with the damage)."""
    site = site_copy(built, encoding, tmp_path)
    path = segment_file(site, kind)
    before = path.read_bytes()
    documents = read_manifest(generations.published(site.cfg()).manifest_path)["documents"]
    FILE_DAMAGE[how](path)
    assert_reported(site, path, capsys)
    printed = assert_repaired(site, capsys)
    assert "republishing" in printed
    if kind == "ledger":
        after = read_manifest(generations.published(site.cfg()).manifest_path)["documents"]
        assert without_volatile(after) == without_volatile(documents)
    else:
        assert path.read_bytes() == before


@pytest.mark.parametrize(("encoding", "link", "how"), LINK_CASES)
def test_a_damaged_link_is_reported_and_put_back_by_a_plain_build(built, tmp_path, capsys, encoding, link, how) -> None:
    site = site_copy(built, encoding, tmp_path)
    path = site.out / link
    target = os.readlink(path)
    gen = generations.published(site.cfg())
    files = {p.name: p.read_bytes() for p in gen.folder.iterdir() if not p.name.endswith(".db")}
    LINK_DAMAGE[how](path)
    assert_reported(site, path, capsys)

    printed = assert_repaired(site, capsys)
    assert os.readlink(path) == target  # the same link to the same generation: nothing republished
    assert generations.published(site.cfg()).id == gen.id and "Building" not in printed
    assert {p.name: p.read_bytes() for p in gen.folder.iterdir() if not p.name.endswith(".db")} == files


def test_a_stray_vector_file_link_is_reported_and_removed(built, tmp_path, capsys) -> None:
    """A float build has no vector file: a link to one (left from int16-bin) leads nowhere."""
    site = site_copy(built, "float", tmp_path)
    path = site.out / "public" / "embeddings-vectors.bin"
    os.symlink("../data/current/embeddings-vectors.bin", path)
    assert_reported(site, path, capsys)
    assert_repaired(site, capsys)
    assert not path.is_symlink() and not path.exists()
