"""The package's own import graph, read from its source (ast; nothing is imported): the files
a command runs. Rules list them as inputs, compared by content, so an edit reruns exactly the
stages that import it; training keys its resumable checkpoints by them too."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # workflow/boundary
NAME = PACKAGE.name


def module_file(module: str) -> Path | None:
    """The file of `boundary.x.y` (a module or a package's __init__), or None."""
    parts = module.split(".")[1:]
    base = PACKAGE.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


@functools.cache
def imports_of(module: str) -> frozenset[str]:
    """The package modules `module` imports anywhere in its file (lazy imports included), with
    the packages above each (importing a.b runs a/__init__.py)."""
    path = module_file(module)
    if path is None:
        return frozenset()
    found = set()
    for node in _statements(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from boundary.x import y`: y may be a module of package x
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] == NAME and module_file(name):
                parts = name.split(".")
                found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    parts = module.split(".")
    found.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return frozenset(found - {module})


def _statements(node: ast.AST):
    """Every statement in `node`, nested ones included: an import is a statement, so the walk
    never enters an expression (a third of ast.walk's nodes, every Snakemake start pays it)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)):
            yield child
            yield from _statements(child)


def closure(*modules: str) -> list[str]:
    """Every package module that running `modules` can import, themselves included."""
    seen, todo = set(), list(modules)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imports_of(module)
    return sorted(seen)


def files(*modules: str) -> list[Path]:
    """The source files of closure(*modules), in a fixed order."""
    return [module_file(m) for m in closure(*modules) if module_file(m)]
