"""Seed statistics: mean, sample SD, Student-t intervals, seed-paired gains, prompt bootstrap
(nested over seeds), and per-prompt evidence (Beta-Binomial intervals, the "lost" test).

Seeds are the unit of replication for training (the paper's primary interval): with s seeds,
the interval is mean +- t_{0.975, s-1} * sd / sqrt(s), sd with ddof=1. One seed (or a fixed
base) gives sd, ci_low and ci_high = NaN rather than a fake zero-width interval.
The prompt bootstrap is the audit interval for one run: resample prompts with replacement,
recompute the mean, take percentiles; nested over seeds, each resample also redraws the
training seeds (with replacement) on top of the shared prompt resample. Where prompts share
structure (a cluster id per prompt: an operand pair, a source problem), whole clusters are
redrawn instead, and a mean is the ratio of the drawn prompts' sum to their number.

The base is a random draw too. Its evaluations at several seeds are pooled per prompt for
counts (`pool_counts`: n and c summed; its pass@k is the mean of the draws' estimates,
diagnose.py); a Δ's seed-level interval adds the base's own variance, estimated from the
spread of its draws (`with_reference_noise`: Welch's interval for a difference of two means,
conservative df); the prompt bootstrap resamples each prompt's (trained - base) difference as
one unit, so each prompt's base estimate's noise is in it already.

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
from scipy import optimize
from scipy import stats as sps
from scipy.special import betaln, digamma, gammaln
from threadpoolctl import threadpool_limits

from boundary.core.artifacts import atomic_dir, output_folder, read_table, write_table
from boundary.core.errors import BoundaryError
from boundary.core.passk import is_sequential, sequential_view
from boundary.core.sequential import pool_sequential

OWNER = "boundary seeds"
OPTIONAL_KEYS = ("benchmark", "regime", "k")
SUMMARY_COLUMNS = ["mean", "sd", "ci_low", "ci_high", "n_seeds"]


def t_interval(mean, sd, n, level: float = 0.95):
    """Two-sided Student-t interval, df = n - 1; NaN where n < 2."""
    mean, sd, n = (np.asarray(x, dtype=float) for x in (mean, sd, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = sps.t.ppf(0.5 + level / 2, np.where(n >= 2, n - 1, np.nan)) * sd / np.sqrt(n)
    return mean - half, mean + half


def wilson(successes, n, level: float = 0.95):
    """Wilson score interval of a binomial proportion (successes of n independent trials); NaN
    where n = 0. Unlike the Wald interval it stays inside [0, 1] and keeps its coverage near 0
    and 1, where a share of a small sample often sits."""
    k, n = np.asarray(successes, dtype=float), np.asarray(n, dtype=float)
    z = sps.norm.ppf(0.5 + level / 2)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo = np.where(k == 0, 0.0, centre - half)  # exactly 0 and 1 at the ends, not a rounding off them
    hi = np.where(k == n, 1.0, centre + half)
    return np.where(n > 0, lo, np.nan)[()], np.where(n > 0, hi, np.nan)[()]  # [()]: a scalar for scalars


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


def _draw_counts(rng, m: int, size: int) -> np.ndarray:
    """(m x size) counts of `size` draws with replacement from `size` items, per row."""
    idx = rng.integers(0, size, size=(m, size))
    idx += (np.arange(m) * size)[:, None]  # row r's draws count into r * size + item
    return np.bincount(idx.ravel(), minlength=m * size).reshape(m, size).astype(np.float32)


def with_reference_noise(summary: pd.DataFrame, reference: pd.DataFrame, keys, value: str = "value",
                         level: float = 0.95) -> pd.DataFrame:
    """The seed-level intervals of Δ rows widened by the reference's own sampling noise.

    `summary` holds Δ = mean over a method's seeds of (trained - base), the base's value the mean
    over its B draws, summarised over the seeds (`summarize`); `reference` the same metric's
    base value per draw (column `draw`). Var(Δ) = sd_t^2 / S + sd_b^2 / B (sd_b the SD over the
    draws), and the interval is
    Welch's with the conservative df = min(S, B) - 1 (Welch-Satterthwaite's df can exceed S - 1,
    so adding the base's variance could narrow the interval; this df never lets it). Adds
    base_sd and base_draws; with one draw (or none) sd_b is unknown: base_sd NaN and the
    interval as it was."""
    keys = list(keys)
    ref = reference.groupby(keys, dropna=False, sort=False)[value].agg(base_sd="std", base_draws="count").reset_index()
    out = summary.drop(columns=[c for c in ("base_sd", "base_draws") if c in summary]).merge(ref, on=keys, how="left")
    out["base_draws"] = out["base_draws"].fillna(0).astype(np.int64)
    s, b = out["n_seeds"].to_numpy(float), out["base_draws"].to_numpy(float)
    vt, vb = out["sd"].to_numpy(float) ** 2 / s, out["base_sd"].to_numpy(float) ** 2 / np.maximum(b, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        half = sps.t.ppf(0.5 + level / 2, np.minimum(s, b) - 1) * np.sqrt(vt + vb)
    known = (b >= 2) & np.isfinite(half)
    out.loc[known, "ci_low"] = out["mean"].to_numpy()[known] - half[known]
    out.loc[known, "ci_high"] = out["mean"].to_numpy()[known] + half[known]
    return out


def pool_counts(draws: list[pd.DataFrame]) -> pd.DataFrame:
    """One counts frame from several independent evaluations of the same prompts: n and c summed
    (pass@k from the pooled counts is unbiased, with less variance than any one draw), entropy
    the n-weighted mean, answers their union (unique_positives its size), and the modal answer
    the one that is modal in the draws holding the most samples of it (modal_share: those
    samples over the pooled n, a lower bound where the draws disagree). Where any draw is
    sequential, the pooled row is sequential too (`sequential.pool_sequential`: the blocks as
    one block, first success within the summed caps), so its pass@k is unbiased at every k up
    to the pooled cap and c > 0 is "a success within all the draws", as with full draws."""
    if len(draws) == 1:
        return draws[0]
    ids = [set(d["prompt_id"]) for d in draws]
    if any(i != ids[0] for i in ids[1:]):
        raise BoundaryError("base draws: they do not evaluate the same prompts")
    # the readouts of every sample (entropy, modal share) are a sequential draw's block's: weigh by it
    x = pd.concat([d.assign(draw=i, _w=sequential_view(d)[0]) for i, d in enumerate(draws)], ignore_index=True)
    g = x.groupby("prompt_id", sort=False)
    out = g[["n", "c"]].sum().reset_index()
    weight = g["_w"].sum().reindex(out["prompt_id"]).to_numpy()
    if any(is_sequential(d) for d in draws):
        out = out.merge(pool_sequential(draws, out["prompt_id"]), on="prompt_id")
    if "entropy" in x:
        w = x.assign(_e=x["entropy"] * x["_w"]).groupby("prompt_id", sort=False)["_e"].sum()
        out["entropy"] = w.reindex(out["prompt_id"]).to_numpy() / weight
    if "answers" in x:
        union = g["answers"].agg(lambda s: sorted({a for v in s if v is not None for a in v}))
        out["answers"] = union.to_numpy()
        out["unique_positives"] = [len(a) for a in out["answers"]]
    if {"modal_answer", "modal_share"} <= set(x.columns):
        y = x.assign(_k=x["modal_share"] * x["_w"]).groupby(["prompt_id", "modal_answer"], sort=False)["_k"].sum()
        top = y.reset_index().sort_values(["prompt_id", "_k", "modal_answer"], ascending=[True, False, True])
        top = top.drop_duplicates("prompt_id").set_index("prompt_id")
        out["modal_answer"] = top["modal_answer"].reindex(out["prompt_id"]).to_numpy()
        out["modal_share"] = top["_k"].reindex(out["prompt_id"]).to_numpy() / weight
    return out


def resample_counts(codes, n_strata: int, resamples: int, seed: int = 0, chunk: int = 500, clusters=None):
    """Prompt resamples as count matrices, chunk by chunk: yields (start, m, [W_g]), W_g an
    (m x size_g) float32 matrix of how often each prompt of stratum g is drawn in each of the
    m resamples (prompts drawn with replacement within their stratum; rows sum to size_g).

    With `clusters` (one id per prompt), clusters are drawn instead and each prompt counts as
    often as its cluster: within each stratum where every cluster lies in one stratum, else
    over all prompts (a cluster spanning regimes is drawn whole). Rows then need not sum to
    size_g. Every bootstrap here draws from this one generator, so calls with the same seed,
    strata and clusters see the same resamples; without clusters, the resamples of before."""
    codes = np.asarray(codes)
    sizes = np.bincount(codes, minlength=n_strata) if codes.size else np.zeros(n_strata, int)
    rng = np.random.default_rng(seed)
    if clusters is not None:
        cl, _ = pd.factorize(np.asarray(clusters, dtype=object))
        nested = pd.Series(codes).groupby(cl).nunique().max() <= 1 if len(cl) else True
        groups = ([np.unique(cl[codes == g]) for g in range(n_strata)] if nested else [np.unique(cl)])
    for start in range(0, resamples, chunk):
        m = min(chunk, resamples - start)
        if clusters is None:
            yield start, m, [_draw_counts(rng, m, size) for size in sizes]
            continue
        per_cluster = np.zeros((m, cl.max() + 1 if len(cl) else 0), np.float32)
        for members in groups:
            per_cluster[:, members] = _draw_counts(rng, m, len(members))
        yield start, m, [per_cluster[:, cl[codes == g]] for g in range(n_strata)]


def bootstrap_blocks(blocks, resamples: int = 10_000, seed: int = 0, strata=None, chunk: int = 500,
                     clusters=None):
    """Resampled column means of several (prompts x series) blocks under the same resamples.

    `blocks` is a list of (values, by_stratum); returns one (overall, {stratum: means}) per
    block, each an array (resamples x series); per-stratum means only where by_stratum (they
    cost memory). The count matrix W of a chunk of resamples times the blocks side by side
    gives every series' resampled sum in one BLAS call per stratum; all series share each
    resample, so differences of series are paired. `clusters`: see `resample_counts` (a mean
    is then the drawn sum over the drawn count; NaN for a stratum no draw reached).
    """
    arrays = []
    for values, _ in blocks:
        v = np.asarray(values, dtype=np.float64)
        arrays.append(v[:, None] if v.ndim == 1 else v)
    n_prompts = arrays[0].shape[0] if arrays else 0
    widths = np.cumsum([0] + [v.shape[1] for v in arrays])
    values = np.hstack(arrays) if arrays else np.zeros((0, 0))
    labels = np.zeros(n_prompts, dtype=object) if strata is None else np.asarray(strata, dtype=object)
    codes, names = pd.factorize(labels)  # first-seen order
    parts = []
    for g in range(len(names)):
        # float32 BLAS on deviations from the stratum mean: the mean itself stays exact.
        block = values[codes == g]
        centre = block.mean(axis=0)
        parts.append(((block - centre).astype(np.float32), centre))
    total = np.zeros((resamples, values.shape[1]))
    keep = [by_stratum and strata is not None for _, by_stratum in blocks]
    kept = np.concatenate([np.arange(widths[i], widths[i + 1]) for i, k in enumerate(keep) if k] or [[]]).astype(int)
    per = [np.empty((resamples, len(kept))) for _ in names]
    # One BLAS thread: these products are too small for threads to pay, and on a shared
    # machine OpenBLAS's spinning threads made them 2-5x slower (benchmarks/bench_diagnose.py).
    drawn = np.zeros((resamples, 1))
    with threadpool_limits(1, "blas"), np.errstate(invalid="ignore", divide="ignore"):
        for start, m, ws in resample_counts(codes, len(names), resamples, seed, chunk, clusters):
            for g, (w, (block, centre)) in enumerate(zip(ws, parts)):
                size = w.sum(axis=1, dtype=np.float64)[:, None]  # len(block) without clusters
                sums = (w @ block).astype(np.float64) + size * centre
                total[start:start + m] += sums
                drawn[start:start + m] += size
                if len(kept):
                    per[g][start:start + m] = sums[:, kept] / size
        total /= drawn
    if n_prompts == 0:
        total[:] = np.nan
    result, at = [], 0
    for i, k in enumerate(keep):
        width = widths[i + 1] - widths[i]
        stratum = {name: p[:, at:at + width] for name, p in zip(names, per)} if k else {}
        at += width if k else 0
        result.append((total[:, widths[i]:widths[i + 1]], stratum))
    return result


def bootstrap_means(values, resamples: int = 10_000, seed: int = 0, strata=None, chunk: int = 500,
                    clusters=None):
    """Resampled column means of `values` (prompts x series): (overall, {stratum: means}),
    each an array (resamples x series).

    A resample draws prompts with replacement -- within each stratum when `strata` (one label
    per prompt) is given, so stratum sizes stay fixed as in a regime-controlled split; whole
    clusters when `clusters` (one id per prompt) is given.
    """
    return bootstrap_blocks([(values, strata is not None)], resamples, seed, strata, chunk, clusters)[0]


def seed_weights(n_seeds: int, resamples: int, seed: int = 0) -> np.ndarray:
    """(resamples x n_seeds) weights of seeds drawn with replacement (counts / n_seeds): the
    outer level of a bootstrap nested over training seeds. Its own stream, apart from the
    prompt resamples of the same seed."""
    rng = np.random.default_rng([seed, 1])
    idx = rng.integers(0, n_seeds, size=(resamples, n_seeds)) + (np.arange(resamples) * n_seeds)[:, None]
    counts = np.bincount(idx.ravel(), minlength=resamples * n_seeds).reshape(resamples, n_seeds)
    return counts / n_seeds


def nested_over_seeds(draws, weights) -> np.ndarray:
    """Seed-mean draws from per-seed draws (seeds x resamples x series) that share the prompt
    resamples, each resample re-weighting the seeds by `weights` (resamples x seeds)."""
    return np.einsum("bs,sbj->bj", weights, np.asarray(draws))


def percentile_interval(draws, level: float = 0.95):
    """Percentile interval over the draws (axis 0); a draw that is NaN (a cluster resample that
    left a stratum empty) is left out."""
    alpha = (1 - level) / 2
    draws = np.asarray(draws)
    quantile = np.nanquantile if np.isnan(draws).any() else np.quantile
    lo, hi = quantile(draws, [alpha, 1 - alpha], axis=0)
    return lo, hi


def bootstrap_ci(values, resamples: int = 10_000, seed: int = 0, level: float = 0.95, strata=None, clusters=None):
    """Percentile prompt-bootstrap intervals of the column means of `values` (clusters: one id
    per prompt, redrawn whole). Returns ((lo, hi) of the overall means, {stratum: (lo, hi)})."""
    overall, per = bootstrap_means(values, resamples, seed, strata, clusters=clusters)
    return percentile_interval(overall, level), {g: percentile_interval(d, level) for g, d in per.items()}


# ----------------------------------------------------------------------------- per prompt

def _log_comb(n, k):
    return gammaln(np.asarray(n, float) + 1) - gammaln(np.asarray(k, float) + 1) - gammaln(np.asarray(n, float) - k + 1)


def lost_p_value(base_n, base_c, n) -> np.ndarray:
    """One-sided Fisher exact p-value that a prompt with base_c of base_n base successes and 0
    of n trained successes lost mass: under equal success rates, the chance that all base_c
    + 0 successes fall on the base side, C(base_n, base_c) / C(base_n + n, base_c).
    (scipy.stats.fisher_exact([[base_c, base_n - base_c], [0, n]], 'greater').)"""
    base_n, base_c, n = (np.asarray(x, float) for x in (base_n, base_c, n))
    return np.exp(_log_comb(base_n, base_c) - _log_comb(base_n + n, base_c))


def zero_upper_bound(n, level: float = 0.95) -> np.ndarray:
    """One-sided upper confidence bound on p after 0 successes in n draws: 1 - (1-level)^(1/n).
    A 0/n prompt is consistent with any p below it (about 3/n at 95%): the detection floor."""
    return 1.0 - (1.0 - level) ** (1.0 / np.asarray(n, float))


def zero_predictive(n, base_n, base_c, a: float = 0.5, b: float = 0.5) -> np.ndarray:
    """Chance of 0 successes in n fresh draws from a prompt whose base showed base_c of base_n,
    p drawn from its Beta(base_c + a, base_n - base_c + b) posterior (Beta-Binomial
    predictive): how often "lost" appears with nothing changed."""
    n, base_n, base_c = (np.asarray(x, float) for x in (n, base_n, base_c))
    a1, b1 = base_c + a, base_n - base_c + b
    return np.exp(betaln(a1, b1 + n) - betaln(a1, b1))


def fit_beta_binomial(n, c, bounds=(1e-2, 1e4)) -> tuple[float, float]:
    """Maximum marginal likelihood (a, b) of the Beta-Binomial model c ~ Bin(n, p),
    p ~ Beta(a, b) over a run's prompts (empirical Bayes). Bounded, so a degenerate run (every
    prompt 0/n) still gives a proper prior."""
    n, c = np.asarray(n, np.int64), np.asarray(c, np.int64)
    pairs, weight = np.unique(np.stack([n, c]), axis=1, return_counts=True)
    nn, cc = pairs[0].astype(float), pairs[1].astype(float)
    lo, hi = np.log(bounds[0]), np.log(bounds[1])

    def nll(theta):
        a, b = np.exp(theta)
        ll = betaln(cc + a, nn - cc + b) - betaln(a, b)
        da = digamma(cc + a) - digamma(nn + a + b) - digamma(a) + digamma(a + b)
        db = digamma(nn - cc + b) - digamma(nn + a + b) - digamma(b) + digamma(a + b)
        return -np.sum(weight * ll), -np.array([np.sum(weight * da) * a, np.sum(weight * db) * b])

    p = np.clip(np.sum(weight * cc) / max(np.sum(weight * nn), 1), 0.05, 0.95)
    start = np.log([p, 1 - p])  # prior mean at the pooled rate, strength 1
    res = optimize.minimize(nll, start, jac=True, method="L-BFGS-B", bounds=[(lo, hi), (lo, hi)])
    a, b = np.exp(res.x)
    return float(a), float(b)


def credible_interval(n, c, a: float = 0.5, b: float = 0.5, level: float = 0.95):
    """Equal-tailed posterior interval of p under a Beta(a, b) prior: Beta(c + a, n - c + b)
    quantiles. a = b = 0.5 is Jeffreys' prior; fit_beta_binomial gives the empirical one."""
    n, c = np.asarray(n, float), np.asarray(c, float)
    alpha = (1 - level) / 2
    return sps.beta.ppf(alpha, c + a, n - c + b), sps.beta.ppf(1 - alpha, c + a, n - c + b)


def seed_keys(df: pd.DataFrame) -> list[str]:
    return ["method", "metric"] + [k for k in OPTIONAL_KEYS if k in df.columns]


def make_parser():
    from boundary.core.options import LEVEL, ArgumentParser, description
    from boundary.core.settings import defaults

    ap = ArgumentParser(prog="boundary seeds", description=description(__doc__),
                        epilog="example:\n  boundary seeds results/testbed/diagnostics/diagnostic/metrics.csv "
                               "--pair pba grpo --out seeds")
    ap.add_argument("file", help="long table (CSV, parquet or JSONL): method, metric, seed, value "
                                 "[, benchmark, regime, k]")
    ap.add_argument("--pair", nargs=2, metavar=("A", "B"), help="seed-paired differences A - B (pairs.csv)")
    ap.add_argument("--level", type=LEVEL, default=defaults("report")["level"], help="level of the t intervals")
    ap.add_argument("--out", required=True, help="output folder, replaced as a whole")
    return ap


def main(argv=None) -> None:
    args = make_parser().parse_args(argv)
    out = output_folder(args.out, OWNER)
    # names as written, never blank (a null would drop out of every groupby without a word)
    df = read_table(args.file, ["method", "metric", "seed", "value"], ids=("method", "metric", "benchmark", "regime"))
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
