"""The report's settings and the names of what it writes: light enough for the Snakefile,
which lists the report's outputs at parse time (no pandas, no scipy). Every default is the
schema's (`report:` in workflow/schemas/config.schema.yaml); docs/reference/report_settings.md says what
each key does.
"""

from __future__ import annotations

from boundary.core.config import load_stage_settings, schema_defaults, schema_keys
from boundary.core.errors import BoundaryError

DEFAULTS = schema_defaults("report")
DIAGNOSTIC_TABLES = ["regime_counts", "diag_seeds", "boundary_seeds", "regime_diagnostics", "transitions",
                     "sensitivity", "strata", "answer_concentration", "detectable_loss"]
DIAGNOSTIC_FIGURES = ["regime_passk", "transitions", "p_base_hist", "strata_delta", "training"]


def load_settings(value) -> dict:
    """The report's settings (JSON text or file), every unset key at the schema's default."""
    raw = load_stage_settings(str(value))
    unknown = set(raw) - set(schema_keys("report"))
    if unknown:
        raise BoundaryError(f"report settings: unknown key(s) {', '.join(sorted(unknown))}")
    s = {**DEFAULTS, **raw}
    if not s.get("main"):
        s["main"] = [s["baseline"], s["method"]]
    if not s["headline"] and s["benchmarks"]:
        s["headline"] = next(iter(s["benchmarks"]))
    for e in s["ablations"]:
        if not {"method", "G0", "tau"} <= set(e):
            raise BoundaryError(f"report settings: ablation {e} needs method, G0 and tau")
    for e in s["controls"]:
        if "method" not in e:
            raise BoundaryError(f"report settings: control {e} needs method")
    ks = s["ks"]
    if not isinstance(ks, list) or not ks or not all(isinstance(k, int) and k >= 1 for k in ks):
        raise BoundaryError(f"report settings: ks {ks} must be a non-empty list of whole numbers >= 1")
    return s


def table_names(settings: dict) -> list[str]:
    """Every table the report writes (each as .tex, .md and .csv), whatever was run."""
    return (["benchmark_curves", "mechanism_summary", "headline_intervals", "controls", "gate_ablation",
             "gate_resolution", "masks", "methods_ranking"] + [f"seeds_{b}" for b in settings["benchmarks"]] + DIAGNOSTIC_TABLES)


def figure_names(settings: dict) -> list[str]:
    """Every figure the report writes (each as .pdf and .png)."""
    per_bench = [f"{kind}_{b}" for b in settings["benchmarks"] for kind in ("passk", "paired_gain")]
    return per_bench + DIAGNOSTIC_FIGURES + ["methods_ranking"]
