"""What a build reports is read from Dagster's results as typed values, never by cutting strings.

A failed vault's own error reaches the outcome whole, whatever it contains: the step's failure
names each failed vault with its error in a JSON metadata value, which the runner reads as such.
"""

from __future__ import annotations

import dataclasses

from rag_assets.config import VaultConfig
from rag_assets.defs.runner import run_build
from rag_assets.serve.cli import main as rag
from rag_assets.serve.exit_codes import EXIT_OK, EXIT_USAGE
from rag_assets.serve.status import print_status

from .conftest import instance_for_test


def test_a_failed_vaults_error_reaches_the_outcome_whole(write_tree, make_config):
    content = write_tree(
        {"posts/hello.md": "# Hello\n\nA public post.\n", "vaults/me/n.md": "# Note\n\nRestic backs up the NAS.\n"}
    )
    # The folder's name holds the separator the failure's description joins vaults with.
    gone = content / "vaults" / "old; moved"
    vaults = (VaultConfig("me", content / "vaults" / "me", "private"), VaultConfig("gone", gone, "private"))
    cfg = dataclasses.replace(make_config(content), vaults=vaults)
    with instance_for_test() as instance:
        outcome = run_build(cfg, instance)
    by_name = {v.vault: v for v in outcome.vaults}
    assert by_name["me"].success and not by_name["gone"].success
    error = by_name["gone"].error
    # The whole message: the folder with its "; ", and what to do next.
    assert f"folder {gone} does not exist" in error and "fix its path in rag.yaml" in error
    assert error.startswith("VaultMissing: ")
    assert outcome.error == f"vault gone: {error}"


def test_vaults_without_collections_say_so_in_status_and_publishing_names_the_cause(write_tree, make_config, capsys):
    """A content folder of vaults only: `rag build` builds the vaults and publishes nothing, and
    `rag status` says why there is no public index instead of asking for the build just run;
    a publish asked for anyway (the default of run_build) is refused with its reason, not a
    TypeError from an empty fan-in."""
    content = write_tree({"vaults/me/n.md": "# Note\n\nRestic backs up the NAS.\n"})
    vaults = (VaultConfig("me", content / "vaults" / "me", "private"),)
    cfg = dataclasses.replace(make_config(content), vaults=vaults)
    with instance_for_test() as instance:
        vaults_only = run_build(cfg, instance, collections=[], publish=False)
        assert vaults_only.error is None and [v.vault for v in vaults_only.vaults if v.success] == ["me"]
        refused = run_build(cfg, instance)
    assert refused.error is not None and "no collection has been embedded yet" in refused.error
    assert "TypeError" not in refused.error
    assert print_status(cfg) == EXIT_OK
    printed = capsys.readouterr().out
    assert f"No public index: {content} holds no collections, only vaults" in printed
    assert "run `rag build`" not in printed


def test_a_public_search_of_vaults_only_says_where_the_notes_are(write_tree, tmp_path, capsys):
    """`rag search` / `rag context` on the public tier of a folder of vaults only: told that
    there are no collections and which tier holds the notes, not to run a build that would
    make no public store."""
    content = write_tree({"vaults/me/n.md": "# Note\n\nRestic backs up the NAS.\n"})
    config = tmp_path / "rag.yaml"
    config.write_text(
        f"content_dir: {content}\noutput_dir: {tmp_path / 'out'}\nembedder: hashing\n"
        f"vaults:\n  - {{name: me, path: {content / 'vaults' / 'me'}, tier: private}}\n",
        encoding="utf-8",
    )
    for command in ("search", "context"):
        assert rag([command, "restic", "--config", str(config)]) == EXIT_USAGE
        said = capsys.readouterr().err
        assert f"No public index: {content} holds no collections, only vaults" in said
        assert "--tier safe" in said and "run `rag build`" not in said
    # With a collection, a missing public store still asks for the build.
    (content / "posts").mkdir()
    (content / "posts" / "a.md").write_text("# A\n\nPublic.\n", encoding="utf-8")
    assert rag(["search", "restic", "--config", str(config)]) == EXIT_USAGE
    assert "run `rag build` first" in capsys.readouterr().err
