"""The package's architecture, checked from its own imports: layers only import downward, no
module imports itself through others, the Snakefile parses light. (Defaults written once:
tests/test_settings.py.)"""

from __future__ import annotations

from boundary.core import sources

# Each layer (a subpackage, or the dispatcher) and the layers it may import.
ALLOWED = {
    "core": set(),
    "tasks": {"core"},
    "sampling": {"core", "tasks"},
    "readers": {"core", "tasks"},
    "training": {"core", "tasks", "sampling"},
    "analysis": {"core", "tasks", "readers", "training"},
    "stages": {"core", "tasks", "sampling", "training", "readers", "analysis"},
    "cli": {"core"},  # stages are loaded by name (importlib), never imported
}


def modules() -> list[str]:
    root = sources.PACKAGE
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        names.append(".".join(("boundary",) + (parts[:-1] if parts[-1] == "__init__" else parts)))
    return names


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_module_is_in_a_layer():
    assert {layer(m) for m in modules()} - {None} == set(ALLOWED)


def test_layers_import_only_downward():
    wrong = [(m, i) for m in modules() for i in sources.imports_of(m)
             if layer(i) and layer(m) and layer(i) != layer(m) and layer(i) not in ALLOWED[layer(m)]]
    assert wrong == []


def test_no_import_circles():
    graph = {m: {i for i in sources.imports_of(m) if i != "boundary" and i in modules()
                 and not m.startswith(i + ".")} for m in modules()}
    state, circles = {}, []

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                circles.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert circles == []


def test_the_snakefile_parses_without_pandas_scipy_or_torch():
    """Every `snakemake` call parses the Snakefile: the package modules its rules import stay
    light (the report's names, the anchor kinds, the import graph)."""
    import re
    import subprocess
    import sys

    rules = sources.PACKAGE.parents[1] / "workflow" / "rules"
    imports = sorted({line for smk in rules.glob("*.smk") for line in smk.read_text().splitlines()
                      if re.match(r"from boundary[\w.]* import ", line)})
    probe = "\n".join(["import sys", *imports,
                       "print(' '.join(m for m in ('pandas', 'scipy', 'torch') if m in sys.modules))"])
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert imports and out.stdout.strip() == ""
