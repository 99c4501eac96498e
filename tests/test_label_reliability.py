"""Label reliability: the regimes' intervals of p, P(label) and P(flip) against direct sums,
what an extension buys, and the calibration's extension of fragile prompts (config, the
sampler's rounds, the stage)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from boundary.analysis import label_reliability as rl
from boundary.analysis.adaptive import Extension
from boundary.analysis.regimes import PAPER, REGIMES, Thresholds, label
from boundary.core.errors import BoundaryError

ROOT = Path(__file__).resolve().parents[1]


def test_each_regime_is_the_interval_of_p_its_label_rule_gives():
    for th in (PAPER, Thresholds(0.6, 0.1, 8, 0.4), Thresholds(0.5, 0.2, 256, 0.9)):
        span = rl.regions(th)
        for p in np.linspace(0, 1, 4001):
            name = label([p], th)[0]
            lo, hi = span[name]
            assert lo - 1e-12 <= p <= hi + 1e-12, (th, p, name)
    p0 = 1 - 0.6 ** (1 / 256)  # coverage@256 = 0.4
    assert rl.regions()["OutOfReach"] == pytest.approx((0.0, p0))


def test_label_probabilities_are_the_posterior_masses_and_sum_to_one():
    a, b = 0.34, 17.8
    for n, c in ((256, 0), (256, 1), (256, 30), (256, 200), (1024, 3), (16, 8)):
        total = sum(rl.label_probability([n], [c], [r], a, b)[0] for r in REGIMES)
        assert total == pytest.approx(1.0, abs=1e-9)
    post = stats.beta(a + 1, b + 255)
    lo, hi = rl.regions()["Boundary"]
    assert rl.label_probability([256], [1], ["Boundary"], a, b)[0] == pytest.approx(post.cdf(hi) - post.cdf(lo))


def test_flip_probability_of_a_full_run_is_the_beta_binomial_sum():
    a, b, n = 0.5, 0.5, 256
    counts = np.arange(n + 1)
    names = label(counts / n)
    for c in (0, 1, 2, 3, 25, 26, 100, 153, 154, 256):
        direct = stats.betabinom.pmf(counts, n, a + c, b + n - c)[names != names[c]].sum()
        assert rl.flip_probability([n], [c], [names[c]], a, b)[0] == pytest.approx(direct, abs=1e-12)


def test_an_extension_protocols_label_law_matches_brute_force():
    """Rounds (n, N): a fresh count j of the first n stops unless j <= fragile; then D more of N - n.
    The law of the fresh label against a direct double sum over (j, D) of the Polya urn."""
    n, to, fragile, alpha, beta = 16, 48, 1, 1.3, 40.0
    th = Thresholds(0.6, 0.1, 64, 0.4)
    ext = Extension(n, to, fragile)
    want = dict.fromkeys(REGIMES, 0.0)
    first = stats.betabinom.pmf(np.arange(n + 1), n, alpha, beta)
    for j in range(n + 1):
        if j > fragile:
            want[label([j / n], th)[0]] += first[j]
            continue
        more = stats.betabinom.pmf(np.arange(to - n + 1), to - n, alpha + j, beta + n - j)
        for d in range(to - n + 1):
            want[label([(j + d) / to], th)[0]] += first[j] * more[d]
    got = rl.fresh_labels(alpha, beta, ext, th)
    for r in REGIMES:
        assert got[r] == pytest.approx(want[r], abs=1e-12)
    assert sum(got.values()) == pytest.approx(1.0)


def test_the_extension_buys_fewer_expected_changes_for_its_draws():
    """A hard pool like a small model's on GSM8K: many prompts with 0-3 successes in 256."""
    rng = np.random.default_rng(0)
    p = np.where(rng.random(300) < 0.4, 0.0, rng.beta(0.4, 20, 300))
    n = np.full(300, 256)
    c = rng.binomial(n, p)
    a, b = rl.fit_prior(n, c)
    effect = rl.extension_effect(n, c, a, b, Extension(256, 512, 1))
    assert effect["fragile"] == int((c <= 1).sum())
    assert effect["extra_draws"] == effect["fragile"] * 256 and effect["draws_before"] == 300 * 256
    assert effect["flips_before"] == pytest.approx(rl.flip_probability(n, c, label(c / n), a, b).sum())
    assert effect["flips_after"] < 0.9 * effect["flips_before"]
    # at 512 draws 2 successes of 256 are Boundary whatever follows: extending them buys nothing
    at_two = rl.extension_effect(n, c, a, b, Extension(256, 512, 2))
    assert at_two["flips_after"] == pytest.approx(effect["flips_after"], rel=1e-9)


# -- the extension in config, the sampler and the stage --------------------------------------------

def _config(**calibration):
    from boundary.core.config import load_yaml

    raw = load_yaml(ROOT / "config" / "config.yaml")
    raw["calibration"].update(calibration)
    return raw


@pytest.mark.parametrize("calibration, message", [
    ({"extend_fragile": 2}, "extend_fragile: read only with calibration.extend: true"),
    ({"extend": True, "adaptive": True}, "extend: not with calibration.adaptive"),
    ({"extend": True, "extend_to": 256}, "must exceed calibration.n"),
])
def test_an_extension_the_run_cannot_make_is_one_line(calibration, message):
    from boundary.core.config import validate_config

    with pytest.raises(BoundaryError, match=message):
        validate_config(_config(**calibration))


def test_the_extension_enters_the_calibration_key_only_when_on():
    from boundary.core import settings
    from boundary.core.config import validate_config

    off = settings.calibrate_key(validate_config(_config()), "diagnostic")
    on = settings.calibrate_key(validate_config(_config(extend=True, extend_to=1024)), "diagnostic")
    assert not {"extend", "extend_to", "extend_fragile"} & set(off["calibration"])
    assert (on["calibration"]["extend"], on["calibration"]["extend_to"], on["calibration"]["extend_fragile"]) == \
        (True, 1024, 1)


def test_the_calibrate_stage_extends_fragile_prompts_and_keeps_the_first_n(tiny_model_dir, tmp_path):
    """hf: the extended run's first n rows of each prompt are the unextended run's; a prompt with at
    most `fragile` successes in them has extend_to rows, the others n."""
    from boundary.stages import calibrate

    split = pd.DataFrame({"prompt_id": ["a", "b", "c", "d"], "prompt": ["12+34=", "5+6=", "1+1=", "7+8="],
                          "answer": ["46", "11", "2", "15"]})
    split.to_parquet(tmp_path / "split.parquet")
    base = {"calibration": {"n": 4, "seed": 3, "temperature": 1.0, "top_p": 1.0},
            "sampling": {"backend": "hf", "batch_size": 6, "max_new_tokens": 4},
            "verify": {"extractor": "last_number", "timeout": 5, "workers": 1}}
    ext = json.loads(json.dumps(base))
    ext["calibration"].update(extend=True, extend_to=12, extend_fragile=0)
    for name, s in (("full", base), ("ext", ext)):
        calibrate.main_calibrate(["--model", str(tiny_model_dir), "--split", str(tmp_path / "split.parquet"),
                                  "--settings", json.dumps(s), "--out", str(tmp_path / f"{name}.parquet")])
    full, extended = pd.read_parquet(tmp_path / "full.parquet"), pd.read_parquet(tmp_path / "ext.parquet")
    assert extended["prompt_id"].drop_duplicates().tolist() == list(split["prompt_id"])
    for pid, rows in extended.groupby("prompt_id"):
        first = full[full["prompt_id"] == pid].reset_index(drop=True)
        assert rows["sample_idx"].tolist() == list(range(len(rows)))
        pd.testing.assert_frame_equal(rows.head(4).reset_index(drop=True)[["sample_idx", "completion", "correct"]],
                                      first[["sample_idx", "completion", "correct"]])
        assert len(rows) == (12 if first["correct"].sum() <= 0 else 4)


def test_the_extension_apart_appends_draws_at_their_own_seed(monkeypatch):
    """vllm's path: one more call on the fragile prompts, its rows numbered after the first n."""
    from boundary.stages import calibrate

    calls = []

    def fake(model, split, params, *args, **kw):
        calls.append((list(split["prompt_id"]), params.n, params.seed))
        return pd.DataFrame({"prompt_id": np.repeat(split["prompt_id"].to_numpy(), params.n),
                             "sample_idx": np.tile(np.arange(params.n), len(split)), "correct": False})

    monkeypatch.setattr(calibrate, "scored_samples", fake)
    split = pd.DataFrame({"prompt_id": ["x", "y", "z"], "answer": ["1", "2", "3"]})
    first = pd.DataFrame({"prompt_id": np.repeat(["x", "y", "z"], 4), "sample_idx": np.tile(np.arange(4), 3),
                          "correct": [True] * 4 + [False] * 8})
    cal = {"n": 4, "seed": 10, "temperature": 1.0, "top_p": 1.0}
    s = {"sampling": {"backend": "vllm", "batch_size": 8, "max_new_tokens": 4, "vllm_max_num_seqs": 8},
         "verify": {"extractor": "last_number"}}
    out = calibrate._extend_apart(first, split, Extension(4, 10, 0), cal, s, "m", "split", 0, None)
    assert calls == [(["y", "z"], 6, 10 + calibrate.EXTEND_SEED_STRIDE)]
    assert out.groupby("prompt_id", sort=False).size().to_dict() == {"x": 4, "y": 10, "z": 10}
    assert out[out["prompt_id"] == "y"]["sample_idx"].tolist() == list(range(10))


def test_the_regimes_stage_writes_each_labels_reliability(tmp_path, capsys):
    from boundary.stages import regimes as stage

    rows = [(f"p{i}", k, k < i) for i in range(12) for k in range(256)]
    pd.DataFrame(rows, columns=["prompt_id", "sample_idx", "correct"]).to_parquet(tmp_path / "cal.parquet")
    stage.main(["--calibration", str(tmp_path / "cal.parquet"), "--out", str(tmp_path / "regimes.parquet"),
                "--settings", '{"easy": 0.6, "boundary": 0.1, "coverage_k": 256, "coverage_min": 0.4}'])
    table = pd.read_parquet(tmp_path / "regimes.parquet")
    assert len(table) == 12 and table["label_prob"].between(0, 1).all() and table["flip_prob"].between(0, 1).all()
    assert table["prior_a"].nunique() == 1 and table["prior_b"].nunique() == 1
    one = table.set_index("prompt_id").loc["p1"]
    assert one["regime"] == "Boundary" and one["flip_prob"] > table.set_index("prompt_id").loc["p11", "flip_prob"]
    out = capsys.readouterr().out
    assert "empirical-Bayes prior Beta(" in out and "would be expected to change" in out
