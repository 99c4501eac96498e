"""The paper's tables as LaTeX (booktabs tabular, ready to \\input), Markdown and CSV.

A table is built from `Diagnosis` objects (diagnose.py) and a `View` (which method is the
GRPO baseline, which is PBA, display labels, controls, gate ablations). Cells are `Stat`s:
seed mean +- sample SD where several seeds exist, a bare value for one seed or the fixed base.
Prompt counts (lost, gained, transitions) print as the total over seeds with each seed's count,
"4 (1, 2, 1)", never as a rounded mean. pass@k quantities print in points (x100). A method that
was not run prints "not run" and the table's note names it; a method that ran on a split whose
regime holds no prompt prints "no Boundary prompts" (per regime): never a silent blank. The CSV
holds the numbers behind the cells.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.analysis.label_reliability import ROBUST_SUCCESSES, robust
from boundary.analysis.label_reliability import summary_lines as reliability_lines
from boundary.analysis.regimes import REGIMES
from boundary.core import settings
from boundary.core.artifacts import write_table, write_text
from boundary.core.names import BASE
from boundary.core.passk import horizon, is_sequential

REPORT = settings.defaults("report")

NOT_RUN = "not run"


def no_prompts(regime: str) -> str:
    """The cell of a method that ran where `regime` holds no prompt (e.g. Boundary at n = 8)."""
    return f"no {regime} prompts"


def absent(summary, method, regime="all") -> str:
    """Why a summary has no row: the method was not run, or it ran and the regime is empty."""
    ran = summary["method"] == method
    if regime != "all" and ran.any() and not (ran & (summary["regime"] == regime)).any():
        return no_prompts(regime)
    return NOT_RUN


# ----------------------------------------------------------------------------- view

@dataclass
class View:
    """Which methods a table shows and how they are called (from the report settings)."""

    baseline: str | None = REPORT["baseline"]
    method: str | None = REPORT["method"]
    labels: dict = field(default_factory=dict)
    main: list = field(default_factory=list)      # methods of the seed-resolved tables
    controls: list = field(default_factory=list)  # [{method, label, setting}]
    ablations: list = field(default_factory=list)  # [{method, mask, G0, tau}]
    benchmarks: dict = field(default_factory=dict)  # name -> display name
    headline: str | None = REPORT["headline"]     # benchmark of the mechanism/headline tables
    group_size: int = REPORT["group_size"]         # GRPO rollouts per prompt (gate resolution)
    gate_G0: int = REPORT["gate_G0"]
    ranked: list = field(default_factory=list)     # methods of the ranking table (empty: every one)

    def label(self, method: str) -> str:
        return self.labels.get(method, "Base" if method == BASE else method)

    def bench_label(self, bench: str) -> str:
        return self.benchmarks.get(bench, bench)

    @classmethod
    def for_diagnose(cls, methods, pair=None) -> View:
        if pair:
            a, b = pair
            return cls(baseline=b, method=a, main=[b, a])
        return cls(baseline=None, method=None, main=list(methods))

    @classmethod
    def from_settings(cls, s: dict) -> View:
        """From the report's complete settings (core/settings.py)."""
        return cls(baseline=s["baseline"], method=s["method"], labels=dict(s["labels"]), main=list(s["main"]),
                   controls=list(s["controls"]), ablations=list(s["ablations"]),
                   benchmarks=dict(s["benchmarks"]), headline=s["headline"], group_size=int(s["group_size"]),
                   gate_G0=int(s["gate_G0"]), ranked=list(s["ranked"]))


# ----------------------------------------------------------------------------- cells

@dataclass
class Stat:
    mean: float
    sd: float = float("nan")
    digits: int = 1
    suffix: str = ""
    sign: bool = False

    def _num(self, x: float) -> str:
        if round(x, self.digits) == 0:
            x = 0.0  # no "-0.0"
        text = f"{x:+.{self.digits}f}" if self.sign else f"{x:.{self.digits}f}"
        return "0" if self.sign and x == 0 and self.digits == 0 else text

    def md(self) -> str:
        if self.mean is None or not np.isfinite(self.mean):
            return "n/a"
        if np.isfinite(self.sd):
            return f"{self._num(self.mean)} ± {self.sd:.{self.digits}f}{self.suffix}"
        return f"{self._num(self.mean)}{self.suffix}"

    def tex(self) -> str:
        if self.mean is None or not np.isfinite(self.mean):
            return "n/a"
        suffix = self.suffix.replace("%", r"\%")
        if np.isfinite(self.sd):
            return f"${self._num(self.mean)}{{\\pm}}{self.sd:.{self.digits}f}${suffix}"
        return f"${self._num(self.mean)}${suffix}" if self.sign else f"{self._num(self.mean)}{suffix}"


TEX_SYMBOLS = {"±": r"$\pm$", "→": r"$\to$", "Δ": r"$\Delta$", "≥": r"$\ge$", "↓": r"$\downarrow$",
               "↑": r"$\uparrow$", "−": "-", "ŵ": r"$\hat{w}$", "τ": r"$\tau$", "–": "--", "w*": r"$w^\star$"}


def tex_escape(text: str) -> str:
    if text.startswith("$") and text.endswith("$"):
        return text  # already math
    out = text
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("#", r"\#"), ("_", r"\_"),
                 ("^", r"\^{}"), ("~", r"\~{}")):  # answers in text, such as 2^{10}
        out = out.replace(a, b)
    for a, b in TEX_SYMBOLS.items():
        out = out.replace(a, b)
    return out


def _numeric(cell) -> bool:
    if isinstance(cell, Stat) or cell in (NOT_RUN, "n/a", "--", "") or str(cell) in map(no_prompts, REGIMES):
        return True
    try:
        float(str(cell).strip("[]%").split(",")[0].split("–")[0])
        return True
    except ValueError:
        return False


@dataclass
class Table:
    name: str
    caption: str
    columns: list
    rows: list                       # list of lists of str | Stat
    data: pd.DataFrame               # the numbers behind the cells (CSV)
    notes: list = field(default_factory=list)

    def md(self) -> str:
        cell = lambda c: c.md() if isinstance(c, Stat) else str(c).replace("|", "\\|")  # a "|" in text ends a cell
        lines = [f"**{self.caption}**", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "|".join("---" for _ in self.columns) + "|"]
        lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in self.rows]
        lines += [""] + [f"_{n}_" for n in self.notes]
        return "\n".join(lines) + "\n"

    def tex(self) -> str:
        cell = lambda c: c.tex() if isinstance(c, Stat) else tex_escape(str(c))
        # Text columns left-aligned, number columns centred.
        spec = "".join("c" if j > 0 and all(_numeric(r[j]) for r in self.rows if j < len(r)) else "l"
                       for j in range(len(self.columns)))
        ascii_ = lambda t: t.replace("±", "+-").replace("−", "-").encode("ascii", "replace").decode()
        lines = [f"% {self.name}: {ascii_(self.caption)}"] + [f"% note: {ascii_(n)}" for n in self.notes]
        lines += [f"\\begin{{tabular}}{{@{{}}{spec}@{{}}}}", r"\toprule",
                  " & ".join(tex_escape(c) for c in self.columns) + r" \\", r"\midrule"]
        lines += [" & ".join(cell(c) for c in row) + r" \\" for row in self.rows]
        lines += [r"\bottomrule", r"\end{tabular}"]
        return "\n".join(lines) + "\n"

    def write(self, folder: Path) -> list[Path]:
        folder = Path(folder)
        paths = [folder / f"{self.name}.{ext}" for ext in ("tex", "md", "csv")]
        write_text(self.tex(), paths[0])
        write_text(self.md(), paths[1])
        write_table(self.data, paths[2])
        return paths


def unfilled(name: str, caption: str, why: str) -> Table:
    """A table the run cannot fill: its caption and one line saying why, never empty cells."""
    return Table(name, caption, ["Note"], [[why]], pd.DataFrame({"note": [why]}))


# ----------------------------------------------------------------------------- lookups

def _rows(summary: pd.DataFrame, method, metric, regime="all", k=None) -> pd.DataFrame:
    s = summary[(summary["method"] == method) & (summary["metric"] == metric) & (summary["regime"] == regime)]
    return s[s["k"].isna()] if k is None else s[s["k"] == k]


def stat(summary, method, metric, regime="all", k=None, scale=1.0, **fmt) -> Stat | str:
    """One summary row as a cell; NOT_RUN when the method has no row, "no {regime} prompts"
    when it ran and the regime is empty."""
    r = _rows(summary, method, metric, regime, k)
    if r.empty:
        return absent(summary, method, regime)
    r = r.iloc[0]
    return Stat(r["mean"] * scale, r["sd"] * scale, **fmt)


def per_seed(metrics, method, metric, regime="all", k=None) -> pd.Series:
    m = metrics[(metrics["method"] == method) & (metrics["metric"] == metric) & (metrics["regime"] == regime)]
    m = m[m["k"].isna()] if k is None else m[m["k"] == k]
    return m.set_index("seed")["value"].sort_index()


def counts_text(values) -> str:
    """Prompt counts of a method's seeds as "total (per seed, in seed order)"; one seed: the
    count. Never a rounded mean: three seeds losing 1, 2 and 1 prompts read "4 (1, 2, 1)"."""
    v = [int(round(x)) for x in values if np.isfinite(x)]
    if not v:
        return "n/a"
    return str(v[0]) if len(v) == 1 else f"{sum(v)} ({', '.join(map(str, v))})"


def count_cell(metrics, method, metric, regime="all") -> str:
    """A count metric of one method as `counts_text`; without a row, why (`absent`)."""
    vals = per_seed(metrics, method, metric, regime)
    return counts_text(vals.to_numpy(float)) if len(vals) else absent(metrics, method, regime)


def total_text(row) -> str:
    """The total over seeds of a count metric from its summary row (mean x seeds)."""
    return str(int(round(row["mean"] * row["n_seeds"]))) if np.isfinite(row["mean"]) else "n/a"


COUNT_NOTE = "Prompt counts: total over seeds (each seed's count in seed order)."


def _missing_note(methods, present, view) -> list[str]:
    missing = [view.label(m) for m in dict.fromkeys(methods) if m and m not in present]
    return [f"Not run: {', '.join(missing)}."] if missing else []


def _kcol(k: int) -> str:
    return f"p@{k}"


def _data(summary, methods, metrics, regimes=("all",), extra=None) -> pd.DataFrame:
    d = summary[summary["method"].isin(methods) & summary["metric"].isin(metrics) & summary["regime"].isin(regimes)]
    d = d.copy()
    for key, value in (extra or {}).items():
        d.insert(0, key, value)
    return d.reset_index(drop=True)


# ----------------------------------------------------------------------------- tables

def benchmark_curves(benches: dict, view: View) -> Table:
    """Full benchmark pass@k curves: base fixed, trained seed mean +- SD (tab:benchmark_curves)."""
    ks = max((d.ks for d in benches.values()), key=len, default=[])
    rows, data, present = [], [], set()
    for bench, d in benches.items():
        present |= set(d.summary["method"])
        for i, m in enumerate([BASE] + view.main):
            rows.append([view.bench_label(bench) if i == 0 else "", view.label(m)]
                        + [stat(d.summary, m, "passk", k=k, scale=100) if k in d.ks else "n/a" for k in ks])
        data.append(_data(d.summary, [BASE] + view.main, ["passk"], extra={"benchmark": bench}))
    return Table("benchmark_curves", "Full benchmark pass@k curves (seed mean ± sample SD; base fixed)",
                 ["Benchmark", "Method"] + [_kcol(k) for k in ks], rows, _concat(data),
                 _missing_note(view.main, present, view))


def _concat(frames) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def mechanism_summary(bench, diag, view: View) -> Table:
    """Benchmark p@1/p@K beside the boundary signature (tab:mechanism_summary)."""
    k_hi = max(diag.ks)
    bench_name = view.bench_label(view.headline) if view.headline else "Benchmark"
    cols = ["Method", f"{bench_name} p@1", f"{bench_name} p@{max(bench.ks)}", f"Boundary Δp@{k_hi}",
            "Boundary lost ↓", "Boundary entropy ↑"]
    rows = []
    for m in [BASE] + view.main:
        row = [view.label(m), stat(bench.summary, m, "passk", k=1, scale=100),
               stat(bench.summary, m, "passk", k=max(bench.ks), scale=100)]
        if m == BASE:
            row += ["--", "--", Stat(100.0, digits=0, suffix="%")]
        else:
            row += [stat(diag.summary, m, "delta_passk", "Boundary", k_hi, 100, digits=0, sign=True),
                    count_cell(diag.metrics, m, "lost", "Boundary"),
                    stat(diag.summary, m, "entropy_retained", "Boundary", scale=100, digits=0, suffix="%")]
        rows.append(row)
    data = _concat([_data(bench.summary, [BASE] + view.main, ["passk"], extra={"split": view.headline or "benchmark"}),
                    _data(diag.summary, view.main, ["delta_passk", "lost", "entropy_retained"], ("Boundary",),
                          extra={"split": "diagnostic"})])
    present = set(bench.summary["method"]) & set(diag.summary["method"])
    return Table("mechanism_summary", "Cross-seed mechanism summary (seed mean ± seed SD)", cols, rows, data,
                 _missing_note(view.main, present, view) + [COUNT_NOTE])


def headline_intervals(bench, diag, view: View) -> Table:
    """Seed-level 95% Student-t intervals of the headline contrasts (tab:headline_intervals)."""
    a, b, k_hi = view.method, view.baseline, max(diag.ks)
    rows, data = [], []

    def add(quantity, s: pd.DataFrame, scale, digits, sign=True, missing=NOT_RUN):
        if s is None or s.empty or not np.isfinite(s.iloc[0]["mean"]):
            rows.append([quantity, missing, missing, missing])
            return
        r = s.iloc[0]
        f = "+" if sign else ""
        ci = (f"[{r['ci_low'] * scale:{f}.{digits}f}, {r['ci_high'] * scale:{f}.{digits}f}]"
              if np.isfinite(r["ci_low"]) else "n/a (one seed)")
        rows.append([quantity, Stat(r["mean"] * scale, digits=digits, sign=sign),
                     f"{r['sd'] * scale:.{digits}f}" if np.isfinite(r["sd"]) else "n/a", ci])
        data.append(s.assign(quantity=quantity))

    gains = bench.pairs if bench.pairs is not None else pd.DataFrame(columns=["a", "b", "metric", "regime", "k"])
    for k in (1, max(bench.ks)):
        g = gains[(gains["a"] == a) & (gains["b"] == b) & (gains["metric"] == "passk")
                  & (gains["regime"] == "all") & (gains["k"] == k)]
        add(f"{view.label(a)}−{view.label(b)} gain at p@{k}", g, 100, 2)
    for m in (b, a):
        add(f"{view.label(m)} boundary Δp@{k_hi}", _rows(diag.summary, m, "delta_passk", "Boundary", k_hi), 100, 1,
            missing=absent(diag.summary, m, "Boundary"))
    for m in (b, a):  # a seed's mean to two decimals; the totals in the note
        add(f"{view.label(m)} boundary lost prompts", _rows(diag.summary, m, "lost", "Boundary"), 1, 2, False,
            missing=absent(diag.summary, m, "Boundary"))
    present = set(bench.summary["method"]) & set(diag.summary["method"])
    totals = "; ".join(f"{view.label(m)} {count_cell(diag.metrics, m, 'lost', 'Boundary')}" for m in (b, a))
    return Table("headline_intervals", "Seed-level two-sided 95% Student-t intervals (df = seeds − 1)",
                 ["Quantity", "Mean", "Seed SD", "95% CI"], rows, _concat(data),
                 _missing_note([b, a], present, view)
                 + [f"Boundary lost prompts, total over seeds (per seed): {totals}."])


def controls(diag, view: View) -> Table:
    """Matched controls with their exact settings, on the diagnostic split (tab:control_hparams)."""
    k_hi = max(diag.ks)
    listed = {e["method"] for e in view.controls}  # a config may list the two itself, with settings
    baseline = {"method": view.baseline, "label": f"{view.label(view.baseline)} baseline", "setting": ""}
    method = {"method": view.method, "label": view.label(view.method), "setting": ""}
    entries = [e for e in (baseline, *view.controls, method)
               if e in view.controls or e["method"] not in listed]
    rows = []
    for e in entries:
        m = e["method"]
        rows.append([e.get("label", view.label(m)), e.get("setting", ""),
                     stat(diag.summary, m, "passk", k=1, scale=100), stat(diag.summary, m, "passk", k=k_hi, scale=100),
                     stat(diag.summary, m, "delta_passk", "Boundary", k_hi, 100, digits=0, sign=True)])
    methods = [e["method"] for e in entries]
    data = _concat([_data(diag.summary, methods, ["passk"]),
                    _data(diag.summary, methods, ["delta_passk"], ("Boundary",))])
    why = [] if view.controls else [
        "No controls in this config: only the baseline and the method are shown (a method with a "
        "`setting:` is a control row; config/paper.yaml runs the paper's)."]
    return Table("controls", "Diagnostic controls and exact hyperparameters (diagnostic split)",
                 ["Control", "Exact setting", "p@1", f"p@{k_hi}", f"Boundary Δp@{k_hi}"], rows, data,
                 why + _missing_note(methods, set(diag.summary["method"]), view))


def required_successes(G0: int, tau: float) -> int:
    """Frozen-base successes s needed to sharpen under the gate s / G0 >= tau."""
    return max(1, math.ceil(tau * G0 - 1e-9))


def gate_ablation(diag, mask_metrics: pd.DataFrame | None, view: View) -> Table:
    """Gate ablations with effective thresholds (tab:gate_ablation_main).

    G0 and the required successes come from the mask itself where it was built (the gate as
    it acted), else from the settings' G0 and tau; a disagreement is noted under the table."""
    k_hi = max(diag.ks)
    caption = "Gate ablations with effective thresholds (diagnostic split)"
    if not view.ablations:
        return unfilled("gate_ablation", caption, "No gate in this config: a row is a method anchored on a gate or "
                                                  "soft mask (config/paper.yaml runs the paper's ablations).")
    rows, data = [], []
    notes = ([] if any(e["method"] != view.method for e in view.ablations) else [
        "Only the method's own gate in this config: the other rows are methods anchored on other gate or "
        "soft masks (config/paper.yaml runs the paper's ablations)."])
    for e in view.ablations:
        G0, tau = int(e["G0"]), float(e["tau"])
        req = required_successes(G0, tau)
        pooled = {}
        if mask_metrics is not None:
            mm = mask_metrics[(mask_metrics["mask"] == e.get("mask")) & mask_metrics["epoch"].isna()]
            pooled = dict(zip(mm["metric"], mm["value"]))
        protected = (Stat(100 * pooled["protected_fraction"], digits=0, suffix="%")
                     if "protected_fraction" in pooled else NOT_RUN)
        if e.get("kind") == "soft":  # a weight from a lower confidence bound, not a success count
            rule, req_cell, eff_cell, extra = f"soft (LCB, τ={tau:g})", "–", "–", {"soft": True}
        else:
            seen_G0, seen_req = pooled.get("G0", np.nan), pooled.get("required_successes", np.nan)
            if np.isfinite(seen_G0) and np.isfinite(seen_req) and (int(seen_G0), int(seen_req)) != (G0, req):
                notes.append(f"{e.get('mask')}: settings give G0={G0}, {req} success(es); the mask shows "
                             f"G0={int(seen_G0)}, {int(seen_req)}; the mask is printed.")
                G0, req = int(seen_G0), int(seen_req)
            rule = "≥1 success" if req == 1 else f"τ={tau:g}"
            req_cell, eff_cell, extra = str(req), f"{req / G0:.4g}", {"required_successes": req,
                                                                    "effective_w": req / G0}
        rows.append([str(G0), rule, req_cell, eff_cell, protected,
                     stat(diag.summary, e["method"], "passk", k=1, scale=100),
                     stat(diag.summary, e["method"], "passk", k=k_hi, scale=100)])
        data.append(_data(diag.summary, [e["method"]], ["passk"]).assign(
            G0=G0, tau=tau, **extra,
            protected=protected.mean / 100 if isinstance(protected, Stat) else np.nan))
    methods = [e["method"] for e in view.ablations]
    return Table("gate_ablation", caption,
                 ["G0", "Rule", "Req. succ.", "Eff. ŵ", "Protected", "p@1", f"p@{k_hi}"], rows, _concat(data),
                 _missing_note(methods, set(diag.summary["method"]), view) + notes)


def gate_resolution(view: View, masses=(0.002, 0.01, 0.05, 0.10)) -> Table:
    """Resolution of the one-success gate (tab:gate): exact binomial probabilities."""
    detect = [1 - (1 - w) ** view.gate_G0 for w in masses]
    miss = [(1 - w) ** view.group_size for w in masses]
    rows = [["Gate detects at least one success"] + [Stat(100 * p, suffix="%") for p in detect],
            ["GRPO group has no positive rollout"] + [Stat(100 * p, suffix="%") for p in miss]]
    data = pd.DataFrame({"w_star": masses, "gate_detects": detect, "group_no_positive": miss,
                         "G0": view.gate_G0, "G": view.group_size})
    return Table("gate_resolution", f"Resolution of the one-success gate (G0={view.gate_G0}, G={view.group_size})",
                 ["Correct-mode mass w*"] + [f"{w:g}" for w in masses], rows, data)


def seed_curves(bench_name: str, d, view: View) -> Table:
    """Seed-resolved pass@k table of one benchmark (tab:appendix_omni_seeds / math_seeds)."""
    rows = [[view.label(BASE), "fixed"] + [stat(d.summary, BASE, "passk", k=k, scale=100) for k in d.ks]]
    for m in view.main:
        if m not in set(d.summary["method"]):
            rows.append([view.label(m), NOT_RUN] + [NOT_RUN] * len(d.ks))
            continue
        for s in sorted(d.metrics.loc[d.metrics["method"] == m, "seed"].unique()):
            rows.append([view.label(m), str(s)] + [Stat(100 * per_seed(d.metrics, m, "passk", k=k).get(s, np.nan))
                                                    for k in d.ks])
        rows.append([view.label(m), "mean"] + [stat(d.summary, m, "passk", k=k, scale=100) for k in d.ks])
    data = d.metrics[d.metrics["method"].isin([BASE] + view.main) & (d.metrics["metric"] == "passk")
                     & (d.metrics["regime"] == "all")]
    return Table(f"seeds_{bench_name}", f"Seed-resolved {view.bench_label(bench_name)} pass@k results",
                 ["Method", "Seed", *[_kcol(k) for k in d.ks]], rows, data.reset_index(drop=True),
                 _missing_note(view.main, set(d.summary["method"]), view))


def _seed_matrix(name, caption, diag, view, items) -> Table:
    """Metric rows x (per-seed columns, mean column) for each main method (appendix tables)."""
    methods = [m for m in view.main if m in set(diag.metrics["method"])]
    seeds = {m: sorted(diag.metrics.loc[diag.metrics["method"] == m, "seed"].unique()) for m in methods}
    cols = ["Metric"]
    for m in methods:
        cols += [f"{view.label(m)} s{s}" for s in seeds[m]] + [f"{view.label(m)} mean"]
    rows, data = [], []
    for label, metric, regime, k, scale, fmt in items:
        row = [label]
        for m in methods:
            vals = per_seed(diag.metrics, m, metric, regime, k)
            row += [Stat(vals.get(s, np.nan) * scale, **fmt) for s in seeds[m]]
            if metric in COUNT_METRICS:  # a count's summary is its total, never a rounded mean
                row.append(f"total {sum(int(round(v)) for v in vals)}" if len(vals)
                           else absent(diag.metrics, m, regime))
            else:
                row.append(stat(diag.summary, m, metric, regime, k, scale, **fmt))
        rows.append(row)
        data.append(_data(diag.summary, methods, [metric], (regime,)).pipe(
            lambda d: d[d["k"].isna()] if k is None else d[d["k"] == k]).assign(row=label))
    return Table(name, caption, cols, rows, _concat(data), _missing_note(view.main, set(diag.metrics["method"]), view))


COUNT_METRICS = ("lost", "gained", "solved", "base_solved", "lost_significant")


def diag_seeds(diag, view: View) -> Table:
    k_hi = max(diag.ks)
    items = [("All p@1", "passk", "all", 1, 100, {}),
             (f"All p@{k_hi}", "passk", "all", k_hi, 100, {}),
             ("All base-solved → lost", "lost", "all", None, 1, {"digits": 0}),
             ("Out-of-reach positive unique", "unique_positives", "OutOfReach", None, 1, {})]
    return _seed_matrix("diag_seeds", "Seed-resolved aggregate diagnostic results", diag, view, items)


def boundary_seeds(diag, view: View) -> Table:
    k_hi = max(diag.ks)
    items = [("Base-solved → lost", "lost", "Boundary", None, 1, {"digits": 0}),
             (f"Δp@{k_hi}", "delta_passk", "Boundary", k_hi, 100, {"digits": 0, "sign": True}),
             ("Entropy retained", "entropy_retained", "Boundary", None, 100, {"digits": 0, "suffix": "%"}),
             ("Positive unique", "unique_positives", "Boundary", None, 1, {})]
    return _seed_matrix("boundary_seeds", "Seed-resolved boundary diagnostics", diag, view, items)


def _answer_text(answer, width: int = 24) -> str:
    """An answer as a table shows it: shortened past `width` characters (the CSV keeps it whole)."""
    if answer is None:
        return "none answered"
    return answer if len(answer) <= width else answer[:width - 3] + "..."


def _share_text(share: float) -> str:
    """A share of prompts in whole percent; one prompt in hundreds reads <1%, not 0%."""
    return "<1%" if 0 < share < 0.01 else f"{100 * share:.0f}%"


def answer_concentration(diag, view: View) -> Table:
    """How much of each method's sampling mass sits on one answer (diagnostic split): the seed
    mean ± SD of the mean modal share over prompts, overall and per regime, and per seed the
    answer that is modal on the most prompts, with the share of prompts it is modal on. A
    policy collapsed onto one constant shows 100% in both, where per-token entropy need not."""
    regimes = ["all"] + [r for r in REGIMES if r in set(diag.summary["regime"])]
    present = list(dict.fromkeys(diag.summary["method"]))
    methods = [BASE] + [m for m in dict.fromkeys(view.main + present) if m != BASE]
    top = diag.top_answers
    width = len(regimes) + 2
    rows, data, unmeasured, notes = [], [], [], []
    for m in methods:
        label = view.label(m)
        if m not in present:
            rows.append([label, NOT_RUN] + [NOT_RUN] * width)
            continue
        shares = per_seed(diag.metrics, m, "modal_share")
        runs = top[top["method"] == m].sort_values("seed")
        by_regime = diag.metrics[(diag.metrics["method"] == m) & (diag.metrics["metric"] == "modal_share")].pivot(
            index="seed", columns="regime", values="value")[regimes].add_prefix("modal_share_").reset_index()
        data.append(runs.merge(by_regime, on="seed").rename(columns={
            "answer": "top_modal_answer", "count": "top_modal_prompts", "share": "top_modal_share"}))
        seeds = "fixed" if m == BASE else str(len(shares))
        if shares.isna().all():
            unmeasured.append(label)
            rows.append([label, seeds] + ["n/a"] * width)
            continue
        if shares.isna().any():
            notes.append(f"{label}: seed(s) {', '.join(map(str, shares.index[shares.isna()]))} carry no "
                         f"modal_share; its cells are over the other seeds.")
        runs = runs[runs["share"].notna()]
        by_seed = "; ".join((f"s{r.seed}: " if m != BASE else "") + f"{_answer_text(r.answer)} ({_share_text(r.share)})"
                            for r in runs.itertuples()) or "n/a"  # shares without their answers
        sd = runs["share"].std(ddof=1) if len(runs) > 1 else np.nan
        rows.append([label, seeds] + [stat(diag.summary, m, "modal_share", r, scale=100, digits=0, suffix="%")
                                      for r in regimes]
                    + [by_seed, Stat(100 * runs["share"].mean(), 100 * sd, digits=1, suffix="%")])
    notes = ["Modal share: per prompt, the share of its n samples that give its most common non-empty "
             "extracted answer (0 when none answers), averaged over the prompts; seed mean ± SD. Top modal "
             "answer: per seed, the answer that is the modal answer of the most prompts, and the share of "
             "prompts it is modal on (a collapse onto one constant answer shows 100% in both)."] + notes
    if unmeasured:
        notes.append(f"n/a: the counts files of {', '.join(unmeasured)} carry no modal_share (written before it "
                     f"was measured, or from samples without extracted answers).")
    return Table("answer_concentration", "Answer concentration on the diagnostic split (modal answer per prompt)",
                 ["Method", "Seeds"] + [f"Modal share ({r})" for r in regimes]
                 + ["Top modal answer (prompts)", "Prompts with it"], rows, _concat(data),
                 _missing_note(view.main, set(present), view) + notes)


def regime_counts(diag, view: View) -> Table:
    """Prompts per regime with base pass@k (calibration labels; evaluation counts), and where
    the labels carry their reliability (analysis/label_reliability.py) the mean P(label) and the
    labels a second calibration would be expected to change."""
    k_hi = max(diag.ks)
    reg = diag.regimes
    known = {"label_prob", "flip_prob"} <= set(reg.columns)
    rows = []
    for r in list(REGIMES) + ["all"]:
        ids = reg if r == "all" else reg[reg["regime"] == r]
        rows.append([r, str(len(ids)), Stat(100 * len(ids) / max(len(reg), 1), suffix="%"),
                     f"{ids['p_base'].min():.3g}–{ids['p_base'].max():.3g}" if len(ids) else "--"]
                    + ([stat(diag.summary, BASE, "passk", r, 1, 100), stat(diag.summary, BASE, "passk", r, k_hi, 100)]
                       if len(ids) else ["--", "--"])
                    + ([Stat(ids["label_prob"].mean(), digits=2) if len(ids) else "--",
                        Stat(ids["flip_prob"].sum(), digits=1) if len(ids) else "--"] if known else []))
    th = diag.thresholds
    notes = [f"Thresholds: easy {th.easy:g}, boundary {th.boundary:g}, coverage_k {th.coverage_k}, "
             f"coverage_min {th.coverage_min:g}."] if th else []
    notes += [line + "." for line in diag.regime_notes or []]
    if known:
        notes += [line + "." for line in reliability_lines(reg)]
        notes.append("P(label): the label's posterior probability; expected changes: the sum over the regime's "
                     "prompts of P(a fresh calibration of the same n labels the prompt otherwise), exact under "
                     "the posterior predictive.")
    spec = dict(prompts=("prompt_id", "size"), p_min=("p_base", "min"), p_max=("p_base", "max"))
    if known:
        spec.update(label_prob=("label_prob", "mean"), expected_changes=("flip_prob", "sum"))
    data = reg.groupby("regime").agg(**spec).reset_index()
    return Table("regime_counts", f"Regimes of the diagnostic split ({diag.regime_source})",
                 ["Regime", "Prompts", "Share", "p_base range", "Base p@1", f"Base p@{k_hi}"]
                 + (["Mean P(label)", "Expected changes"] if known else []), rows, data, notes)


def boundary_robust(diag, view: View) -> Table:
    """The Boundary endpoints on every Boundary prompt and on the robust ones alone (at least
    ROBUST_SUCCESSES calibration successes): the two claim different things."""
    name, caption = "boundary_robust", "Boundary endpoints: all Boundary prompts and the robust ones (seed mean ± SD; Δ in points)"
    reg = diag.regimes
    if reg is None or "c" not in reg:
        return unfilled(name, caption, "The regime labels carry no calibration counts.")
    k_hi = max(diag.ks)
    strong = robust(reg)
    boundary = reg["regime"] == "Boundary"
    cols = ["Prompts", "Method", f"Δp@{k_hi}", "Lost"]
    robust_summary = diag.robust if diag.robust is not None else diag.summary.iloc[:0]
    robust_metrics = diag.group_metrics.get("robust", diag.metrics.iloc[:0])
    rows, data = [], []
    for what, count, summary, metrics in (("all", int(boundary.sum()), diag.summary, diag.metrics),
                                          (f"robust (c ≥ {ROBUST_SUCCESSES})", int(strong.sum()), robust_summary,
                                           robust_metrics)):
        for m in view.main:
            rows.append([f"{what}: {count}", view.label(m),
                         stat(summary, m, "delta_passk", "Boundary", k_hi, 100, digits=1, sign=True)
                         if count else no_prompts("Boundary"),
                         count_cell(metrics, m, "lost", "Boundary") if count else no_prompts("Boundary")])
        data.append(_data(summary, view.main, ["delta_passk", "lost"], ("Boundary",)).assign(prompts=what))
    notes = [f"All: every base-recoverable prompt, with labels as noisy as one calibration; robust: the Boundary "
             f"labels a second calibration keeps (at least {ROBUST_SUCCESSES} successes in the calibration), a "
             "narrower population: the two claim different things.", COUNT_NOTE]
    if "flip_prob" in reg:
        notes.insert(1, f"Expected label changes in a second calibration: {reg.loc[boundary, 'flip_prob'].sum():.1f} "
                        f"of the {int(boundary.sum())} Boundary labels, {reg.loc[strong, 'flip_prob'].sum():.1f} of "
                        f"the {int(strong.sum())} robust ones.")
    return Table(name, caption, cols, rows, _concat(data), _missing_note(view.main, set(diag.summary["method"]), view)
                 + notes)


def regime_diagnostics(diag, view: View) -> Table:
    """Per-regime diagnostics of each main method (seed mean ± SD): where pass@k moved."""
    k_hi = max(diag.ks)
    items = [("delta_passk", 1, 100, {"sign": True}), ("delta_passk", k_hi, 100, {"sign": True}),
             ("lost", None, 1, {"digits": 0}), ("gained", None, 1, {"digits": 0}),
             ("entropy_retained", None, 100, {"digits": 0, "suffix": "%"}), ("unique_positives", None, 1, {})]
    regimes = ["all"] + [r for r in REGIMES if r in set(diag.summary["regime"])]
    rows = []
    for m in view.main:
        for r in regimes:
            rows.append([view.label(m), r] + [count_cell(diag.metrics, m, metric, r) if metric in COUNT_METRICS
                                              else stat(diag.summary, m, metric, r, k, scale, **fmt)
                                              for metric, k, scale, fmt in items])
    data = _data(diag.summary, view.main, [i[0] for i in items], regimes)
    return Table("regime_diagnostics", "Per-regime diagnostics (seed mean ± SD; Δ in points)",
                 ["Method", "Regime", "Δp@1", f"Δp@{k_hi}", "Lost", "Gained", "Entropy retained",
                  "Positive unique"], rows, data,
                 _missing_note(view.main, set(diag.summary["method"]), view) + [COUNT_NOTE])


def transitions_table(diag, view: View) -> Table:
    """Seed-mean four-cell transitions per regime (base solved/unsolved x trained)."""
    t = diag.transitions
    methods = [m for m in view.main if m in set(t["method"])]
    cells = [(True, True, "solved→solved"), (True, False, "solved→lost"),
             (False, True, "unsolved→gained"), (False, False, "unsolved→unsolved")]
    rows = []
    for m in methods:
        for r in ["all"] + [x for x in REGIMES if x in set(t["regime"])]:
            sub = t[(t["method"] == m) & (t["regime"] == r)]
            row = [view.label(m), r]
            for bs, ts, _ in cells:
                v = sub[(sub["base_solved"] == bs) & (sub["trained_solved"] == ts)].sort_values("seed")["count"]
                row.append(counts_text(v.to_numpy(float)))
            rows.append(row)
    return Table("transitions", "Base/trained transitions (prompt counts: total over seeds, per seed)",
                 ["Method", "Regime"] + [c for _, _, c in cells], rows,
                 t[t["method"].isin(methods)].reset_index(drop=True),
                 _missing_note(view.main, set(t["method"]), view) + [COUNT_NOTE])


def sensitivity_table(diag, view: View) -> Table:
    """Boundary findings under nearby regime cutoffs (variant 0 = the configured cutoffs)."""
    s = diag.sensitivity
    methods = [m for m in view.main if m in set(s["method"])]
    cols = ["easy", "boundary", "cov. k", "cov. min", "Boundary prompts"]
    for m in methods:
        cols += [f"{view.label(m)} Δcov", f"{view.label(m)} lost (total)"]
    rows = []
    for _, g in s.groupby("variant", sort=True):
        r0 = g.iloc[0]
        row = [f"{r0['easy']:g}", f"{r0['boundary']:g}", str(int(r0["coverage_k"])), f"{r0['coverage_min']:g}",
               str(int(r0["n_boundary"]))]
        for m in methods:
            for metric, scale, fmt in (("delta_cov", 100, {"digits": 1, "sign": True}), ("lost", 1, None)):
                v = g[(g["method"] == m) & (g["metric"] == metric)]
                row.append("n/a" if not len(v) else total_text(v.iloc[0]) if fmt is None else
                           Stat(v["mean"].iloc[0] * scale, v["sd"].iloc[0] * scale, **fmt))
        rows.append(row)
    return Table("sensitivity", "Cutoff sensitivity of the boundary findings (Δcov in points)", cols, rows,
                 s[s["method"].isin(methods)].reset_index(drop=True), _missing_note(view.main, set(s["method"]), view))


def _group_table(s: pd.DataFrame, diag, view: View, group: str, order, name: str, caption: str,
                 header: str, extra: tuple[str, dict] | None = None) -> Table:
    """Δp@1, Δp@K and lost prompts (total over seeds, and each seed's) per method, one row per
    value of `group` in `order` and one for all prompts; `extra` is one more (header, {value:
    text}) column."""
    k_hi = max(diag.ks)
    methods = [m for m in view.main if m in set(s["method"])]
    seeds = diag.group_metrics[group]
    lost = seeds[seeds["metric"] == "lost"].set_index(["method", group, "seed"])["value"]
    cols = [header, "Prompts"] + ([extra[0]] if extra else [])
    for m in methods:
        cols += [f"{view.label(m)} Δp@1", f"{view.label(m)} Δp@{k_hi}", f"{view.label(m)} lost"]
    rows = []
    for value in [o for o in order if o in set(s[group])] + ["all"]:
        n = s[(s["method"] == BASE) & (s["metric"] == "n_prompts") & (s[group] == value)]["mean"]
        row = [value, str(int(n.iloc[0])) if len(n) else "0"] + ([extra[1].get(value, "0")] if extra else [])
        for m in methods:
            sub = s[(s["method"] == m) & (s[group] == value)]
            for k in (1, k_hi):
                v = sub[(sub["metric"] == "delta_passk") & (sub["k"] == k)]
                row.append(Stat(100 * v["mean"].iloc[0], 100 * v["sd"].iloc[0], sign=True) if len(v) else "n/a")
            per_seed = lost[m].get(value)
            row.append("n/a" if per_seed is None else counts_text(per_seed.sort_index().to_numpy(float)))
        rows.append(row)
    return Table(name, caption, cols, rows, s[s["method"].isin([BASE] + methods)].reset_index(drop=True),
                 _missing_note(view.main, set(s["method"]), view) + [COUNT_NOTE])


def strata_table(diag, view: View, order) -> Table:
    """Continuous stratification by p_base: Δp@1 and Δp@K per stratum."""
    return _group_table(diag.strata, diag, view, "stratum", order, "strata",
                        "pass@k change by base success rate p_base (points)", "p_base stratum")


SKILLS_CAPTION = "Which skills lose coverage: pass@k change by skill (points)"


def skills_table(diag, view: View) -> Table:
    """Δp@1, Δp@K and lost prompts per skill label (a subject, a level) with each skill's
    Boundary prompts: where the coverage a method lost sits."""
    if diag.skills is None:
        return unfilled("skills", SKILLS_CAPTION, "No skill labels: set data.diagnostic.skill_field "
                                                  "(boundary diagnose: --skills).")
    base = diag.frame[diag.frame["method"] == BASE]
    boundary = base[base["regime"] == "Boundary"].groupby("skill").size()
    order = sorted(set(base["skill"]))
    counts = {value: str(int(boundary.get(value, 0))) for value in order} | {"all": str(int(boundary.sum()))}
    return _group_table(diag.skills, diag, view, "skill", order, "skills", SKILLS_CAPTION, "Skill",
                        ("Boundary", counts))


def ranked_methods(bench, diag, view: View) -> pd.DataFrame:
    """Every ranked method's benchmark pass@1 and boundary Delta pass@K (seed mean, SD and
    Student-t interval from the seed summary), with its rank by each (1 = highest), sorted by
    the boundary rank. Methods not evaluated are left out (the table notes them); where the
    split has no Boundary prompt, the boundary columns are NaN and unranked."""
    k_hi = max(diag.ks)
    rows = []
    for m in view.ranked or [m for m in dict.fromkeys(diag.summary["method"]) if m != BASE]:
        p1, d = _rows(bench.summary, m, "passk", k=1), _rows(diag.summary, m, "delta_passk", "Boundary", k_hi)
        if p1.empty or (d.empty and absent(diag.summary, m, "Boundary") == NOT_RUN):
            continue
        p1 = p1.iloc[0]
        d = d.iloc[0] if len(d) else dict.fromkeys(("mean", "sd", "ci_low", "ci_high"), np.nan)
        rows.append({"method": m, "label": view.label(m), "seeds": int(p1["n_seeds"]),
                     **{f"passk1_{c}": p1[c] for c in ("mean", "sd", "ci_low", "ci_high")},
                     **{f"boundary_delta_{c}": d[c] for c in ("mean", "sd", "ci_low", "ci_high")}})
    df = pd.DataFrame(rows, columns=["method", "label", "seeds"] + [f"{q}_{c}" for q in ("passk1", "boundary_delta")
                                                                     for c in ("mean", "sd", "ci_low", "ci_high")])
    df["rank_passk1"] = df["passk1_mean"].rank(ascending=False, method="min").astype("Int64")
    df["rank_boundary"] = df["boundary_delta_mean"].rank(ascending=False, method="min").astype("Int64")
    return df.sort_values(["rank_boundary", "rank_passk1"], ignore_index=True)


def methods_ranking(bench, diag, view: View, bench_name: str) -> Table:
    """Every method ranked by `bench_name` pass@1 and by boundary Delta pass@K (points): seed
    mean +- sample SD, the seed-level Student-t interval (df = seeds - 1), the rank by each."""
    k_hi = max(diag.ks)
    df = ranked_methods(bench, diag, view)

    def ci(lo, hi, sign):
        f = "+" if sign else ""
        return f"[{100 * lo:{f}.1f}, {100 * hi:{f}.1f}]" if np.isfinite(lo) else "n/a (one seed)"

    base = _rows(bench.summary, BASE, "passk", k=1)
    rows = [["Base", "fixed", Stat(100 * base.iloc[0]["mean"]) if len(base) else NOT_RUN, "", "", "0", "", ""]]
    for r in df.itertuples():
        boundary = ([Stat(100 * r.boundary_delta_mean, 100 * r.boundary_delta_sd, sign=True),
                     ci(r.boundary_delta_ci_low, r.boundary_delta_ci_high, True), str(r.rank_boundary)]
                    if np.isfinite(r.boundary_delta_mean) else [no_prompts("Boundary"), "", ""])
        rows.append([r.label, str(r.seeds), Stat(100 * r.passk1_mean, 100 * r.passk1_sd),
                     ci(r.passk1_ci_low, r.passk1_ci_high, False), str(r.rank_passk1)] + boundary)
    notes = [f"Sorted by boundary rank. p@1 on {bench_name}; Δp@{k_hi} against the frozen base on the "
             f"diagnostic split's Boundary prompts. Intervals: seed-level 95% Student-t."]
    ranked = view.ranked or list(df["method"])
    if len(df) and df["boundary_delta_mean"].isna().all():
        notes.insert(0, f"{no_prompts('Boundary').capitalize()} on the diagnostic split, so no boundary rank "
                        "(regime_counts says why).")
    return Table("methods_ranking", f"Methods ranked by {bench_name} pass@1 and boundary Δpass@{k_hi} (points)",
                 ["Method", "Seeds", f"{bench_name} p@1", "95% CI", "Rank", f"Boundary Δp@{k_hi}", "95% CI", "Rank"],
                 rows, df, _missing_note(ranked, set(df["method"]), view) + notes)


SENSITIVITY_DROPS = (0, 1, 2, 4, 8)


def detectable_loss(diag, view: View, sims: int = 100, resamples: int = 500) -> Table:
    """The loss this study's test can see, in place of a positive control: a synthetic policy
    equal to the base but for D Boundary prompts that never succeed, simulated at the study's
    N (its Boundary prompts' calibrated p_base, seeds, base draws and n) through the same
    nested prompt bootstrap (power.drop_sensitivity)."""
    from boundary.analysis.power import drop_sensitivity

    cols = ["Dropped prompts", f"Δp@{max(diag.ks)} (points)", "Detected (interval < 0)", "Lost (total over seeds)"]
    name, caption = "detectable_loss", "Detectable loss: a synthetic policy that drops D Boundary prompts"
    reg = diag.regimes
    trained = diag.frame[diag.frame["method"] != BASE]
    p = reg.loc[reg["regime"] == "Boundary", "p_base"].to_numpy(float) if reg is not None else np.array([])
    if trained.empty or len(p) < 2:
        note = "No trained run, or fewer than 2 Boundary prompts: nothing to simulate."
        return Table(name, caption, cols, [], pd.DataFrame(), [note])
    methods = [m for m in view.main if m in set(trained["method"])] or list(dict.fromkeys(trained["method"]))
    seeds = max(trained.loc[trained["method"] == m, "seed"].nunique() for m in methods)
    n_eval, k = int(horizon(trained).min()), max(diag.ks)  # sequential: at k = cap its indicator is the full run's
    df = drop_sensitivity(p, seeds=seeds, n_eval=n_eval, base_draws=diag.base_draws, k=k,
                          drops=SENSITIVITY_DROPS, sims=sims, resamples=resamples, level=diag.level)
    rows = [[str(r.dropped), Stat(100 * r.delta, sign=True), Stat(100 * r.detected, digits=0, suffix="%"),
             Stat(r.lost, digits=1)] for r in df.itertuples()]
    notes = [f"{len(p)} Boundary prompts, {seeds} seed(s), n = {n_eval}, base pooled over {diag.base_draws} draw(s), "
             f"{sims} simulated studies per row; success rates from the calibration. D = 0 is the false-alarm rate "
             f"and the lost count that sampling alone gives. Prompts independent: shared structure lowers the power."]
    if is_sequential(trained) and k < n_eval:
        notes.append(f"Sequential evaluation simulated as a full one: exact at k = {n_eval}; at k = {k} its estimate "
                     "is noisier, so the detection rates are upper bounds.")
    return Table(name, caption, cols, rows, df, notes)


def masks_table(mask_metrics: pd.DataFrame | None) -> Table:
    """Gate behaviour per mask, pooled over refresh epochs (the run card's mask statistics)."""
    cols = ["Mask", "Protected", "Anchor", "Drop", "Mean weight", "Flips", "Flip rate", "Prompts"]
    if mask_metrics is None or mask_metrics.empty:
        return unfilled("masks", "Protection masks", "No masks in this config: no method is anchored on a mask.")
    pooled = mask_metrics[mask_metrics["epoch"].isna()].pivot(index="mask", columns="metric", values="value")
    rows = []
    for name, r in pooled.iterrows():
        rows.append([name, Stat(100 * r["protected_fraction"], digits=0, suffix="%"),
                     Stat(100 * r["anchor_fraction"], digits=0, suffix="%"),
                     Stat(100 * r["drop_fraction"], digits=0, suffix="%"), Stat(r["mean_weight"], digits=2),
                     str(int(r["flips"])), Stat(100 * r["flip_rate"], digits=1, suffix="%"), str(int(r["n_prompts"]))])
    return Table("masks", "Protection masks, pooled over refresh epochs", cols, rows,
                 mask_metrics.reset_index(drop=True))


# ----------------------------------------------------------------------------- sets

def diagnostic_tables(diag, view: View, order) -> list[Table]:
    """Tables that need only the regime-labelled diagnostic split."""
    out = [regime_counts(diag, view), boundary_robust(diag, view), diag_seeds(diag, view), boundary_seeds(diag, view),
           regime_diagnostics(diag, view), transitions_table(diag, view), sensitivity_table(diag, view), strata_table(diag, view, order),
           skills_table(diag, view), answer_concentration(diag, view), detectable_loss(diag, view)]
    return out


def write_diagnose_tables(diag, view: View, folder: Path) -> list[Path]:
    """What `boundary diagnose` can show from one split: its curves plus the diagnostic tables."""
    from boundary.analysis.regimes import strata_order
    tables = [benchmark_curves({"counts": diag}, view), seed_curves("counts", diag, view)]
    tables += diagnostic_tables(diag, view, strata_order(diag.bins))
    if view.baseline and view.method:
        tables.append(headline_intervals(diag, diag, view))
    if diag.masks is not None:
        tables.append(masks_table(diag.masks))
    return [p for t in tables for p in t.write(folder)]
