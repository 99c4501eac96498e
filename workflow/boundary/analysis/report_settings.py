"""The names of what the report writes: light enough for the Snakefile, which lists the
report's outputs at parse time (no pandas, no scipy). The report's settings are the settings
layer's (core/settings.py: `report_key`, `load("report", ...)`); docs/reference/report_settings.md says what
each key does.
"""

from __future__ import annotations

DIAGNOSTIC_TABLES = ["regime_counts", "boundary_robust", "diag_seeds", "boundary_seeds", "regime_diagnostics", "transitions",
                     "sensitivity", "strata", "skills", "answer_concentration", "detectable_loss"]
DIAGNOSTIC_FIGURES = ["regime_passk", "transitions", "p_base_hist", "strata_delta", "training"]


def table_names(settings: dict) -> list[str]:
    """Every table the report writes (each as .tex, .md and .csv), whatever was run."""
    return (["benchmark_curves", "mechanism_summary", "headline_intervals", "controls", "gate_ablation",
             "gate_resolution", "masks", "methods_ranking"] + [f"seeds_{b}" for b in settings["benchmarks"]] + DIAGNOSTIC_TABLES)


def figure_names(settings: dict) -> list[str]:
    """Every figure the report writes (each as .pdf and .png)."""
    per_bench = [f"{kind}_{b}" for b in settings["benchmarks"] for kind in ("passk", "paired_gain")]
    return per_bench + DIAGNOSTIC_FIGURES + ["methods_ranking"]
