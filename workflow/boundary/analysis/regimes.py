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

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.errors import BoundaryError, warn
from boundary.core.passk import counts_of

REGIMES = ("SolvedEasy", "Reachable", "Boundary", "OutOfReach")
DEFAULT_BINS = (0.0, 0.01, 0.05, 0.10, 0.25, 0.60, 1.0)


@dataclass(frozen=True)
class Thresholds:
    easy: float = 0.6
    boundary: float = 0.10
    coverage_k: int = 256
    coverage_min: float = 0.4

    def __post_init__(self):
        if not 0 <= self.boundary <= self.easy <= 1:
            raise BoundaryError(f"regimes: need 0 <= boundary ({self.boundary}) <= easy ({self.easy}) <= 1")
        if int(self.coverage_k) < 1 or not 0 <= self.coverage_min < 1:
            raise BoundaryError("regimes: need coverage_k >= 1 and 0 <= coverage_min < 1")

    @classmethod
    def from_dict(cls, d: dict) -> Thresholds:
        unknown = set(d) - {"easy", "boundary", "coverage_k", "coverage_min"}
        if unknown:
            raise BoundaryError(f"regimes settings: unknown key(s) {', '.join(sorted(unknown))}")
        return cls(**{k: (int(v) if k == "coverage_k" else float(v)) for k, v in d.items()})


def coverage(p_base, coverage_k: int) -> np.ndarray:
    return 1.0 - (1.0 - np.asarray(p_base, dtype=float)) ** coverage_k


def label(p_base, th: Thresholds = Thresholds()) -> np.ndarray:
    """Regime name per prompt, by the ordered rules in the module docstring."""
    p = np.asarray(p_base, dtype=float)
    cov = coverage(p, th.coverage_k)
    return np.select(
        [cov <= th.coverage_min, p > th.easy, p >= th.boundary],
        ["OutOfReach", "SolvedEasy", "Reachable"], default="Boundary").astype(object)


RULES = {"OutOfReach": "coverage@{coverage_k} <= {coverage_min:g}", "SolvedEasy": "p_base > {easy:g}",
         "Reachable": "{boundary:g} <= p_base <= {easy:g}",
         "Boundary": "p_base < {boundary:g} with coverage@{coverage_k} > {coverage_min:g}"}


def reachable_at(n: int, th: Thresholds = Thresholds()) -> set[str]:
    """The regimes a prompt sampled n times can land in: p_base = c / n takes n + 1 values."""
    return set(label(np.arange(n + 1) / n, th))


def unpopulated(ns, th: Thresholds = Thresholds()) -> list[str]:
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


def label_counts(counts: pd.DataFrame, th: Thresholds = Thresholds(), source="calibration") -> pd.DataFrame:
    """Per-prompt (prompt_id, n, c) -> the regimes.parquet table, thresholds as columns; one
    warning naming `source` per regime its n cannot populate."""
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
        return Thresholds()
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


def sensitivity_grid(th: Thresholds = Thresholds()) -> list[Thresholds]:
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


def load_settings(path) -> Thresholds:
    try:
        from boundary.core.config import load_stage_settings  # the lead's loader, where it exists
    except ImportError:
        load_stage_settings = None
    if load_stage_settings is not None:
        settings = load_stage_settings(str(path))  # a JSON file or a JSON string
    else:
        try:
            settings = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise BoundaryError(f"{path}: file not found") from None
        except json.JSONDecodeError as err:
            raise BoundaryError(f"{path}: not valid JSON ({err})") from None
    return Thresholds.from_dict(dict(settings))
