"""The power calculation (analysis/power.py): the effect it simulates is the one asked for,
power grows with the Boundary prompts, and a task without Boundary prompts is refused."""

import numpy as np
import pandas as pd
import pytest

from boundary.analysis.power import power_table, shrink_factor
from boundary.analysis.regimes import PAPER
from boundary.analysis.regimes import coverage as expected_pass
from boundary.cli import main
from boundary.core.errors import BoundaryError


def _counts(p, n=256):
    return pd.DataFrame({"prompt_id": [str(i) for i in range(len(p))], "n": n,
                         "c": np.round(np.asarray(p) * n).astype(int)})


def test_shrink_factor_lowers_mean_pass_at_k_by_the_effect():
    p = np.array([0.004, 0.01, 0.03, 0.08])
    s = shrink_factor(p, 256, 0.05)
    assert 0 < s < 1
    assert expected_pass(p, 256).mean() - expected_pass(p * s, 256).mean() == pytest.approx(0.05, abs=1e-9)
    with pytest.raises(BoundaryError, match="exceeds the Boundary prompts' pass@256"):
        shrink_factor(p, 256, 0.99)


def test_power_grows_with_boundary_prompts_and_a_null_effect_is_rarely_resolved():
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(0.004, 0.03, 300), rng.uniform(0.2, 0.9, 100)])
    table = power_table(_counts(p), PAPER, prompts=[40, 400], seeds=[1], effect=0.2, n_eval=256,
                        k=256, sims=40, resamples=400)
    small, large = table.itertuples()
    assert small.boundary_prompts < large.boundary_prompts
    assert large.power > small.power and large.power >= 0.9
    assert large.mean_width < small.mean_width
    assert table["false_positive"].max() <= 0.2


def test_a_calibration_without_boundary_prompts_is_one_line(tmp_path, capsys):
    path = tmp_path / "counts.parquet"
    _counts(np.full(50, 0.9)).to_parquet(path)
    assert main(["power", "--calibration", str(path), "--settings", '{"boundary": 0.1}']) == 1
    assert capsys.readouterr().err.strip().endswith(
        "power: the calibration labels fewer than 2 prompts Boundary; no design can resolve a Boundary change on this task")


def test_a_simulated_draw_that_sums_to_zero_is_exactly_zero():
    """At k = n every prompt's Δ is -1, 0 or 1, so many resamples sum to exactly 0; their draws
    must be 0.0 on every CPU (a BLAS product left about two in three of them a hair either side
    of 0, which decided `detected` differently per kernel), and the resamples are those of the
    report's bootstrap."""
    from boundary.analysis.power import _nested_draws
    from boundary.analysis.stats import bootstrap_means, nested_over_seeds, seed_weights

    delta = np.zeros((50, 3))
    delta[7] = -1.0  # a prompt lost in every seed
    delta[11, 1] = 1.0  # one gained in one seed
    draws = _nested_draws(delta, 500, seed=3)
    near = np.abs(draws) < 1e-6
    assert near.sum() > 50 and (draws[near] == 0.0).all()
    boot, _ = bootstrap_means(delta, 500, seed=3)
    assert np.allclose(draws, nested_over_seeds(boot.T[:, :, None], seed_weights(3, 500, seed=3))[:, 0], atol=1e-6)
