"""Attribution of Δpass@k against direct computations: contributions by regime and cell from
math.comb, the area over log k by numpy's trapezoid, k* by scanning every k, and the
bootstrap intervals (nested over seeds) recomputed resample by resample."""

from dataclasses import replace
from math import comb

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from boundary.analysis import attribution as at
from boundary.analysis import diagnose as dg
from boundary.analysis import stats
from boundary.analysis.regimes import PAPER, label_counts

N = 16
KS = [1, 2, 8, 16]


def passk(n, c, k):
    return 1 - comb(n - c, k) / comb(n, k)


@pytest.fixture(scope="module")
def setup():
    rng = np.random.default_rng(5)
    P = 60
    ids = [f"q{i:02d}" for i in range(P)]
    w = rng.beta(0.4, 1.0, P)
    w[:8] = 0
    mk = lambda p: pd.DataFrame({"prompt_id": ids, "n": N, "c": rng.binomial(N, np.clip(p, 0, 1))})
    base = mk(w)
    # Sharpened: better on easy prompts, loses the rare ones (a crossover).
    runs = {("grpo", s): mk(np.where(w < 0.15, w * 0.1, np.minimum(1, w * 1.6))) for s in range(3)}
    runs[("pba", 0)] = mk(w)
    regimes = label_counts(mk(w)[["prompt_id", "n", "c"]], replace(PAPER, coverage_k=N))
    d = dg.analyse(base, runs, regimes, ks=KS, resamples=300, boot_seed=4, level=0.9)
    return base, runs, regimes, d


def direct_delta(base, run, k):
    b = base.set_index("prompt_id")
    r = run.set_index("prompt_id").loc[b.index]
    return pd.Series([passk(N, int(rc), k) - passk(N, int(bc), k) for rc, bc in zip(r["c"], b["c"])], index=b.index)


def cell_of(bc, c):
    return "kept" if bc > 0 and c > 0 else "lost" if bc > 0 else "gained" if c > 0 else "never"


def test_contributions_match_direct_sums_and_add_up(setup):
    base, runs, regimes, d = setup
    a = d.attribution
    reg = regimes.set_index("prompt_id")["regime"]
    for (m, s), run in runs.items():
        r = run.set_index("prompt_id")
        cells = pd.Series([cell_of(bc, c) for bc, c in zip(base.set_index("prompt_id").loc[r.index, "c"], r["c"])],
                          index=r.index)
        rows = a[(a["method"] == m) & (a["seed"] == s) & (a["quantity"] == "delta_passk")]
        for k in KS:
            delta = direct_delta(base, run, k)
            sub = rows[rows["k"] == k].set_index(["regime", "cell"])["value"]
            assert sub[("all", "all")] == pytest.approx(delta.mean())
            for regime in set(reg):
                for cell in at.CELLS:
                    sel = (reg.loc[delta.index] == regime) & (cells.loc[delta.index] == cell)
                    assert sub[(regime, cell)] == pytest.approx(delta[sel].sum() / len(delta), abs=1e-12)
            regimes_ = [x for x in set(reg)]
            assert sum(sub[(g, "all")] for g in regimes_) == pytest.approx(sub[("all", "all")])
            assert sum(sub[("all", c)] for c in at.CELLS) == pytest.approx(sub[("all", "all")])
            assert sub[("all", "never")] == 0
        # the seed mean of a method is the mean of its seeds' contributions
    g = a[(a["method"] == "grpo") & (a["quantity"] == "delta_passk") & (a["k"] == 8) & (a["regime"] == "all")
          & (a["cell"] == "lost")]
    assert g[g["seed"].isna()]["value"].iloc[0] == pytest.approx(g[g["seed"].notna()]["value"].mean())
    assert (g[g["seed"].notna()]["value"] <= 0).all()  # a lost prompt only ever takes pass@k away


def test_area_over_log_k_is_the_trapezoid(setup):
    base, runs, _, d = setup
    a = d.attribution
    logk = np.log(np.arange(1, N + 1))
    for (m, s), run in runs.items():
        curve = [direct_delta(base, run, k).mean() for k in range(1, N + 1)]
        area = a[(a["method"] == m) & (a["seed"] == s) & (a["quantity"] == "area_log_k") & (a["regime"] == "all")
                 & (a["cell"] == "all")]["value"].iloc[0]
        assert area == pytest.approx(np.trapezoid(curve, logk))
    assert at.log_k_weights(1).sum() == 0 and at.log_k_weights(5).sum() == pytest.approx(np.log(5))


def test_crossover_is_the_first_k_below_base(setup):
    base, runs, _, d = setup
    x = d.crossover.set_index(["method", "seed"])
    for (m, s), run in runs.items():
        curve = [direct_delta(base, run, k).mean() for k in range(1, N + 1)]
        below = [k for k, v in zip(range(1, N + 1), curve) if v < 0]
        got = x.loc[(m, s), "kstar"]
        assert (got == below[0]) if below else np.isinf(got)
    grpo = d.curves[(d.curves["method"] == "grpo") & d.curves["seed"].isna()]
    mean_curve = np.mean([[direct_delta(base, runs[("grpo", s)], k).mean() for k in range(1, N + 1)] for s in range(3)], 0)
    np.testing.assert_allclose(grpo["delta"], mean_curve)
    assert x.loc[("grpo", pd.NA), "kstar"] == next(k for k, v in zip(range(1, N + 1), mean_curve) if v < 0)
    assert np.isinf(x.loc[("pba", 0), "kstar"]) or x.loc[("pba", 0), "kstar"] >= 1


def test_kstar_interval_rounds_outward_to_the_grid():
    grid = np.array([1, 2, 3, 4, 6, 8])
    draws = np.array([3.0] * 9 + [6.0] * 81 + [8.0] * 10)
    lo, hi = at.kstar_interval(draws, grid, level=0.8)  # 10% and 90% quantiles: 6 and 6
    assert (lo, hi) == (5.0, 6.0)  # a draw at grid 6 crossed somewhere in (4, 6]
    assert at.kstar_interval(np.array([1.0, 1.0]), grid) == (1.0, 1.0)
    assert at.kstar_interval(np.full(5, np.inf), grid) == (np.inf, np.inf)
    assert list(at.first_below(np.array([[0.1, -0.2, 0.3], [0.1, 0.2, 0.3]]), np.array([1, 2, 4]))) == [2, np.inf]


def test_bootstrap_intervals_recomputed_resample_by_resample(setup):
    """Each draw is the contribution on the resampled prompts: per stratum, count-weighted sums
    of the direct per-prompt contributions (same generator, same seed); a method's draw
    re-weights its seeds' draws by the nested seed resample."""
    base, runs, regimes, d = setup
    resamples, seed, _level, k = 300, 4, 0.9, 8
    order = sorted(base["prompt_id"])
    labels = regimes.set_index("prompt_id").loc[order, "regime"].to_numpy()
    codes, names = pd.factorize(labels)
    members = [np.flatnonzero(codes == g) for g in range(len(names))]
    weights = np.zeros((resamples, len(order)))
    for start, m, ws in stats.resample_counts(codes, len(names), resamples, seed):
        for rows, w in zip(members, ws):
            weights[start:start + m, rows] = w
    per_seed = []
    for s in range(3):
        run = runs[("grpo", s)]
        delta = direct_delta(base, run, k).loc[order].to_numpy()
        c = run.set_index("prompt_id").loc[order, "c"].to_numpy()
        bc = base.set_index("prompt_id").loc[order, "c"].to_numpy()
        lost = np.array([cell_of(b, x) == "lost" for b, x in zip(bc, c)])
        per_seed.append(weights @ (delta * lost) / len(order))
        row = d.attribution[(d.attribution["method"] == "grpo") & (d.attribution["seed"] == s)
                            & (d.attribution["quantity"] == "delta_passk") & (d.attribution["k"] == k)
                            & (d.attribution["regime"] == "all") & (d.attribution["cell"] == "lost")].iloc[0]
        lo, hi = np.quantile(per_seed[-1], [0.05, 0.95])
        assert row["boot_low"] == pytest.approx(lo, abs=1e-6) and row["boot_high"] == pytest.approx(hi, abs=1e-6)
    nested = np.einsum("bs,sb->b", stats.seed_weights(3, resamples, seed), np.array(per_seed))
    row = d.attribution[(d.attribution["method"] == "grpo") & d.attribution["seed"].isna()
                        & (d.attribution["quantity"] == "delta_passk") & (d.attribution["k"] == k)
                        & (d.attribution["regime"] == "all") & (d.attribution["cell"] == "lost")].iloc[0]
    lo, hi = np.quantile(nested, [0.05, 0.95])
    assert row["boot_low"] == pytest.approx(lo, abs=1e-6) and row["boot_high"] == pytest.approx(hi, abs=1e-6)
    # Nesting over seeds widens the interval over the seed-average of one shared prompt draw.
    flat = np.quantile(np.mean(per_seed, axis=0), [0.05, 0.95])
    assert hi - lo >= flat[1] - flat[0]


def test_single_seed_method_equals_its_run_and_a_copy_of_base_is_zero(setup):
    base, runs, regimes, _ = setup
    d = dg.analyse(base, {("copy", 0): base.copy(), ("pba", 0): runs[("pba", 0)]}, regimes, ks=KS, resamples=100)
    a = d.attribution
    copy = a[a["method"] == "copy"]
    assert (copy["value"] == 0).all() and (copy["boot_low"] == 0).all() and (copy["boot_high"] == 0).all()
    assert np.isinf(d.crossover.set_index("method").loc["copy", "kstar"].iloc[0])
    pba = a[a["method"] == "pba"]
    run, mean = pba[pba["seed"] == 0], pba[pba["seed"].isna()]
    np.testing.assert_allclose(run["value"].to_numpy(), mean["value"].to_numpy())
    np.testing.assert_allclose(run["boot_low"].to_numpy(), mean["boot_low"].to_numpy(), atol=1e-7)


def test_no_regimes_attributes_to_cells_only(setup):
    base, runs, _, _ = setup
    d = dg.analyse(base, {("pba", 0): runs[("pba", 0)]}, None, ks=KS, resamples=50)
    assert set(d.attribution["regime"]) == {"all"}
    sub = d.attribution[(d.attribution["seed"] == 0) & (d.attribution["k"] == 1)].set_index("cell")["value"]
    assert sub[list(at.CELLS)].sum() == pytest.approx(sub["all"])


def test_lost_evidence_against_fisher_and_the_floor(setup):
    base, runs, _, d = setup
    p = d.prompts
    b = base.set_index("prompt_id")["c"]
    for (m, s), run in runs.items():
        r = run.set_index("prompt_id")["c"]
        lost = [i for i in r.index if b[i] > 0 and r[i] == 0]
        fisher = {i: sps.fisher_exact([[b[i], N - b[i]], [0, N]], alternative="greater")[1] for i in lost}
        mine = p[(p["method"] == m) & (p["seed"] == s)].set_index("prompt_id")
        for i in lost:
            assert mine.loc[i, "lost_p"] == pytest.approx(fisher[i])
            assert mine.loc[i, "lost_significant"] == (fisher[i] < 0.1)  # level 0.9
        metrics = d.metrics[(d.metrics["method"] == m) & (d.metrics["seed"] == s) & (d.metrics["regime"] == "all")]
        val = metrics.set_index("metric")["value"]
        assert val["lost"] == len(lost) and val["lost_significant"] == sum(v < 0.1 for v in fisher.values())
        base_rows = p[p["method"] == "base"]
        a0, b0 = base_rows["prior_a"].iloc[0], base_rows["prior_b"].iloc[0]  # the base's fitted prior
        null = sum(sps.betabinom.pmf(0, N, b[i] + a0, N - b[i] + b0) for i in b.index if b[i] > 0)
        assert val["lost_null"] == pytest.approx(null)
        assert val["lost_floor"] == pytest.approx(1 - 0.1 ** (1 / N))
        assert sps.binom.pmf(0, N, val["lost_floor"]) == pytest.approx(0.1)


def test_credible_intervals_use_the_fitted_prior(setup):
    base, runs, _, d = setup
    p = d.prompts
    mine = p[(p["method"] == "grpo") & (p["seed"] == 1)]
    a, b = stats.fit_beta_binomial(mine["n"], mine["c"])
    assert mine["prior_a"].iloc[0] == pytest.approx(a) and mine["prior_b"].iloc[0] == pytest.approx(b)
    lo = sps.beta.ppf(0.05, mine["c"] + a, mine["n"] - mine["c"] + b)
    hi = sps.beta.ppf(0.95, mine["c"] + a, mine["n"] - mine["c"] + b)
    np.testing.assert_allclose(mine["p_low"], lo)
    np.testing.assert_allclose(mine["p_high"], hi)
    j = dg.analyse(base, runs, None, ks=KS, resamples=20, prior="jeffreys", attribution=False).prompts
    assert (j["prior_a"] == 0.5).all() and j["p_low"].iloc[0] == pytest.approx(
        sps.beta.ppf(0.025, j["c"].iloc[0] + 0.5, N - j["c"].iloc[0] + 0.5))
