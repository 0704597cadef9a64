"""The output check's ledger facts: the whole ledger's, kept per segment, so a check after an
edit reads only the segments the edit wrote, and a store that differs still gets its strays named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rag_assets.config import RagConfig
from rag_assets.index import consistency, generations, ledger_facts, manifest
from rag_assets.index.consistency import check_public_outputs
from rag_assets.serve import cli

from .conftest import build_files_once, copy_built

FILES = {
    f"{collection}/page-{i}.md": f"# {collection} {i}\n\nText about {collection} number {i}.\n"
    for collection in ("alpha", "beta", "gamma")
    for i in range(6)
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_files_once(tmp_path_factory, "ledger-facts", FILES)


@pytest.fixture
def cfg(built: Path, tmp_path: Path, make_config: Callable[..., RagConfig]) -> RagConfig:
    return copy_built(built, tmp_path, make_config)


def counted_segment_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    real = ledger_facts.read_ledger_segment

    def spy(path, entry):
        reads.append(entry["file"])
        return real(path, entry)

    monkeypatch.setattr(ledger_facts, "read_ledger_segment", spy)
    return reads


def test_the_kept_facts_are_the_whole_ledgers_and_only_new_segments_are_read(
    cfg: RagConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = generations.published(cfg)
    whole = manifest.read_manifest(gen.manifest_path)
    assert whole is not None
    facts_path = cfg.ledger_facts_path
    assert facts_path.is_file()  # kept by the build's own check
    facts_path.unlink()
    reads = counted_segment_reads(monkeypatch)
    facts = ledger_facts.manifest_facts(gen.manifest_path, facts_path)
    assert facts == ledger_facts.facts_of(whole["documents"])
    assert facts is not None and facts.documents == 18 and facts.with_chunks == 18
    assert len(reads) == len(whole["ledger"]) == 3
    reads.clear()
    assert ledger_facts.manifest_facts(gen.manifest_path, facts_path) == facts
    assert reads == []  # all kept
    assert check_public_outputs(cfg).ok and reads == []

    # An edit: the next check reads the edited collection's segment alone.
    (cfg.content_dir / "beta/page-2.md").write_text("# beta 2\n\nOther words now.\n\nAnd more.\n", encoding="utf-8")
    assert cli.main(["build", "--content-dir", str(cfg.content_dir), "--output-dir", str(cfg.output_dir)]) == 0
    reads.clear()
    gen = generations.published(cfg)
    after = manifest.read_manifest(gen.manifest_path)
    assert after is not None
    assert ledger_facts.manifest_facts(gen.manifest_path, facts_path) == ledger_facts.facts_of(after["documents"])
    assert reads == []  # the build's own check read it already
    beta = [e["ledger"]["file"] for e in after["ledger"] if e["collection"] == "beta"]
    facts_path.unlink()
    ledger_facts.manifest_facts(gen.manifest_path, facts_path)
    assert sorted(reads) == sorted(e["ledger"]["file"] for e in after["ledger"]) and beta


def test_wrong_kept_facts_cost_a_whole_read_never_a_false_problem(
    cfg: RagConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole_reads: list[Path] = []
    real = manifest.read_manifest

    def spy(path, collections=None):
        if collections is None:
            whole_reads.append(path)
        return real(path, collections)

    monkeypatch.setattr(consistency.manifest, "read_manifest", spy)
    facts_path = cfg.ledger_facts_path
    assert check_public_outputs(cfg).ok and whole_reads == []
    kept = facts_path.read_bytes()
    assert kept.count(b"[6,6,6,") == 3  # documents, chunks, documents with chunks, digest
    facts_path.write_bytes(kept.replace(b"[6,6,6,", b"[6,7,6,", 1))  # a wrong count
    assert check_public_outputs(cfg).ok and len(whole_reads) == 1
    facts_path.write_bytes(kept.replace(b"[6,6,6,", b"[6,6,5,", 1))  # a wrong document count
    assert check_public_outputs(cfg).ok and len(whole_reads) == 2
    facts_path.write_text("not json", encoding="utf-8")
    assert check_public_outputs(cfg).ok  # unreadable: made again from the segments


def test_a_store_document_the_ledger_does_not_name_is_reported(cfg: RagConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's documents differ from the ledger's (a publish bug, not damage: the files
    are as written): the whole ledger is read and the stray named."""
    real = manifest.read_manifest

    def without_one(path, collections=None):
        data = real(path, collections)
        if data is not None and collections is None:
            data["documents"].pop("gamma/page-4")
        return data

    monkeypatch.setattr(consistency.manifest, "read_manifest", without_one)
    stale = ledger_facts.LedgerFacts(18, 18, 17, 0)  # as a ledger without gamma/page-4 would say
    monkeypatch.setattr(ledger_facts, "manifest_facts", lambda *_: stale)
    report = check_public_outputs(cfg)
    assert "chunks of documents missing from the manifest: ['gamma/page-4']" in report.problems


def test_a_facts_file_that_cannot_be_written_costs_reads_never_the_check(cfg: RagConfig) -> None:
    facts_path = cfg.ledger_facts_path
    facts_path.unlink()
    facts_path.mkdir()  # as a read-only output folder would refuse it
    assert check_public_outputs(cfg).ok
    assert check_public_outputs(cfg).ok


@pytest.mark.parametrize(
    ("documents", "why"),
    [
        ({"alpha/a": {"chunkCount": 1}, "alpha/b": 7}, "an entry that is not an object"),
        ({"alpha/a": {"chunkCount": 0.5}}, "a chunk count that is not a whole number"),
        ({"alpha/a": {"chunkCount": "2"}}, "a chunk count that is a string"),
        ({"alpha/a": {"chunkCount": True}}, "a chunk count that is a boolean"),
        ({"alpha/a": {"chunkCount": -1}}, "a negative chunk count"),
        ({"beta/a": {"chunkCount": 1}}, "a document of another collection"),
    ],
)
def test_entries_a_publish_does_not_write_leave_the_ledger_to_be_read_whole(documents: dict, why: str) -> None:
    assert ledger_facts.facts_of(documents, ("alpha", 0, 1)) is None, why


def test_a_document_outside_its_bucket_is_not_counted_from_facts() -> None:
    """Each document is in one segment, so no document is summed twice (read_manifest's merge
    keeps the later of two entries of one document)."""
    from rag_assets.index.segments import bucket_of

    doc = "alpha/page"
    mine = bucket_of(doc, 4)
    assert ledger_facts.facts_of({doc: {"chunkCount": 2}}, ("alpha", mine, 4)) == ledger_facts.LedgerFacts(
        1, 2, 1, ledger_facts.id_digest([doc])
    )
    assert ledger_facts.facts_of({doc: {"chunkCount": 2}}, ("alpha", (mine + 1) % 4, 4)) is None
