"""The label-reliability study's figures (lab/studies/2026-11-29-label-reliability/README.md),
recomputed from the adaptive-calibration study's committed counts: SmolLM2 on GSM8K, a full
256-draw calibration and a second, adaptive one whose GPU draws are in effect independent of
it. The labels the second run changed against those predicted from the full run's counts
alone (the empirical prior; the second run's own stopping rule as the fresh protocol)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from boundary.analysis import label_reliability as rl
from boundary.analysis.adaptive import Extension, StoppingRule
from boundary.analysis.regimes import label
from boundary.core import settings

ADAPTIVE = Path(__file__).resolve().parents[1] / "studies" / "2026-11-28-adaptive-calibration"


def _gsm8k():
    parts = [pd.read_csv(p) for p in sorted(ADAPTIVE.glob("gpu_h200_gsm8k_*_counts.csv"))]
    return pd.concat(parts, ignore_index=True)


def test_predicted_label_changes_match_the_committed_second_calibration():
    """SmolLM2 on GSM8K (500 prompts, H200s): the full 256-draw calibration and an adaptive run
    whose GPU draws are, in effect, independent of it (the adaptive page). The labels a second
    calibration would change, predicted from the full run's counts alone (the empirical prior,
    the adaptive run's own rule as the fresh protocol), against those it changed: overall, and
    on the one-success Boundary prompts."""
    d = _gsm8k()
    n, c = d["full_n"].to_numpy(), d["full_c"].to_numpy()
    regime = label(c / n)
    assert (regime == d["full_regime"]).all()
    a, b = rl.fit_prior(n, c)
    rule = StoppingRule.from_settings({**settings.defaults("calibration"), "n": 256}, settings.defaults("regimes"))
    q = rl.flip_probability(n, c, regime, a, b, protocol=lambda _: rule)
    changed = (d["full_regime"] != d["adaptive_regime"]).to_numpy()
    sd = np.sqrt((q * (1 - q)).sum())
    assert changed.sum() == 93
    assert abs(changed.sum() - q.sum()) < 2 * sd, (changed.sum(), q.sum(), sd)
    one = (regime == "Boundary") & (c == 1)
    assert one.sum() == 71 and changed[one].sum() == 28  # 39% flip
    assert abs(changed[one].sum() - q[one].sum()) < 2 * np.sqrt((q[one] * (1 - q[one])).sum())
    same_n = rl.flip_probability(n, c, regime, a, b)  # what the report states: a fresh 256-draw run
    assert abs(same_n.sum() - q.sum()) < 3
    # the page's figures
    assert (round(a, 3), round(b, 1)) == (0.342, 17.8) and round(q.sum(), 1) == 91.5 and round(sd, 1) == 8.2
    by_c = [(int(changed[c == k].sum()), round(q[c == k].sum(), 1)) for k in range(4)]
    assert by_c == [(38, 38.4), (28, 29.2), (9, 8.7), (3, 4.1)]
    fixed = [round(rl.flip_probability(n, c, regime, x, x).sum(), 1) for x in (0.5, 1.0)]
    assert fixed == [102.8, 131.7]  # Jeffreys, uniform
    boundary = regime == "Boundary"
    assert (int(boundary.sum()), int((boundary & (c <= 3)).sum())) == (294, 150)


def test_the_extension_buys_fewer_expected_changes_for_its_draws():
    """The page's table of extensions: 91.5 expected changes without, 68.9 for 66,816 extra draws
    (at most one success of 256 drawn on to 512)."""
    d = _gsm8k()
    n, c = d["full_n"].to_numpy(), d["full_c"].to_numpy()
    a, b = rl.fit_prior(n, c)
    effect = rl.extension_effect(n, c, a, b, Extension(256, 512, 1))
    assert (effect["fragile"], effect["extra_draws"]) == (261, 66_816)
    assert round(effect["flips_before"], 1) == 91.5 and round(effect["flips_after"], 1) == 68.9


