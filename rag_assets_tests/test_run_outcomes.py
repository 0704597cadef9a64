"""What a build reports is read from Dagster's results as typed values, never by cutting strings.

A failed vault's own error reaches the outcome whole, whatever it contains: the step's failure
names each failed vault with its error in a JSON metadata value, which the runner reads as such.
"""

from __future__ import annotations

import dataclasses

from rag_assets.config import VaultConfig
from rag_assets.defs.runner import run_build

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
