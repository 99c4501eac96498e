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

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as sps

from boundary.artifacts import read_table, write_table
from boundary.errors import BoundaryError

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


def bootstrap_ci(values, resamples: int = 10_000, seed: int = 0, level: float = 0.95,
                 strata=None, chunk: int = 500):
    """Percentile prompt-bootstrap intervals of the column means of `values` (prompts x series).

    A resample draws prompts with replacement -- within each stratum when `strata` (one label
    per prompt) is given, so stratum sizes stay fixed as in a regime-controlled split. Its
    count vector w turns every series' resampled mean into one product w @ values / P, so all
    series share each resample and the work is a few BLAS calls per chunk of resamples.
    Returns ((lo, hi) of the overall means, {stratum: (lo, hi) of that stratum's means}).
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    n_prompts, n_series = v.shape
    labels = np.zeros(n_prompts, dtype=object) if strata is None else np.asarray(strata, dtype=object)
    names = list(dict.fromkeys(labels))  # first-seen order
    codes = pd.factorize(labels)[0] if n_prompts else np.zeros(0, int)
    order = np.argsort(codes, kind="stable")  # strata become contiguous blocks of rows
    v, sizes = v[order], np.bincount(codes, minlength=len(names))
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    if n_prompts == 0:
        nan = np.full(n_series, np.nan)
        return (nan, nan.copy()), {}
    rng = np.random.default_rng(seed)
    overall = np.empty((resamples, n_series))
    per = [np.empty((resamples, n_series)) for _ in names]
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        # Index matrix (m x P) of drawn prompts, stratum by stratum, then counts per row.
        idx = np.concatenate([off + rng.integers(0, size, size=(m, size))
                              for off, size in zip(offsets, sizes)], axis=1)
        w = np.bincount((idx + np.arange(m)[:, None] * n_prompts).ravel(), minlength=m * n_prompts)
        w = w.reshape(m, n_prompts).astype(np.float64)
        overall[start:start + m] = (w @ v) / n_prompts
        if strata is not None:
            for out, off, size in zip(per, offsets, sizes):
                block = slice(off, off + size)
                out[start:start + m] = (w[:, block] @ v[block]) / size
    alpha = (1 - level) / 2
    q = lambda a: tuple(np.quantile(a, [alpha, 1 - alpha], axis=0))
    if strata is None:
        return q(overall), {}
    return q(overall), {g: q(out) for g, out in zip(names, per)}


def seed_keys(df: pd.DataFrame) -> list[str]:
    return ["method", "metric"] + [k for k in OPTIONAL_KEYS if k in df.columns]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="boundary seeds", description=__doc__.splitlines()[0])
    ap.add_argument("file", help="long table: method, metric, seed, value [, benchmark, regime, k]")
    ap.add_argument("--pair", nargs=2, metavar=("A", "B"), help="seed-paired differences A - B")
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--out", required=True, help="output folder")
    args = ap.parse_args(argv)
    df = read_table(args.file, ["method", "metric", "seed", "value"])
    keys = seed_keys(df)
    if df["value"].isna().any() or not pd.api.types.is_numeric_dtype(df["value"]):
        raise BoundaryError(f"{args.file}: column value must be numeric with no blanks")
    dup = df.duplicated(keys + ["seed"])
    if dup.any():
        row = df[dup].iloc[0]
        raise BoundaryError(f"{args.file}: duplicate row for {', '.join(f'{k}={row[k]}' for k in keys + ['seed'])}")
    seeds = summarize(df, keys, level=args.level)
    pairs = None
    if args.pair:
        a, b = args.pair
        for m in (a, b):
            if m not in set(df["method"]):
                raise BoundaryError(f"{args.file}: --pair method {m!r} not in column method")
        pairs = paired(df, a, b, [k for k in keys if k != "method"], level=args.level)
        if pairs.empty:
            raise BoundaryError(f"{args.file}: methods {a} and {b} share no seed")
        pairs.insert(0, "b", b)
        pairs.insert(0, "a", a)
    out = Path(args.out)
    write_table(seeds, out / "seeds.csv")
    if pairs is not None:
        write_table(pairs, out / "pairs.csv")
    print(f"seeds: {len(seeds)} summaries -> {out / 'seeds.csv'}")
