"""The names of the three tiers and of the folder that holds note vaults.

Plain constants, apart from the pydantic settings, so that what only needs a name (the
``rag`` command's parser, ``rag --help``) does not pay for building the config models."""

from __future__ import annotations

# A folder of this name in the content dir holds note vaults: never a public collection,
# even when no vault is configured (yet), so private notes cannot leak into the public index.
VAULTS_FOLDER = "vaults"
TIERS = ("public", "safe", "private")
