"""The project's module rules, read from the source with Python's own parser.

- no module imports a private (``_name``) from another module: a name used elsewhere is public;
- no import inside a function closes a cycle with the importing module (a function-level import
  that exists only to dodge ``import a`` <-> ``import b``: the shared piece belongs in a module
  both import).
"""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "rag_assets"


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")


def parsed_modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PACKAGE.rglob("*.py"))}


def project_imports(nodes: list[ast.stmt] | ast.AST) -> list[ast.ImportFrom | ast.Import]:
    """The ``rag_assets`` imports among ``nodes`` (a module body) or anywhere under one node."""
    found = nodes if isinstance(nodes, list) else list(ast.walk(nodes))
    return [
        n
        for n in found
        if (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("rag_assets"))
        or (isinstance(n, ast.Import) and any(a.name.startswith("rag_assets") for a in n.names))
    ]


def imported_modules(node: ast.ImportFrom | ast.Import) -> set[str]:
    return {node.module or ""} if isinstance(node, ast.ImportFrom) else {a.name for a in node.names}


def test_no_private_name_is_imported_from_another_module():
    offenders = [
        f"{name}: from {node.module} import {alias.name}"
        for name, tree in parsed_modules().items()
        for node in project_imports(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") or (alias.asname or "").startswith("_")
    ]
    assert offenders == []


def test_no_function_level_import_closes_a_cycle():
    modules = parsed_modules()
    top_level = {
        name: set().union(*map(imported_modules, project_imports(tree.body))) for name, tree in modules.items()
    }

    def reaches(start: str, target: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            current = todo.pop()
            if current == target:
                return True
            if current not in seen:
                seen.add(current)
                todo.extend(top_level.get(current, ()))
        return False

    cycles = [
        f"{name} imports {target} in a function; {target} imports {name}"
        for name, tree in modules.items()
        for function in ast.walk(tree)
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in project_imports(function)
        for target in imported_modules(node)
        if reaches(target, name)
    ]
    assert sorted(set(cycles)) == []
