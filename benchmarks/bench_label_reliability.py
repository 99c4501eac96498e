"""Regime labels' reliability on a calibration's counts, and what extending the fragile prompts buys.

    PYTHONPATH=workflow python benchmarks/bench_label_reliability.py COUNTS [COUNTS ...] \
        [--n-column n --c-column c] [--second-regime COLUMN] [--fragile 0,1,3] [--to 512,1024]

COUNTS: parquet or CSV files of one calibration's per-prompt counts (prompt_id, n, c; other
column names with --n-column/--c-column), read as one pool; every prompt must have the same n.
Prints, exactly (no simulation; analysis/label_reliability.py):
- the empirical-Bayes prior fitted to the counts, the mean P(label), and E[label changes] of a
  second calibration of the same n, overall and by regime and by successes 0..3 (and overall
  under Jeffreys' and the uniform prior, for comparison);
- with --second-regime (a column holding a second calibration's labels of the same prompts):
  the changes observed against those predicted, overall and by successes, with the prediction
  for a second run drawn as an adaptive one (the schema's calibration.rounds and delta: the
  committed second runs are adaptive) beside the one for a full run;
- for each (fragile, to) of calibration.extend_fragile and extend_to: E[label changes] of a
  second calibration when both extend (the extension's own draws averaged over their posterior
  predictive), the prompts extended and the extra draws against the calibration's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _by_successes(c, most: int = 3):
    """(k, prompts with k calibration successes) for k = 0..most that any prompt has."""
    return [(k, c == k) for k in range(most + 1) if (c == k).any()]


def main(argv=None) -> None:
    import numpy as np
    import pandas as pd

    from boundary.analysis import label_reliability as rl
    from boundary.analysis.adaptive import Extension, StoppingRule
    from boundary.analysis.regimes import REGIMES, label
    from boundary.core import settings
    from boundary.core.artifacts import read_table

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("counts", nargs="+")
    ap.add_argument("--n-column", default="n")
    ap.add_argument("--c-column", default="c")
    ap.add_argument("--second-regime", help="a column with a second calibration's labels of the same prompts")
    ap.add_argument("--fragile", type=_ints, default=[0, 1, 3])
    ap.add_argument("--to", type=_ints, default=[512, 1024])
    args = ap.parse_args(argv)

    cols = ["prompt_id", args.n_column, args.c_column] + ([args.second_regime] if args.second_regime else [])
    d = pd.concat([read_table(p, cols) for p in args.counts], ignore_index=True)
    n, c = d[args.n_column].to_numpy(np.int64), d[args.c_column].to_numpy(np.int64)
    if len(set(n)) != 1:
        sys.exit(f"every prompt needs the same n (got {sorted(set(n))[:5]})")
    regime = label(c / n)
    a, b = rl.fit_prior(n, c)
    start = time.perf_counter()
    q = rl.flip_probability(n, c, regime, a, b)
    p_label = rl.label_probability(n, c, regime, a, b)
    print(f"{len(d)} prompts at n = {n[0]} from {', '.join(args.counts)}")
    print(f"{rl.prior_text(a, b)}; mean P(label) {p_label.mean():.3f}")
    print(f"E[label changes], a second calibration of n = {n[0]}: {q.sum():.1f} ({q.sum() / len(d):.1%})")
    for r in REGIMES:
        at = regime == r
        if at.any():
            print(f"  {r:<11} {int(at.sum()):>4} prompts: mean P(label) {p_label[at].mean():.3f}, "
                  f"E[changes] {q[at].sum():.1f} ({q[at].mean():.1%})")
    for k, at in _by_successes(c):
        print(f"  c = {k}: {int(at.sum()):>4} prompts ({regime[at][0]}), E[changes] {q[at].sum():.1f} "
              f"({q[at].mean():.1%})")
    print(f"(exact, {time.perf_counter() - start:.2f} s)")
    others = {name: rl.flip_probability(n, c, regime, *prior).sum()
              for name, prior in (("Jeffreys Beta(1/2, 1/2)", (0.5, 0.5)), ("uniform Beta(1, 1)", (1.0, 1.0)))}
    print("E[label changes] under fixed priors instead: " + ", ".join(f"{k} {v:.1f}" for k, v in others.items()))

    if args.second_regime:
        rule = StoppingRule.from_settings({**settings.defaults("calibration"), "n": int(n[0])},
                                          settings.defaults("regimes"))
        qa = rl.flip_probability(n, c, regime, a, b, protocol=lambda _: rule)
        changed = (d[args.second_regime].to_numpy() != regime)
        sd = np.sqrt((qa * (1 - qa)).sum())
        print(f"\nsecond calibration ({args.second_regime}): {int(changed.sum())} labels changed of {len(d)} "
              f"({changed.mean():.1%}); predicted {qa.sum():.1f} ± {sd:.1f} for an adaptive second run "
              f"(rounds and delta {rule.delta:g} of the schema), {q.sum():.1f} for a full one")
        for k, at in _by_successes(c):
            print(f"  c = {k}: {int(changed[at].sum())} of {int(at.sum())} changed ({changed[at].mean():.1%}); "
                  f"predicted {qa[at].sum():.1f} ({qa[at].mean():.1%})")

    print("\nextension: fragile (<= successes in n) drawn on to `to`; both calibrations extend")
    print(f"{'fragile':>7} {'to':>5} {'extended':>8} {'E[changes] before':>17} {'after':>6} {'extra draws':>12} "
          f"{'of the calibration':>18}")
    for fragile in args.fragile:
        for to in args.to:
            start = time.perf_counter()
            e = rl.extension_effect(n, c, a, b, Extension(int(n[0]), to, fragile))
            print(f"{fragile:>7} {to:>5} {e['fragile']:>8} {e['flips_before']:>17.1f} {e['flips_after']:>6.1f} "
                  f"{e['extra_draws']:>12,} {e['extra_draws'] / e['draws_before']:>18.1%}"
                  f"   ({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
