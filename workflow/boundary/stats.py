"""Seed statistics: mean, sample SD, Student-t intervals, seed-paired gains, prompt bootstrap.

Seeds are the unit of replication for training (the paper's primary interval): with s seeds,
the interval is mean +- t_{0.975, s-1} * sd / sqrt(s), sd with ddof=1. One seed (or a fixed
base) gives sd, ci_low and ci_high = NaN rather than a fake zero-width interval.
The prompt bootstrap is the audit interval for one run: resample prompts with replacement,
recompute the mean, take percentiles.

CLI (the paper's summarize_seeds):
    boundary seeds FILE [--pair A B] [--level 0.95] --out DIR
FILE is a long table (CSV, parquet or JSONL) with columns method, metric, seed, value, plus
optional key columns benchmark, regime, k. Writes DIR/seeds.csv (keys, mean, sd, ci_low,
ci_high, n_seeds) and, with --pair A B, DIR/pairs.csv (the seed-paired differences A - B,
over the seeds both methods have).
"""

from __future__ import annotations


import numpy as np
import pandas as pd
from scipy import stats as sps

from boundary.artifacts import atomic_dir, output_folder, read_table, write_table
from boundary.errors import BoundaryError

OWNER = "boundary seeds"
OPTIONAL_KEYS = ("benchmark", "regime", "k")
SUMMARY_COLUMNS = ["mean", "sd", "ci_low", "ci_high", "n_seeds"]


def t_interval(mean, sd, n, level: float = 0.95):
    """Two-sided Student-t interval, df = n - 1; NaN where n < 2."""
    mean, sd, n = (np.asarray(x, dtype=float) for x in (mean, sd, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = sps.t.ppf(0.5 + level / 2, np.where(n >= 2, n - 1, np.nan)) * sd / np.sqrt(n)
    return mean - half, mean + half


def summarize(df: pd.DataFrame, keys, value: str = "value", level: float = 0.95) -> pd.DataFrame:
    """Mean, sample SD, t interval and count of `value` over the rows of each key group."""
    keys = list(keys)
    g = df.groupby(keys, dropna=False, sort=False)[value]
    out = g.agg(mean="mean", sd="std", n_seeds="count").reset_index()  # std: ddof=1, NaN for 1
    out["ci_low"], out["ci_high"] = t_interval(out["mean"], out["sd"], out["n_seeds"], level)
    return out[keys + SUMMARY_COLUMNS]


def paired(df: pd.DataFrame, a: str, b: str, keys=("metric",), value: str = "value",
           level: float = 0.95) -> pd.DataFrame:
    """Seed-paired differences A - B per key group (seeds both methods have), summarised."""
    keys = list(keys)
    left = df[df["method"] == a][keys + ["seed", value]]
    right = df[df["method"] == b][keys + ["seed", value]]
    both = left.merge(right, on=keys + ["seed"], suffixes=("_a", "_b"))
    both[value] = both[f"{value}_a"] - both[f"{value}_b"]
    return summarize(both, keys, value, level)


def bootstrap_means(values, resamples: int = 10_000, seed: int = 0, strata=None, chunk: int = 500):
    """Resampled column means of `values` (prompts x series): (overall, {stratum: means}),
    each an array (resamples x series).

    A resample draws prompts with replacement -- within each stratum when `strata` (one label
    per prompt) is given, so stratum sizes stay fixed as in a regime-controlled split. Per
    stratum, the integer index matrix of a chunk of resamples becomes a count matrix w
    (bincount), and w @ values gives every series' resampled sum in one BLAS call; all
    series share each resample, so differences of series are paired.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    n_prompts, n_series = v.shape
    labels = np.zeros(n_prompts, dtype=object) if strata is None else np.asarray(strata, dtype=object)
    codes, names = pd.factorize(labels)  # first-seen order
    blocks, centres = [], []
    for g in range(len(names)):
        # float32 BLAS on deviations from the stratum mean: the mean itself stays exact.
        block = v[codes == g]
        centre = block.mean(axis=0)
        blocks.append((block - centre).astype(np.float32))
        centres.append(centre)
    rng = np.random.default_rng(seed)
    overall = np.zeros((resamples, n_series))
    per = [np.empty((resamples, n_series)) for _ in names]
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        for out, block, centre in zip(per, blocks, centres):
            size = len(block)
            idx = rng.integers(0, size, size=(m, size))
            idx += (np.arange(m) * size)[:, None]  # row r's draws count into r * size + prompt
            w = np.bincount(idx.ravel(), minlength=m * size).reshape(m, size).astype(np.float32)
            sums = (w @ block).astype(np.float64) + size * centre  # rows of w sum to size
            overall[start:start + m] += sums
            out[start:start + m] = sums / size
    overall /= max(n_prompts, 1)
    if n_prompts == 0:
        overall[:] = np.nan
    return overall, ({} if strata is None else dict(zip(names, per)))


def percentile_interval(draws, level: float = 0.95):
    alpha = (1 - level) / 2
    lo, hi = np.quantile(draws, [alpha, 1 - alpha], axis=0)
    return lo, hi


def bootstrap_ci(values, resamples: int = 10_000, seed: int = 0, level: float = 0.95, strata=None):
    """Percentile prompt-bootstrap intervals of the column means of `values`.
    Returns ((lo, hi) of the overall means, {stratum: (lo, hi) of that stratum's means})."""
    overall, per = bootstrap_means(values, resamples, seed, strata)
    return percentile_interval(overall, level), {g: percentile_interval(d, level) for g, d in per.items()}


def seed_keys(df: pd.DataFrame) -> list[str]:
    return ["method", "metric"] + [k for k in OPTIONAL_KEYS if k in df.columns]


def main(argv=None) -> None:
    from boundary.cli import LEVEL, ArgumentParser

    ap = ArgumentParser(prog="boundary seeds", description=__doc__.splitlines()[0])
    ap.add_argument("file", help="long table: method, metric, seed, value [, benchmark, regime, k]")
    ap.add_argument("--pair", nargs=2, metavar=("A", "B"), help="seed-paired differences A - B")
    ap.add_argument("--level", type=LEVEL, default=0.95)
    ap.add_argument("--out", required=True, help="output folder, replaced as a whole")
    args = ap.parse_args(argv)
    out = output_folder(args.out, OWNER)
    df = read_table(args.file, ["method", "metric", "seed", "value"])
    keys = seed_keys(df)
    if df.empty:
        raise BoundaryError(f"{args.file}: no rows")
    if not pd.api.types.is_numeric_dtype(df["value"]) or not np.isfinite(df["value"]).all():
        raise BoundaryError(f"{args.file}: column value must hold finite numbers, no blanks")
    seed = pd.to_numeric(df["seed"], errors="coerce")
    if seed.isna().any() or (seed != np.round(seed)).any():
        raise BoundaryError(f"{args.file}: column seed must hold whole numbers")
    dup = df.duplicated(keys + ["seed"])
    if dup.any():
        row = df[dup].iloc[0]
        raise BoundaryError(f"{args.file}: duplicate row for {', '.join(f'{k}={row[k]}' for k in keys + ['seed'])}")
    seeds = summarize(df, keys, level=args.level)
    pairs = None
    if args.pair:
        a, b = args.pair
        if a == b:
            raise BoundaryError(f"--pair {a} {b}: two different methods, please")
        for m in (a, b):
            if m not in set(df["method"]):
                raise BoundaryError(f"{args.file}: --pair method {m!r} not in column method")
        pairs = paired(df, a, b, [k for k in keys if k != "method"], level=args.level)
        if pairs.empty:
            raise BoundaryError(f"{args.file}: methods {a} and {b} share no seed")
        pairs.insert(0, "b", b)
        pairs.insert(0, "a", a)
    with atomic_dir(out, OWNER) as tmp:  # --out holds exactly this run's files
        write_table(seeds, tmp / "seeds.csv")
        if pairs is not None:
            write_table(pairs, tmp / "pairs.csv")
    print(f"seeds: {len(seeds)} summaries -> {out / 'seeds.csv'}")
