"""Where every point of Δpass@k comes from, with honest uncertainty.

For a trained run against the base on the same P prompts, Δpass@k = (1/P) sum_x d_x(k) with
d_x(k) = trained pass@k(x) - base pass@k(x) (unbiased per-prompt estimates). A sum splits
exactly, so the change is attributed to

    regimes          (1/P) sum over the regime's prompts of d_x(k)   (= share x regime mean)
    transition cells (1/P) sum over the cell's prompts of d_x(k), cells by solved = c > 0:
                     kept (base solved, trained solved), lost (solved -> unsolved; d <= 0),
                     gained (unsolved -> solved; d >= 0), never (unsolved both; d = 0)
    regime x cell    the same within a regime,

and the parts of each split add up to the total. The same holds for the area between the
curves over log k, A = integral_1^K Δpass@k d(ln k) (trapezoid over every integer k <= K,
K the smallest n, a sequential row's cap), which is a per-prompt sum too. A / ln K is Δpass@k
averaged over log k. Every curve is `passk.estimate_all` of the counts rows, full or sequential.

The crossover k* is the smallest k with trained pass@k < base pass@k (every integer k <= K;
none when the trained curve never falls below).

Intervals: a paired prompt bootstrap (prompts redrawn within regimes, as `stats`; the base
and every run share each resample), nested over seeds for a method's seed mean (each resample
also redraws the method's seeds with replacement, on top of the shared prompt draw). k* is
bootstrapped on a grid of k (every k to 8, then 4 per doubling) and its interval rounded
outward to the grid cells that hold it. Percentile intervals at `level`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from boundary.analysis.stats import bootstrap_blocks, nested_over_seeds, seed_weights
from boundary.core.names import BASE
from boundary.core.passk import estimate_all, horizon, pass_at_k_column

ALL = "all"
CELLS = ("kept", "lost", "gained", "never")
AREA = "area_log_k"
DELTA = "delta_passk"
COLUMNS = ["method", "seed", "n_seeds", "quantity", "k", "regime", "cell", "value", "boot_low", "boot_high"]
CROSSOVER_COLUMNS = ["method", "seed", "n_seeds", "K", "kstar", "kstar_low", "kstar_high", "p_crossover"]
CURVE_COLUMNS = ["method", "seed", "n_seeds", "k", "base", "trained", "delta"]


def cells(base_c, c) -> np.ndarray:
    """Transition cell of each prompt from base and trained positive counts."""
    base_c, c = np.asarray(base_c), np.asarray(c)
    return np.select([(base_c > 0) & (c > 0), (base_c > 0) & (c == 0), (base_c == 0) & (c > 0)],
                     list(CELLS[:3]), CELLS[3]).astype(object)


def log_k_weights(kmax: int) -> np.ndarray:
    """Trapezoid weights over ln k at k = 1..kmax: sum_k w_k f(k) = integral_0^{ln kmax} f."""
    if kmax < 2:
        return np.zeros(max(kmax, 1))
    logk = np.log(np.arange(1, kmax + 1))
    gaps = np.diff(logk)
    w = np.zeros(kmax)
    w[:-1] += gaps / 2
    w[1:] += gaps / 2
    return w


def k_grid(kmax: int, ks=()) -> np.ndarray:
    """Every k up to 8, then 4 per doubling (steps of 19%), plus the listed ks and kmax."""
    dense = np.arange(1, min(kmax, 8) + 1)
    geometric = np.round(2.0 ** np.arange(3, np.log2(max(kmax, 1)), 1 / 4)).astype(int)
    g = np.unique(np.concatenate([dense, geometric, np.asarray([k for k in ks if k <= kmax] + [kmax], int)]))
    return g[(g >= 1) & (g <= kmax)]


def first_below(delta: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """Smallest k (along the last axis) with delta < 0; inf where there is none."""
    below = delta < 0
    idx = np.argmax(below, axis=-1)
    return np.where(below.any(axis=-1), ks[idx].astype(float), np.inf)


def kstar_interval(kdraws, grid, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap k* drawn on `grid`, rounded outward: a draw at grid[i]
    crossed somewhere in (grid[i-1], grid[i]], so the low end is grid[i-1] + 1. inf means no
    crossover up to K."""
    alpha = (1 - level) / 2
    lo, hi = np.quantile(kdraws, [alpha, 1 - alpha], method="inverted_cdf")
    if not np.isfinite(lo):
        return np.inf, np.inf
    pos = int(np.searchsorted(grid, lo))
    return (float(grid[pos - 1] + 1) if pos > 0 else 1.0), float(hi)


def _interval(draws, level):
    alpha = (1 - level) / 2
    lo, hi = np.quantile(draws, [alpha, 1 - alpha], axis=0)
    return lo, hi


class Attribution:
    """The attribution of one `diagnose.prompt_frame`, in two steps so that its bootstrap can
    share one pass of prompt resamples with other series: `blocks` (prompts in sorted
    prompt_id order, stratified by `strata`) go to `stats.bootstrap_blocks`, whose draws
    `tables` turns into the attribution and crossover tables."""

    def __init__(self, frame: pd.DataFrame, ks, group: str = "regime"):
        base = frame[frame["method"] == BASE].sort_values("prompt_id", kind="stable")
        order = base["prompt_id"].to_numpy()
        trained = frame[frame["method"] != BASE]
        self.runs = list(trained[["method", "seed"]].drop_duplicates().itertuples(index=False, name=None))
        by_run = {key: g.set_index("prompt_id").loc[order]
                  for key, g in trained.groupby(["method", "seed"], sort=False)}
        self.labels = labels = base[group].to_numpy()
        self.regimes = [r for r in pd.unique(labels) if r != ALL]
        self.strata = labels if self.regimes else None
        self.P = P = len(order)
        self.kmax = kmax = int(horizon(frame).min())  # the base's rows are in the frame
        self.grid = k_grid(kmax, ks)
        self.quantities = [(DELTA, int(k)) for k in ks] + [(AREA, None)]
        weights = log_k_weights(kmax)
        base_full = estimate_all(base, kmax)                                  # P x kmax
        base_area = base_full @ weights
        R, Q = len(self.runs), len(self.quantities)
        cell_block = np.zeros((P, R, Q, 3))                                   # kept, lost, gained
        grid_block = np.zeros((P, R, len(self.grid)))
        self.curve, self.cells, self.values = {}, {}, {}
        self.base_curve = base_full.mean(axis=0)
        for i, r in enumerate(self.runs):
            g = by_run[r]
            full = estimate_all(g, kmax)
            d = np.stack([g[pass_at_k_column(k)].to_numpy() - g[f"base_{pass_at_k_column(k)}"].to_numpy()
                          for k in ks] + [full @ weights - base_area], axis=1)  # P x quantities
            cell = cells(g["base_c"].to_numpy(), g["c"].to_numpy())
            for j, name in enumerate(CELLS[:3]):
                cell_block[:, i, :, j] = d * (cell == name)[:, None]
            grid_block[:, i] = full[:, self.grid - 1] - base_full[:, self.grid - 1]
            self.curve[r] = (full - base_full).mean(axis=0)                   # exact, every k <= K
            self.cells[r], self.values[r] = cell, d
        self.blocks = [(cell_block.reshape(P, -1), True), (grid_block.reshape(P, -1), False)]

    def point(self, r) -> np.ndarray:
        """Exact contributions of one run: (quantities x [all, regimes...] x [cells..., all])."""
        d, cell, P = self.values[r], self.cells[r], self.P
        out = np.zeros((len(self.quantities), len(self.regimes) + 1, len(CELLS) + 1))
        for a, reg in enumerate([ALL] + self.regimes):
            in_reg = np.ones(P, bool) if reg == ALL else self.labels == reg
            for b, name in enumerate(CELLS):
                out[:, a, b] = d[in_reg & (cell == name)].sum(axis=0) / P
            out[:, a, -1] = d[in_reg].sum(axis=0) / P
        return out

    def tables(self, draws, resamples: int, seed: int = 0, level: float = 0.95):
        """(attribution, crossover, curves) from the draws of `blocks` (bootstrap_blocks' output);
        curves holds the population pass@k of base and trained at every k <= K."""
        (cell_all, cell_per), (grid_all, _) = draws
        R, Q, regimes = len(self.runs), len(self.quantities), self.regimes
        cell_all = cell_all.reshape(resamples, R, Q, 3)
        cell_per = {g: d.reshape(resamples, R, Q, 3) * np.mean(self.labels == g) for g, d in cell_per.items()}
        grid_delta = grid_all.reshape(resamples, R, len(self.grid))
        all_k = np.arange(1, self.kmax + 1)

        def draws_of(i):
            """Bootstrap draws shaped like `point`, with a leading resample axis."""
            out = np.zeros((resamples, Q, len(regimes) + 1, len(CELLS) + 1), np.float32)  # for quantiles
            out[:, :, 0, :3] = cell_all[:, i]
            for a, reg in enumerate(regimes, start=1):
                out[:, :, a, :3] = cell_per[reg][:, i]
            out[..., -1] = out[..., :3].sum(axis=-1)  # never contributes exactly 0
            return out

        rows, cross, curves = [], [], []

        def emit(method, s, n_seeds, value, boot, curve, kdraws):
            curves.append(pd.DataFrame({"method": method, "seed": s, "n_seeds": n_seeds, "k": all_k,
                                        "base": self.base_curve, "trained": self.base_curve + curve, "delta": curve}))
            lo, hi = _interval(boot, level)
            for q, (quantity, k) in enumerate(self.quantities):
                for a, reg in enumerate([ALL] + regimes):
                    for b, name in enumerate(list(CELLS) + [ALL]):
                        rows.append((method, s, n_seeds, quantity, k, reg, name, value[q, a, b], lo[q, a, b],
                                     hi[q, a, b]))
            low, high = kstar_interval(kdraws, self.grid, level)
            cross.append((method, s, n_seeds, self.kmax, first_below(curve, all_k), low, high,
                          float(np.isfinite(kdraws).mean())))

        for i, r in enumerate(self.runs):
            emit(r[0], r[1], 1, self.point(r), draws_of(i), self.curve[r], first_below(grid_delta[:, i], self.grid))
        for method in dict.fromkeys(m for m, _ in self.runs):
            idx = [i for i, r in enumerate(self.runs) if r[0] == method]
            w = seed_weights(len(idx), resamples, seed)
            value = np.mean([self.point(self.runs[i]) for i in idx], axis=0)
            boot = np.einsum("bs,sbqac->bqac", w, np.stack([draws_of(i) for i in idx]))
            curve = np.mean([self.curve[self.runs[i]] for i in idx], axis=0)
            kdraws = first_below(nested_over_seeds(np.stack([grid_delta[:, i] for i in idx]), w), self.grid)
            emit(method, pd.NA, len(idx), value, boot, curve, kdraws)

        table = pd.DataFrame(rows, columns=COLUMNS)
        crossover = pd.DataFrame(cross, columns=CROSSOVER_COLUMNS)
        curve_table = pd.concat(curves, ignore_index=True)[CURVE_COLUMNS]
        for t in (table, crossover, curve_table):
            t["seed"] = t["seed"].astype("Int64")
        table["k"] = table["k"].astype("Int64")
        return table, crossover, curve_table


def attribute(frame: pd.DataFrame, ks, resamples: int = 10_000, seed: int = 0, level: float = 0.95,
              group: str = "regime") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(attribution, crossover, curves) tables for every trained run of a
    `diagnose.prompt_frame` and for each method's seed mean (seed <NA>, intervals nested over
    its seeds)."""
    if not (frame["method"] != BASE).any():
        return (pd.DataFrame(columns=COLUMNS), pd.DataFrame(columns=CROSSOVER_COLUMNS),
                pd.DataFrame(columns=CURVE_COLUMNS))
    a = Attribution(frame, ks, group)
    return a.tables(bootstrap_blocks(a.blocks, resamples, seed, a.strata), resamples, seed, level)
