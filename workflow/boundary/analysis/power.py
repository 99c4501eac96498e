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
- a trained policy multiplies every Boundary prompt's success rate by one factor, chosen so
  that the expected Boundary pass@k drops by `effect` (coverage shrinking evenly), and seeds
  differ only through their evaluation samples. Seed-to-seed training variation would lower
  the power; the interval over seeds widens with it, so more seeds are the remedy.

CLI: boundary power --calibration rollouts/base_calibration.parquet --settings REGIMES.json
                    [--eval-n 256] [--k 256] [--effect 0.05] [--prompts 100,200,400]
                    [--seeds 1,3] [--out power.parquet]
REGIMES.json holds the config's `regimes` section (the thresholds that label Boundary).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from boundary.analysis.regimes import Thresholds, counts_from_calibration, coverage, label
from boundary.analysis.stats import bootstrap_means, nested_over_seeds, percentile_interval, seed_weights
from boundary.core import settings
from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import BoundaryError
from boundary.core.options import KS, LEVEL, POSITIVE, ArgumentParser, description
from boundary.core.passk import pass_at_k

COLUMNS = ["prompts", "seeds", "boundary_prompts", "effect", "power", "false_positive", "mean_width"]


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


def simulate(p_pool, labels, prompts: int, seeds: int, effect: float, *, n_eval: int, k: int,
             sims: int, resamples: int, level: float, rng) -> tuple[float, float, int]:
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
        base = pass_at_k(n_eval, rng.binomial(n_eval, p), k)
        trained = pass_at_k(n_eval, rng.binomial(n_eval, np.tile(p * s, (seeds, 1))), k)
        delta = (trained - base).T  # prompts x seeds, paired on the base's samples
        boot, _ = bootstrap_means(delta, resamples, seed=i)
        draws = nested_over_seeds(boot.T[:, :, None], seed_weights(seeds, resamples, seed=i))[:, 0]
        lo, hi = percentile_interval(draws, level)
        resolved += bool(hi < 0 or lo > 0)
        widths.append(hi - lo)
    return resolved / sims, float(np.mean(widths)), int(round(np.mean(sizes)))


def power_table(counts: pd.DataFrame, th: Thresholds, *, prompts, seeds, effect: float, n_eval: int,
                k: int, sims: int = 200, resamples: int = 2000, level: float = 0.95,
                seed: int = 0) -> pd.DataFrame:
    """One row per design (diagnostic prompts x seeds): power at `effect`, and the false-positive
    rate at no effect (which should sit near 1 - level)."""
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
            kw = dict(n_eval=n_eval, k=k, sims=sims, resamples=resamples, level=level, rng=rng)
            power, width, size = simulate(p_pool, labels, n_prompts, n_seeds, effect, **kw)
            false_positive, _, _ = simulate(p_pool, labels, n_prompts, n_seeds, 0.0, **kw)
            rows.append((n_prompts, n_seeds, size, effect, power, false_positive, width))
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
    parser.add_argument("--effect", type=LEVEL, default=0.05, help="drop in Boundary pass@k to resolve")
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
                        level=args.level)
    p = counts["c"] / counts["n"]
    share = pd.Series(label(p.to_numpy(float), th)).value_counts(normalize=True)
    print(f"power: {len(counts)} calibrated prompts; regimes "
          + ", ".join(f"{r} {share.get(r, 0):.1%}" for r in ("SolvedEasy", "Reachable", "Boundary", "OutOfReach")))
    print(f"power: resolving a {args.effect:g} drop in Boundary pass@{args.k} (n_eval {args.eval_n}, "
          f"{args.level:.0%} paired prompt bootstrap nested over seeds, {args.sims} simulated studies per design)")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if args.out:
        write_table(table, args.out)
