"""The package's architecture, checked from its own imports and schema: layers only import
downward, no module imports itself through others, and every default the code still writes
agrees with the schema's (the one place for defaults)."""

from __future__ import annotations

import dataclasses

from boundary.core import sources
from boundary.core.config import schema_defaults

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


def test_the_code_writes_no_default_that_disagrees_with_the_schema():
    from boundary.analysis.regimes import Thresholds
    from boundary.analysis.tables import View
    from boundary.core.passk import DEFAULT_KS
    from boundary.training.trainer_config import PBAConfig

    method, report = schema_defaults("methods"), schema_defaults("report")
    config = {f.name: f.default for f in dataclasses.fields(PBAConfig)}
    for key in ["kl_estimator", "beta_a", "beta_kl", "masked_action", "support_floor", "advantage",
                "passk_k", "positive_weight", "negative_weight", "unlikeliness", "cov_fraction", "cov_kl_coef"]:
        assert config[key] == method[key], key
    assert list(config["cov_bounds"]) == method["cov_bounds"]
    assert config["refresh_steps"] == schema_defaults("gate")["refresh_steps"]
    assert list(DEFAULT_KS) == report["ks"] == schema_defaults("evaluate")["ks"]
    from boundary.analysis.regimes import DEFAULT_BINS

    assert list(DEFAULT_BINS) == report["strata_bins"]
    view = {f.name: f.default for f in dataclasses.fields(View)}
    assert view["group_size"] == report["group_size"] and view["gate_G0"] == report["gate_G0"]
    regimes = schema_defaults("regimes")
    for field in dataclasses.fields(Thresholds):
        if field.name in regimes:
            assert field.default == regimes[field.name], field.name


def test_train_keys_come_from_the_schema():
    from boundary.core.config import schema_keys
    from boundary.training.trainer_config import KEYS

    assert schema_keys("train") | schema_keys("methods") <= KEYS
    assert {"epsilon", "weight_decay", "gradient_accumulation_steps", "verify_workers"} <= schema_keys("train")


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
