"""The stat cache kept as one file per collection: an edit rewrites its collection's part only,
a damaged part costs a rehash of its folder only, and an earlier version's single file is read
once and replaced by the parts."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from rag_assets.ingest import stat_cache as stat_cache_module
from rag_assets.ingest.sources import snapshot_collection
from rag_assets.ingest.stat_cache import StatCache, part_files, parts_folder


def corpus(content: Path) -> None:
    for name in ("docs", "blog"):
        for i in range(3):
            (content / name / "sub").mkdir(parents=True, exist_ok=True)
            (content / name / "sub" / f"page-{i}.md").write_text(f"# {name} {i}\n\ntext {i}\n")


def snapshot_all(content: Path, cache_path: Path, reads: list[str]) -> dict[str, str]:
    cache = StatCache(cache_path)
    hashes = {name: snapshot_collection(content, name, cache).content_hash for name in ("docs", "blog")}
    cache.save()
    return hashes


def test_an_edit_rewrites_only_its_collections_part(tmp_path: Path, monkeypatch) -> None:
    content, path = tmp_path / "content", tmp_path / "data" / "stat-cache.json"
    corpus(content)
    reads: list[str] = []
    real = stat_cache_module.sha256_file
    monkeypatch.setattr(stat_cache_module, "sha256_file", lambda p, *a: reads.append(str(p)) or real(p, *a))
    first = snapshot_all(content, path, reads)
    assert len(reads) == 6 and not path.exists()
    parts = {p.name: p for p in part_files(path)}
    assert sorted(parts) == ["blog.json", "docs.json"]
    before = {name: (p.stat().st_ino, p.stat().st_mtime_ns) for name, p in parts.items()}

    reads.clear()
    assert snapshot_all(content, path, reads) == first and reads == []  # every file known by stat
    page = content / "docs" / "sub" / "page-1.md"
    page.write_text("# docs 1\n\nedited\n")
    second = snapshot_all(content, path, reads)
    assert reads == [str(page)] and second["docs"] != first["docs"] and second["blog"] == first["blog"]
    after = {name: (p.stat().st_ino, p.stat().st_mtime_ns) for name, p in parts.items()}
    assert after["blog.json"] == before["blog.json"] and after["docs.json"] != before["docs.json"]

    # A damaged part: its folder is hashed again, the other's files are not read.
    (parts_folder(path) / "blog.json").write_bytes(b"[not an object")
    reads.clear()
    assert snapshot_all(content, path, reads) == second
    assert sorted(reads) == sorted(str(p) for p in (content / "blog").rglob("*.md"))


def test_an_earlier_single_file_is_read_once_and_replaced_by_parts(tmp_path: Path, monkeypatch) -> None:
    content, path = tmp_path / "content", tmp_path / "data" / "stat-cache.json"
    corpus(content)
    path.parent.mkdir(parents=True)
    entries = {}
    for name in ("docs", "blog"):
        for file in sorted((content / name).rglob("*.md")):
            st = file.stat()
            rel = f"{name}/{file.relative_to(content / name).as_posix()}"
            entries[rel] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, "kept-" + rel]
    path.write_bytes(orjson.dumps(entries))
    reads: list[str] = []
    monkeypatch.setattr(stat_cache_module, "sha256_file", lambda p, *a: reads.append(str(p)) or "read")

    cache = StatCache(path)
    assert cache.sha256(
        "docs/sub/page-0.md", content / "docs/sub/page-0.md", os.stat(content / "docs/sub/page-0.md")
    ) == ("kept-docs/sub/page-0.md")
    snapshot_collection(content, "docs", cache)
    cache.save()
    assert reads == [] and not path.exists()
    assert sorted(p.name for p in part_files(path)) == ["blog.json", "docs.json"]
    # Both collections' entries moved to their parts, the one not walked yet included.
    again = StatCache(path)
    blog = content / "blog/sub/page-2.md"
    assert again.sha256("blog/sub/page-2.md", blog, os.stat(blog)) == "kept-blog/sub/page-2.md"


def test_paths_go_to_their_own_part_whatever_came_before(tmp_path: Path) -> None:
    """The part of the last path is kept at hand: a path of another folder sharing its prefix
    ("docs/" then "docs2/"), or after a top-level file ("a" then "ab/"), goes to its own part."""
    content, path = tmp_path / "content", tmp_path / "data" / "stat-cache.json"
    for rel in ("docs/x.md", "docs2/y.md", "a", "ab/z.md", "docs/w.md"):
        (content / rel).parent.mkdir(parents=True, exist_ok=True)
        (content / rel).write_text(rel)
    cache = StatCache(path)
    for rel in ("docs/x.md", "docs2/y.md", "a", "ab/z.md", "docs/w.md"):
        cache.sha256(rel, content / rel, os.stat(content / rel))
    cache.save()
    parts = {p.name: sorted(orjson.loads(p.read_bytes())) for p in part_files(path)}
    assert parts == {
        "docs.json": ["docs/w.md", "docs/x.md"],
        "docs2.json": ["docs2/y.md"],
        "a~file.json": ["a"],
        "ab.json": ["ab/z.md"],
    }
