"""Seed statistics against scipy's t quantiles and hand computations; the bootstrap against
its sampling distribution; the seeds CLI end to end."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from boundary import stats
from boundary.errors import BoundaryError


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
