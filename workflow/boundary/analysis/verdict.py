"""What each trained method did, in words and one small table: the one-line verdict per method
that leads a diagnosis page and a run's report.html, and the compact results table
`boundary diagnose` prints in the terminal.

A verdict reads the change of pass@1 (the smallest k) and of pass@K (the largest) over all
prompts, each with its interval (the paired prompt bootstrap, nested over seeds: the
attribution's total), and says which of four things the run shows:

    pass@k inversion     pass@1 up and pass@K down, both intervals clear of 0 (the paper's case)
    coverage shrinks     pass@K down, pass@1 not resolved up
    coverage grows       pass@K up
    no pass@K change resolved   the pass@K interval holds 0 (pass@1's direction said when resolved)

then the crossover k* (the smallest k where the trained curve falls below the base's) and the
prompts lost (solved by the base, none of n after training), with how many of them the Fisher
test resolves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from boundary.core.names import BASE

INVERSION, SHRINKS, GROWS, UNRESOLVED = ("pass@k inversion", "coverage shrinks", "coverage grows",
                                         "no pass@K change resolved")


@dataclass
class Delta:
    """A Δpass@k in points with its interval (NaN bounds where none could be drawn)."""

    k: int
    value: float
    low: float
    high: float

    @property
    def up(self) -> bool:
        return bool(np.isfinite(self.low) and self.low > 0)

    @property
    def down(self) -> bool:
        return bool(np.isfinite(self.high) and self.high < 0)

    def text(self, digits: int = 1) -> str:
        if not np.isfinite(self.value):
            return "n/a"
        value = f"{_signed(self.value, digits)}"
        if not (np.isfinite(self.low) and np.isfinite(self.high)):
            return value
        return f"{value} [{_signed(self.low, digits)}, {_signed(self.high, digits)}]"


def _signed(x: float, digits: int) -> str:
    # A value that rounds to 0 keeps its sign: an interval whose bound is -0.004 excludes 0, and
    # reads "−0.0", not "+0.0" (exactly 0 reads "+0.0").
    return f"{x + 0.0:+.{digits}f}".replace("-", "−")


@dataclass
class Outcome:
    """One method's results over its seeds (Δs in points)."""

    method: str
    label: str
    seeds: int
    first: Delta          # at the smallest k
    last: Delta           # at the largest k (K)
    kstar: float          # inf: never below the base up to K; NaN: unknown
    lost: int
    lost_significant: int
    level: float

    @property
    def finding(self) -> str:
        if self.last.down:
            return INVERSION if self.first.up else SHRINKS
        if self.last.up:
            return GROWS
        return UNRESOLVED

    def verdict(self) -> str:
        """The one line: what the run shows, then the numbers behind it."""
        k1, kK = self.first.k, self.last.k
        finding = self.finding
        if finding == INVERSION:
            head = f"pass@k inversion: pass@{k1} up, pass@{kK} down"
        elif finding == SHRINKS:
            head = f"coverage shrinks: pass@{kK} down"
        elif finding == GROWS:
            head = f"coverage grows: pass@{kK} up"
        else:
            side = " up" if self.first.up else " down" if self.first.down else ""
            head = (f"pass@{k1}{side}, no pass@{kK} change resolved" if side
                    else f"no change resolved at pass@{k1} or pass@{kK}")
        cross = ""
        if math.isinf(self.kstar):
            cross = f"; never below the base up to k = {kK}"
        elif math.isfinite(self.kstar):
            cross = f"; below the base from k* = {int(self.kstar)}"
        seeds = f"{self.seeds} seed{'s' if self.seeds != 1 else ''}"
        return (f"{self.label}: {head}. Δpass@{k1} {self.first.text()} pts, Δpass@{kK} {self.last.text()} pts "
                f"({100 * self.level:g}% intervals, {seeds}){cross}; {self.lost} prompt(s) lost, "
                f"{self.lost_significant} significant.")


def _delta(diag, method: str, k: int) -> Delta:
    """Δpass@k over all prompts: the attribution's total (interval nested over seeds), else the
    seed summary's mean and Student-t interval."""
    a = diag.attribution
    if a is not None:
        r = a[(a["method"] == method) & a["seed"].isna() & (a["quantity"] == "delta_passk") & (a["k"] == k)
              & (a["regime"] == "all") & (a["cell"] == "all")]
        if len(r):
            r = r.iloc[0]
            return Delta(k, 100 * r["value"], 100 * r["boot_low"], 100 * r["boot_high"])
    s = diag.summary
    r = s[(s["method"] == method) & (s["metric"] == "delta_passk") & (s["regime"] == "all") & (s["k"] == k)]
    if r.empty:
        return Delta(k, math.nan, math.nan, math.nan)
    r = r.iloc[0]
    return Delta(k, 100 * r["mean"], 100 * r["ci_low"], 100 * r["ci_high"])


def _total(metrics: pd.DataFrame, method: str, metric: str) -> int:
    m = metrics[(metrics["method"] == method) & (metrics["metric"] == metric) & (metrics["regime"] == "all")]
    return int(round(m["value"].sum())) if len(m) else 0


def outcomes(diag, view, methods=None) -> list[Outcome]:
    """Every trained method's outcome, in the view's order (`methods`: those to show)."""
    ran = [m for m in dict.fromkeys(diag.metrics["method"]) if m != BASE]
    methods = [m for m in (methods or view.main or ran) if m in ran] or ran
    k1, kK = min(diag.ks), max(diag.ks)
    out = []
    for m in methods:
        seeds = int(diag.metrics.loc[diag.metrics["method"] == m, "seed"].nunique())
        kstar = math.nan
        x = diag.crossover
        if x is not None:
            row = x[(x["method"] == m) & x["seed"].isna()]
            if len(row):
                kstar = float(row["kstar"].iloc[0])
        out.append(Outcome(m, view.label(m), seeds, _delta(diag, m, k1), _delta(diag, m, kK), kstar,
                           _total(diag.metrics, m, "lost"), _total(diag.metrics, m, "lost_significant"),
                           diag.level))
    return out


def results_table(rows: list[Outcome]) -> str:
    """The compact terminal table: per method Δpass@1, Δpass@K (points, interval), lost and
    significant prompts (totals over seeds), and the finding."""
    if not rows:
        return "no trained run"
    k1, kK = rows[0].first.k, rows[0].last.k
    header = ["method", "seeds", f"Δp@{k1} (pts)", f"Δp@{kK} (pts)", "lost", "significant", "finding"]
    body = [[o.label, str(o.seeds), o.first.text(), o.last.text(), str(o.lost), str(o.lost_significant), o.finding]
            for o in rows]
    widths = [max(len(r[i]) for r in [header] + body) for i in range(len(header))]
    right = {1, 4, 5}
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in [header] + body]
    return "\n".join(lines[:1] + ["  ".join("-" * w for w in widths)] + lines[1:])
