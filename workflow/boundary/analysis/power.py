"""Power of a study to resolve a change in Boundary pass@k, from the frozen base's calibration,
computed before any training is run (so the evaluation cannot be sized after the fact).

The estimand is the report's: Boundary pass@k of a method's seeds, minus the base's, over the
diagnostic prompts that the base's calibration labels Boundary, with a percentile interval
from the paired prompt bootstrap nested over seeds (`stats.bootstrap_means`,
`stats.seed_weights`). A design (diagnostic prompts, seeds) resolves an effect when that
interval excludes 0.

The model behind the simulation, stated because the power depends on it:
- each calibrated prompt's p_base = c / n is its true success rate; a design's diagnostic
  prompts are drawn from the calibrated pool with replacement, and labelled by p_base;
- the base and every trained seed are evaluated with `n_eval` fresh samples per prompt;
- the base is evaluated `base_draws` times (n_eval samples each): its pass@k the mean of the
  draws' estimates, its solved prompts those of the pooled counts (as `diagnose` reads them);
- a trained policy multiplies every Boundary prompt's success rate by one factor, chosen so
  that the expected Boundary pass@k drops by `effect` (coverage shrinking evenly), and on top
  `collapse` Boundary prompts, drawn once per simulated study and the same in every seed, go
  to success rate 0 (the paper's mechanism: a few prompts lost outright, the rest unchanged);
  seeds differ only through their evaluation samples. Seed-to-seed training variation would
  lower the power; the interval over seeds widens with it, so more seeds are the remedy.
  Prompts are independent here: where they share structure, the cluster bootstrap's interval
  is wider and the power lower.

`drop_sensitivity` is the same simulation on a study's own Boundary prompts (no redraw from a
pool) with no shrink and D = 0, 1, 2, ... prompts dropped: the loss the study's test can see
(the report's `detectable_loss` table), in place of a positive control; `drop_studies` gives its
simulated studies one by one (at D = 0 the lost count's null distribution).

CLI: boundary power --calibration rollouts/base_calibration.parquet --settings REGIMES.json
                    [--eval-n 256] [--base-draws 1] [--k 256] [--effect 0.05] [--collapse 0]
                    [--prompts 100,200,400] [--seeds 1,3] [--out power.parquet]
REGIMES.json holds the config's `regimes` section (the thresholds that label Boundary).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from boundary.analysis.regimes import Thresholds, counts_from_calibration, coverage, label
from boundary.analysis.stats import percentile_interval, resample_counts, seed_weights
from boundary.core import settings
from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import BoundaryError
from boundary.core.options import COUNTS, FRACTION, KS, LEVEL, POSITIVE, ArgumentParser, description
from boundary.core.passk import pass_at_k

COLUMNS = ["prompts", "seeds", "boundary_prompts", "effect", "collapsed", "power", "false_positive", "mean_width"]
SENSITIVITY_COLUMNS = ["boundary_prompts", "seeds", "base_draws", "n_eval", "k", "dropped", "delta", "detected",
                       "lost", "sims"]


def shrink_factor(p, k: int, effect: float) -> float:
    """The factor s in [0, 1] on every success rate that lowers mean pass@k by `effect`
    (E[unbiased pass@k] at rate p is 1 - (1 - p)^k: the regimes' coverage)."""
    now = coverage(p, k).mean()
    target = now - effect
    if target < 0:
        raise BoundaryError(f"power: an effect of {effect} exceeds the Boundary prompts' pass@{k} ({now:.3f})")
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection: mean pass@k is increasing in s
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if coverage(np.asarray(p) * mid, k).mean() < target else (lo, mid)
    return (lo + hi) / 2


def _nested_draws(delta, resamples: int, seed: int) -> np.ndarray:
    """Seed-mean bootstrap draws of Δ (prompts x seeds): the prompt resamples and seed weights
    of `stats.bootstrap_means` and `stats.seed_weights` at `seed`, summed in float64 by numpy's
    own products and reductions, not BLAS. BLAS kernels sum in their own order, so a draw that
    is exactly 0 (common: at k = n every Δ is -1, 0 or 1) came out a hair either side of 0 and
    `detected` depended on the CPU; these sums are the same on every CPU."""
    chunks = [w for _, _, (w,) in resample_counts(np.zeros(len(delta), int), 1, resamples, seed)]
    counts = np.concatenate(chunks).astype(np.float64)  # resamples x prompts, whole numbers
    means = (counts[:, :, None] * delta[None]).sum(axis=1) / len(delta)  # resamples x seeds
    return (seed_weights(delta.shape[1], resamples, seed=seed) * means).sum(axis=1)


def _study(p, seeds: int, scale: float, collapse: int, *, n_eval: int, base_draws: int, k: int,
           resamples: int, level: float, rng, boot_seed: int):
    """One simulated study on Boundary success rates `p`: (Δ, interval low, high, lost prompts
    summed over seeds), Δ the seed mean of Boundary pass@k minus the pooled base's."""
    draws = rng.binomial(n_eval, np.tile(p, (base_draws, 1)))  # the base's draws, as diagnose reads them
    base_c = draws.sum(axis=0)
    base = pass_at_k(n_eval, draws, k).mean(axis=0)
    q = np.tile(p * scale, (seeds, 1))
    if collapse:
        q[:, rng.choice(len(p), size=min(collapse, len(p)), replace=False)] = 0.0
    c = rng.binomial(n_eval, q)
    delta = (pass_at_k(n_eval, c, k) - base).T  # prompts x seeds, paired on the base's samples
    lo, hi = percentile_interval(_nested_draws(delta, resamples, boot_seed), level)
    return float(delta.mean()), lo, hi, int(((base_c > 0) & (c == 0)).sum())


def simulate(p_pool, labels, prompts: int, seeds: int, effect: float, *, n_eval: int, k: int,
             sims: int, resamples: int, level: float, rng, collapse: int = 0,
             base_draws: int = 1) -> tuple[float, float, int]:
    """(share of simulated studies whose interval excludes 0, mean interval width, mean number
    of Boundary prompts) for one design and one effect."""
    boundary = labels == "Boundary"
    s = shrink_factor(p_pool[boundary], k, effect) if effect > 0 else 1.0
    resolved, widths, sizes = 0, [], []
    for i in range(sims):
        pick = rng.integers(0, len(p_pool), size=prompts)
        p = p_pool[pick][boundary[pick]]
        sizes.append(len(p))
        if len(p) < 2:
            widths.append(np.inf)
            continue
        _, lo, hi, _ = _study(p, seeds, s, collapse, n_eval=n_eval, base_draws=base_draws, k=k,
                              resamples=resamples, level=level, rng=rng, boot_seed=i)
        resolved += bool(hi < 0 or lo > 0)
        widths.append(hi - lo)
    return resolved / sims, float(np.mean(widths)), int(round(np.mean(sizes)))


def drop_studies(p_boundary, drop: int, *, seeds: int, n_eval: int, base_draws: int, k: int, sims: int = 100,
                 resamples: int = 500, level: float = 0.95, seed: int = 0) -> np.ndarray:
    """`sims` simulated studies of a synthetic policy that drops `drop` of the Boundary prompts
    (as `drop_sensitivity`, with its random streams: the same studies as its row for `drop`),
    one row each: Δpass@k, interval low, high, and the lost prompts summed over seeds. At
    drop = 0 the last column is the null of a lost count: what fresh draws of the base itself
    "lose" against the pooled base, study by study (its quantiles, not only its mean)."""
    p = np.asarray(p_boundary, float)
    rng = np.random.default_rng([seed, drop])
    return np.array([_study(p, seeds, 1.0, drop, n_eval=n_eval, base_draws=base_draws, k=k, resamples=resamples,
                            level=level, rng=rng, boot_seed=i) for i in range(sims)], dtype=float).reshape(-1, 4)


def drop_sensitivity(p_boundary, *, seeds: int, n_eval: int, base_draws: int, k: int, drops=(0, 1, 2, 4, 8),
                     sims: int = 100, resamples: int = 500, level: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """A synthetic policy identical to the base except that D of the study's Boundary prompts
    (success rates `p_boundary`, from the calibration) never succeed, through the study's own
    statistics at its N (prompts, seeds, base draws, n): per D, the mean Δpass@k, the share of
    simulated studies whose nested prompt-bootstrap interval lies below 0 (`detected`), and
    the mean lost prompts summed over seeds. D = 0 is the false-alarm rate."""
    p = np.asarray(p_boundary, float)
    rows = []
    for d in drops:
        if len(p) < 2 or d > len(p):
            continue
        delta, lo, hi, lost = drop_studies(p, d, seeds=seeds, n_eval=n_eval, base_draws=base_draws, k=k, sims=sims,
                                           resamples=resamples, level=level, seed=seed).T
        rows.append((len(p), seeds, base_draws, n_eval, k, d, delta.mean(), float((hi < 0).mean()), lost.mean(), sims))
    return pd.DataFrame(rows, columns=SENSITIVITY_COLUMNS)


def power_table(counts: pd.DataFrame, th: Thresholds, *, prompts, seeds, effect: float, n_eval: int,
                k: int, sims: int = 200, resamples: int = 2000, level: float = 0.95,
                seed: int = 0, collapse=(0,), base_draws: int = 1) -> pd.DataFrame:
    """One row per design (diagnostic prompts x seeds x collapsed prompts): power at `effect`
    with that many Boundary prompts collapsed, and the false-positive rate at no effect (which
    should sit near 1 - level)."""
    if k > n_eval:
        raise BoundaryError(f"power: k={k} exceeds the evaluation's n={n_eval}")
    p_pool = (counts["c"] / counts["n"]).to_numpy(float)
    labels = label(p_pool, th)
    if (labels == "Boundary").sum() < 2:
        raise BoundaryError("power: the calibration labels fewer than 2 prompts Boundary; "
                            "no design can resolve a Boundary change on this task")
    rows = []
    for n_prompts in prompts:
        for n_seeds in seeds:
            rng = np.random.default_rng([seed, n_prompts, n_seeds])
            kw = dict(n_eval=n_eval, k=k, sims=sims, resamples=resamples, level=level, rng=rng,
                      base_draws=base_draws)
            found = {}  # the first design's draws come first, as before collapse was a knob
            for i, d in enumerate(collapse):
                found[d] = simulate(p_pool, labels, n_prompts, n_seeds, effect, collapse=d, **kw)
                if i == 0:
                    false_positive, _, _ = simulate(p_pool, labels, n_prompts, n_seeds, 0.0, **kw)
            for d, (power, width, size) in found.items():
                rows.append((n_prompts, n_seeds, size, effect, d, power, false_positive, width))
    return pd.DataFrame(rows, columns=COLUMNS)


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary power", description=description(__doc__),
                            epilog="example:\n  boundary power --calibration results/testbed/rollouts/"
                                   "base_calibration.parquet \\\n      --settings '{\"easy\": 0.6, \"boundary\": 0.1, "
                                   "\"coverage_k\": 256, \"coverage_min\": 0.4}' --prompts 100,200 --seeds 1,3")
    parser.add_argument("--calibration", required=True, help="the base's calibration samples (or counts) parquet")
    parser.add_argument("--settings", required=True, help="the regimes thresholds (JSON file or string)")
    parser.add_argument("--eval-n", type=POSITIVE, default=256, help="evaluation samples per prompt")
    parser.add_argument("--k", type=POSITIVE, default=256, help="the k of Boundary pass@k")
    parser.add_argument("--effect", type=FRACTION, default=0.05,
                        help="drop in Boundary pass@k to resolve, by an even shrink (0: none)")
    parser.add_argument("--collapse", type=COUNTS, default="0",
                        help="Boundary prompts collapsed to success 0 on top of the shrink (a list: one row each)")
    parser.add_argument("--base-draws", type=POSITIVE, default=settings.defaults("evaluate")["base_seeds"],
                        help="base evaluations pooled (evaluate.base_seeds)")
    parser.add_argument("--prompts", type=KS, default=[100, 200, 400], help="diagnostic prompt counts")
    parser.add_argument("--seeds", type=KS, default=[1, 3], help="training seed counts")
    parser.add_argument("--sims", type=POSITIVE, default=200, help="simulated studies per design")
    parser.add_argument("--resamples", type=POSITIVE, default=2000, help="bootstrap resamples per simulated study")
    parser.add_argument("--level", type=LEVEL, default=settings.defaults("report")["level"],
                        help="level of the bootstrap interval")
    parser.add_argument("--out", help="power table parquet to write (default: printed only)")
    return parser


def main(argv=None) -> None:
    args = make_parser().parse_args(argv)
    frame = read_table(args.calibration, nonempty=True)
    counts = frame if {"n", "c"} <= set(frame.columns) else counts_from_calibration(frame)
    th = Thresholds.from_dict(settings.load("regimes", args.settings))
    table = power_table(counts, th, prompts=args.prompts, seeds=args.seeds, effect=args.effect,
                        n_eval=args.eval_n, k=args.k, sims=args.sims, resamples=args.resamples,
                        level=args.level, collapse=args.collapse, base_draws=args.base_draws)
    p = counts["c"] / counts["n"]
    share = pd.Series(label(p.to_numpy(float), th)).value_counts(normalize=True)
    print(f"power: {len(counts)} calibrated prompts; regimes "
          + ", ".join(f"{r} {share.get(r, 0):.1%}" for r in ("SolvedEasy", "Reachable", "Boundary", "OutOfReach")))
    print(f"power: resolving a {args.effect:g} drop in Boundary pass@{args.k} with {args.collapse} prompt(s) "
          f"collapsed (n_eval {args.eval_n}, {args.base_draws} base draw(s), "
          f"{args.level:.0%} paired prompt bootstrap nested over seeds, {args.sims} simulated studies per design)")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if args.out:
        write_table(table, args.out)
