"""Fewer garbage-collector passes while a build runs (rag_assets/base/gc_passes.py): the
build's steps run with a higher young threshold, and the collector is as it was afterwards,
also after an error."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from rag_assets.base.gc_passes import YOUNG_THRESHOLD, fewer_gc_passes
from rag_assets.defs import publish as publish_step
from rag_assets.serve.cli import main

from .conftest import SAMPLE_CONTENT


def test_nested_uses_change_nothing_more_and_leaving_restores_the_collector() -> None:
    before = gc.get_threshold()
    with fewer_gc_passes():
        inside = gc.get_threshold()
        assert inside[0] == max(YOUNG_THRESHOLD, before[0]) and inside[1:] == before[1:]
        with fewer_gc_passes():
            assert gc.get_threshold() == inside
        assert gc.get_threshold() == inside  # the inner use left the outer one's settings alone
    assert gc.get_threshold() == before


def test_an_error_inside_restores_the_collector() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_gc_passes():
        raise RuntimeError("boom")
    assert gc.get_threshold() == before


def test_rag_build_publishes_with_fewer_passes_and_restores_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int, int]] = []
    real = publish_step.publish_all

    def spying(*args, **kwargs):
        seen.append(gc.get_threshold())
        return real(*args, **kwargs)

    monkeypatch.setattr(publish_step, "publish_all", spying)
    before = gc.get_threshold()
    out = tmp_path / "out"
    assert main(["build", "--content-dir", str(SAMPLE_CONTENT), "--output-dir", str(out)]) == 0
    assert len(seen) == 1
    assert seen[0][0] == max(YOUNG_THRESHOLD, before[0])
    assert gc.get_threshold() == before
