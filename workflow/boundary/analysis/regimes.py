"""Regime labels from the frozen-base calibration cache, p_base strata, cutoff sensitivity.

p_base(x) = c / n over the calibration samples of prompt x (independent of the evaluation
samples, so a boundary prompt is not forced to have empirical pass@256 = 1), and
coverage(x) = 1 - (1 - p_base)^coverage_k. The paper's four regimes (section 4) are applied in
this order, first match wins:

    OutOfReach   coverage <= coverage_min            (p_base = 0 always lands here)
    SolvedEasy   p_base >  easy
    Reachable    boundary <= p_base <= easy
    Boundary     p_base <  boundary  (and coverage > coverage_min, by the first rule)

With the paper's cutoffs (0.6, 0.10, 256, 0.4) the four sets are disjoint and cover [0, 1],
so the order only matters for unusual cutoffs (e.g. a small coverage_k), where "no
recoverable coverage" is taken to dominate.

CLI: boundary regimes --calibration rollouts/base_calibration.parquet
                     --settings SETTINGS.json --out regimes/regimes.parquet
SETTINGS.json holds {"easy": 0.6, "boundary": 0.10, "coverage_k": 256, "coverage_min": 0.4}.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from boundary.core import settings
from boundary.core.errors import BoundaryError, warn
from boundary.core.passk import counts_of, is_sequential

REGIMES = ("SolvedEasy", "Reachable", "Boundary", "OutOfReach")
DEFAULT_BINS = tuple(settings.defaults("report")["strata_bins"])


@dataclass(frozen=True)
class Thresholds:
    easy: float
    boundary: float
    coverage_k: int
    coverage_min: float

    def __post_init__(self):
        if not 0 <= self.boundary <= self.easy <= 1:
            raise BoundaryError(f"regimes: need 0 <= boundary ({self.boundary}) <= easy ({self.easy}) <= 1")
        if int(self.coverage_k) < 1 or not 0 <= self.coverage_min < 1:
            raise BoundaryError("regimes: need coverage_k >= 1 and 0 <= coverage_min < 1")

    @classmethod
    def from_dict(cls, d: dict) -> Thresholds:
        """From complete regimes settings (core/settings.py checks them), as numbers."""
        return cls(**{k: (int(v) if k == "coverage_k" else float(v)) for k, v in d.items()})


PAPER = Thresholds.from_dict(settings.defaults("regimes"))  # the schema's: the paper's cutoffs


def coverage(p_base, coverage_k: int) -> np.ndarray:
    return 1.0 - (1.0 - np.asarray(p_base, dtype=float)) ** coverage_k


def label(p_base, th: Thresholds = PAPER) -> np.ndarray:
    """Regime name per prompt, by the ordered rules in the module docstring."""
    p = np.asarray(p_base, dtype=float)
    cov = coverage(p, th.coverage_k)
    return np.select(
        [cov <= th.coverage_min, p > th.easy, p >= th.boundary],
        ["OutOfReach", "SolvedEasy", "Reachable"], default="Boundary").astype(object)


RULES = {"OutOfReach": "coverage@{coverage_k} <= {coverage_min:g}", "SolvedEasy": "p_base > {easy:g}",
         "Reachable": "{boundary:g} <= p_base <= {easy:g}",
         "Boundary": "p_base < {boundary:g} with coverage@{coverage_k} > {coverage_min:g}"}


def reachable_at(n: int, th: Thresholds = PAPER) -> set[str]:
    """The regimes a prompt sampled n times can land in: p_base = c / n takes n + 1 values."""
    return set(label(np.arange(n + 1) / n, th))


def unpopulated(ns, th: Thresholds = PAPER) -> list[str]:
    """One line per regime that no prompt can hold at the calibration's n (every n present),
    with the n it needs: the smallest N from which every n up to max(1024, 2 x the largest n
    present) can hold one. With 8 samples a prompt the smallest nonzero p_base is 0.125, above
    the Boundary cut 0.10, so Boundary is empty by construction (it needs n >= 11)."""
    ns = sorted({int(n) for n in ns if int(n) >= 1})
    if not ns:
        return []
    possible = set().union(*(reachable_at(n, th) for n in ns))
    missing = [r for r in REGIMES if r not in possible]
    if not missing:
        return []
    top = max(1024, 2 * ns[-1])
    at = [reachable_at(n, th) for n in range(1, top + 1)]
    at_n = f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]} to {ns[-1]}"
    lines = []
    for r in missing:
        ok = np.array([r in a for a in at])
        bad = np.flatnonzero(~ok)
        need = f"needs n >= {bad[-1] + 2}" if ok[-1] else f"no n up to {top} can hold one"  # bad: n - 1
        rule = RULES[r].format(**asdict(th))
        lines.append(f"{r} cannot hold any prompt at {at_n} (p_base = c/n; {r}: {rule}): {need}")
    return lines


def counts_from_calibration(samples: pd.DataFrame) -> pd.DataFrame:
    """Per-sample calibration rows -> per-prompt n, c, p_base."""
    out = counts_of(samples[["prompt_id", "correct"]])[["prompt_id", "n", "c"]]
    out["p_base"] = out["c"] / out["n"]
    return out


def label_counts(counts: pd.DataFrame, th: Thresholds = PAPER, source="calibration") -> pd.DataFrame:
    """Per-prompt (prompt_id, n, c) -> the regimes.parquet table, thresholds as columns; one
    warning naming `source` per regime its n cannot populate. Sequential counts are refused:
    their draws stop at a first success, so c / n is no p_base (a block of m draws is too few)."""
    if is_sequential(counts):
        raise BoundaryError(f"{source}: sequential counts (block_n, first_success) cannot label regimes: "
                            "p_base needs every draw of a calibration (give one: --calibration)")
    for line in unpopulated(counts["n"], th):
        warn(f"{source}: {line}")
    out = counts[["prompt_id", "n", "c"]].copy()
    out["p_base"] = out["c"] / out["n"]
    out["coverage"] = coverage(out["p_base"], th.coverage_k)
    out["regime"] = label(out["p_base"], th)
    for key, value in asdict(th).items():
        out[key] = value
    return out


def thresholds_of(regimes: pd.DataFrame) -> Thresholds:
    """The thresholds a regimes table was labelled with (stored as columns)."""
    cols = ["easy", "boundary", "coverage_k", "coverage_min"]
    if not set(cols) <= set(regimes.columns):
        return PAPER
    return Thresholds.from_dict({c: regimes[c].iloc[0] for c in cols})


def strata(p_base, bins=DEFAULT_BINS) -> np.ndarray:
    """Continuous stratification: '0' for p_base = 0, else the bin (a, b] holding p_base."""
    p = np.asarray(p_base, dtype=float)
    edges = np.asarray(sorted(bins), dtype=float)
    names = [f"({a:g},{b:g}]" for a, b in zip(edges[:-1], edges[1:])]
    idx = np.clip(np.searchsorted(edges, p, side="left") - 1, 0, len(names) - 1)
    out = np.asarray(names, dtype=object)[idx]
    out[p == 0] = "0"
    return out


def strata_order(bins=DEFAULT_BINS) -> list[str]:
    edges = sorted(bins)
    return ["0"] + [f"({a:g},{b:g}]" for a, b in zip(edges[:-1], edges[1:])]


def sensitivity_grid(th: Thresholds = PAPER) -> list[Thresholds]:
    """Nearby cutoffs, one knob at a time: the base cutoffs first, then each variation."""
    grid = [th]
    for b in (0.5, 0.75, 1.25, 1.5):
        grid.append(replace(th, boundary=round(th.boundary * b, 4)))
    for e in (-0.1, 0.1):
        grid.append(replace(th, easy=round(min(max(th.easy + e, th.boundary), 1.0), 4)))
    for m in (-0.1, 0.1):
        grid.append(replace(th, coverage_min=round(min(max(th.coverage_min + m, 0.0), 0.95), 4)))
    for k in (th.coverage_k // 2, th.coverage_k * 2):
        if k >= 1:
            grid.append(replace(th, coverage_k=int(k)))
    return grid

