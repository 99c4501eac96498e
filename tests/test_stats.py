"""Seed statistics against scipy's t quantiles and hand computations; the bootstrap against
its sampling distribution; the seeds CLI end to end."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from boundary.analysis import stats
from boundary.core.errors import BoundaryError


def test_t_interval_matches_scipy():
    x = np.array([25.1, 24.3, 26.0])
    m, sd = x.mean(), x.std(ddof=1)
    half = sps.t.ppf(0.975, 2) * sd / math.sqrt(3)
    lo, hi = stats.t_interval(m, sd, 3)
    assert lo == pytest.approx(m - half) and hi == pytest.approx(m + half)
    assert sps.t.ppf(0.975, 2) == pytest.approx(4.302652729911275)


def test_paper_headline_interval():
    # Paper table: GRPO boundary lost 652, 690, 620 -> 654 +- 35, CI [567, 741].
    df = pd.DataFrame({"method": "grpo", "metric": "lost", "seed": [0, 1, 2], "value": [652, 690, 620]})
    s = stats.summarize(df, ["method", "metric"]).iloc[0]
    assert round(s["mean"]) == 654 and round(s["sd"]) == 35
    assert round(s["ci_low"]) == 567 and round(s["ci_high"]) == 741 and s["n_seeds"] == 3


def test_one_seed_has_no_interval():
    df = pd.DataFrame({"method": "base", "metric": "passk", "seed": [0], "value": [0.1]})
    s = stats.summarize(df, ["method", "metric"]).iloc[0]
    assert s["mean"] == 0.1 and np.isnan(s["sd"]) and np.isnan(s["ci_low"])


def test_paired_differences_use_shared_seeds():
    df = pd.DataFrame({"method": ["pba"] * 3 + ["grpo"] * 4, "metric": "p1",
                       "seed": [0, 1, 2, 0, 1, 2, 3], "value": [29.0, 28.2, 29.7, 25.1, 24.3, 26.0, 99.0]})
    p = stats.paired(df, "pba", "grpo").iloc[0]
    d = np.array([29.0 - 25.1, 28.2 - 24.3, 29.7 - 26.0])
    assert p["n_seeds"] == 3 and p["mean"] == pytest.approx(d.mean()) and p["sd"] == pytest.approx(d.std(ddof=1))
    half = sps.t.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    assert p["ci_high"] == pytest.approx(d.mean() + half)


def test_bootstrap_is_seeded_and_matches_normal_theory():
    rng = np.random.default_rng(1)
    v = rng.binomial(1, 0.3, 2000).astype(float)
    (lo, hi), _ = stats.bootstrap_ci(v, 4000, seed=7)
    (lo2, hi2), _ = stats.bootstrap_ci(v, 4000, seed=7)
    assert lo == lo2 and hi == hi2
    se = v.std(ddof=0) / math.sqrt(len(v))
    assert lo[0] == pytest.approx(v.mean() - 1.96 * se, abs=0.25 * se)
    assert hi[0] == pytest.approx(v.mean() + 1.96 * se, abs=0.25 * se)


def test_bootstrap_against_a_plain_loop():
    """Same resampling scheme written as an explicit loop (different RNG use): close intervals."""
    rng = np.random.default_rng(2)
    v = rng.normal(size=(300, 2))
    (lo, hi), _ = stats.bootstrap_ci(v, 3000, seed=0)
    loop = np.array([v[rng.integers(0, 300, 300)].mean(axis=0) for _ in range(3000)])
    np.testing.assert_allclose(lo, np.quantile(loop, 0.025, axis=0), atol=0.02)
    np.testing.assert_allclose(hi, np.quantile(loop, 0.975, axis=0), atol=0.02)


def test_stratified_bootstrap_keeps_stratum_sizes():
    # A series constant within strata has a fixed overall mean when strata sizes are fixed.
    strata = np.array(["a"] * 30 + ["b"] * 70)
    v = np.where(strata == "a", 1.0, 0.0)
    (lo, hi), per = stats.bootstrap_ci(v, 500, seed=0, strata=strata)
    assert lo[0] == pytest.approx(0.3) and hi[0] == pytest.approx(0.3)
    assert per["a"][0][0] == pytest.approx(1.0) and per["b"][1][0] == pytest.approx(0.0)


def test_seeds_cli(tmp_path):
    df = pd.DataFrame({"method": ["grpo"] * 3 + ["pba"] * 3, "metric": "p@1", "seed": [0, 1, 2] * 2,
                       "value": [25.1, 24.3, 26.0, 29.0, 28.2, 29.7]})
    df.to_csv(tmp_path / "long.csv", index=False)
    stats.main([str(tmp_path / "long.csv"), "--pair", "pba", "grpo", "--out", str(tmp_path / "out")])
    seeds = pd.read_csv(tmp_path / "out" / "seeds.csv")
    assert list(seeds.columns) == ["method", "metric", "mean", "sd", "ci_low", "ci_high", "n_seeds"]
    g = seeds[seeds["method"] == "grpo"].iloc[0]
    assert g["mean"] == pytest.approx(np.mean([25.1, 24.3, 26.0]))
    pairs = pd.read_csv(tmp_path / "out" / "pairs.csv")
    assert pairs["mean"].iloc[0] == pytest.approx(np.mean([3.9, 3.9, 3.7]))
    assert {"metric", "mean", "sd", "ci_low", "ci_high"} <= set(pairs.columns)


def test_seeds_cli_bad_input(tmp_path):
    pd.DataFrame({"method": ["a", "a"], "metric": "m", "seed": [0, 0], "value": [1, 2]}).to_csv(tmp_path / "d.csv", index=False)
    with pytest.raises(BoundaryError, match="duplicate"):
        stats.main([str(tmp_path / "d.csv"), "--out", str(tmp_path / "o")])
    pd.DataFrame({"method": ["a"], "seed": [0], "value": [1]}).to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(BoundaryError, match="missing column"):
        stats.main([str(tmp_path / "m.csv"), "--out", str(tmp_path / "o")])
    pd.DataFrame({"method": ["a"], "metric": "m", "seed": [0], "value": [1]}).to_csv(tmp_path / "g.csv", index=False)
    with pytest.raises(BoundaryError, match="not in column method"):
        stats.main([str(tmp_path / "g.csv"), "--pair", "a", "zz", "--out", str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


def test_resample_counts_are_shared_by_every_block():
    rng = np.random.default_rng(3)
    strata = rng.choice(["a", "b", "c"], 200)
    codes, names = pd.factorize(strata)
    for _, m, ws in stats.resample_counts(codes, len(names), 50, seed=1, chunk=20):
        for g, w in enumerate(ws):
            assert w.shape == (m, (codes == g).sum()) and (w.sum(axis=1) == (codes == g).sum()).all()
    x, y = rng.random((200, 3)), rng.random((200, 2))
    (ox, px), (oy, _) = stats.bootstrap_blocks([(x, True), (y, False)], 300, 9, strata)
    alone_x, per_x = stats.bootstrap_means(x, 300, 9, strata)
    alone_y, _ = stats.bootstrap_means(y, 300, 9, strata)
    np.testing.assert_allclose(ox, alone_x)
    np.testing.assert_allclose(oy, alone_y)
    np.testing.assert_allclose(px["b"], per_x["b"])


def test_seed_weights_and_nesting():
    w = stats.seed_weights(3, 4000, seed=2)
    assert w.shape == (4000, 3) and np.allclose(w.sum(axis=1), 1) and set(np.unique(w * 3)) <= {0, 1, 2, 3}
    assert w.mean(axis=0) == pytest.approx([1 / 3] * 3, abs=0.02)
    draws = np.random.default_rng(0).random((3, 4000, 2))
    direct = np.stack([sum(w[b, s] * draws[s, b] for s in range(3)) for b in range(4000)])
    np.testing.assert_allclose(stats.nested_over_seeds(draws, w), direct)
    assert (stats.seed_weights(1, 10) == 1).all()


def test_lost_p_value_is_fishers_exact_test():
    for n0, c0, n in [(256, 5, 256), (32, 1, 32), (64, 10, 128), (8, 8, 8)]:
        fisher = sps.fisher_exact([[c0, n0 - c0], [0, n]], alternative="greater")[1]
        assert stats.lost_p_value(n0, c0, n) == pytest.approx(fisher)
        assert stats.lost_p_value(n0, c0, n) == pytest.approx(math.comb(n0, c0) / math.comb(n0 + n, c0))
    b = stats.zero_upper_bound(256, 0.95)
    assert (1 - b) ** 256 == pytest.approx(0.05) and b == pytest.approx(3 / 256, rel=0.05)  # the rule of three


def test_beta_binomial_fit_maximises_the_marginal_likelihood():
    rng = np.random.default_rng(4)
    n = rng.integers(8, 40, 400)
    c = rng.binomial(n, rng.beta(0.4, 1.2, 400))
    a, b = stats.fit_beta_binomial(n, c)
    ll = lambda a, b: sps.betabinom.logpmf(c, n, a, b).sum()
    grid = np.exp(np.linspace(-3, 2, 60))
    best = max((ll(x, y), x, y) for x in grid for y in grid)
    assert ll(a, b) >= best[0] - 1e-6  # at least as good as the best grid point
    assert a == pytest.approx(0.4, rel=0.3) and b == pytest.approx(1.2, rel=0.3)
    lo, hi = stats.credible_interval(np.array([10]), np.array([0]), a, b, 0.9)
    assert lo[0] == pytest.approx(sps.beta.ppf(0.05, a, 10 + b)) and hi[0] == pytest.approx(sps.beta.ppf(0.95, a, 10 + b))
    a0, b0 = stats.fit_beta_binomial(np.full(20, 16), np.zeros(20))  # degenerate: bounded, still proper
    assert a0 > 0 and b0 > 0 and np.isfinite(a0 + b0)


def test_zero_predictive_is_the_beta_binomial_pmf_at_zero():
    for n, n0, c0, a, b in [(256, 256, 1, 0.5, 0.5), (32, 64, 5, 0.2, 1.7), (8, 8, 8, 1.0, 1.0)]:
        assert stats.zero_predictive(n, n0, c0, a, b) == pytest.approx(sps.betabinom.pmf(0, n, c0 + a, n0 - c0 + b))
    # uniform prior, one success in 256: E[(1-p)^256] under Beta(2, 256) = 257*256 / (513*512)
    assert stats.zero_predictive(256, 256, 1, 1, 1) == pytest.approx(257 * 256 / (513 * 512))


def test_wilson_interval_known_values_and_ends():
    from boundary.analysis.stats import wilson

    lo, hi = wilson([5, 0, 10, 0], [10, 10, 10, 0])
    assert lo[:3] == pytest.approx([0.236593, 0.0, 0.722467], abs=1e-6)
    assert hi[:3] == pytest.approx([0.763407, 0.277533, 1.0], abs=1e-6)
    assert np.isnan(lo[3]) and np.isnan(hi[3])  # no trials, no interval
    assert lo[1] == 0.0 and hi[2] == 1.0  # exactly, not a rounding below 0 or above 1
