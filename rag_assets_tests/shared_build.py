"""A build made once per test session and shared by the xdist workers.

Under xdist each worker has its own temp root, but their parent is common: a folder there,
made behind a file lock, is built by the first worker that asks for it while the other waits,
so two cores do not build the same site twice (and two modules of one worker that read the same
build do not build it again). Only for builds the tests read: a test that changes one copies it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock  # the dev extra (pyproject.toml)


def shared_build(tmp_path_factory, name: str, make: Callable[[Path], object]) -> Path:
    """The folder ``name`` under the workers' common temp root, made by ``make(folder)`` once."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    done = Path(f"{root}.built")  # beside the folder, not in it: a test may copy the folder whole
    with FileLock(f"{root}.lock"):
        if not done.is_file():
            shutil.rmtree(root, ignore_errors=True)  # what a failed attempt left
            root.mkdir(parents=True)
            make(root)
            done.touch()
    return root
