"""The checks of benchmarks/bench_engine_pairs.py (issue 39: an engine run against a `generate`
run, and an engine run killed and resumed) on constructed tables: the 3-SE rule's verdicts
either side of the line, equal and unequal actions, a resume that restarted its schedule, or
whose engine missed the resumed weights. No training here; the runs themselves are the
benchmark's (its --cpu dry run trains them with the stand-in engine)."""

import sys

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_engine_pairs as pairs  # noqa: E402
from gpu_multi_process_check import within_3se  # noqa: E402

sys.path.remove(str(ROOT / "benchmarks"))

STEPS = 20


def noise(seed, n=STEPS):
    """n draws of mean 0 and sample SD exactly 1: the SE of a difference of two such runs'
    means is sqrt(2 / n) whatever the draw."""
    x = np.random.default_rng(seed).normal(size=n)
    return (x - x.mean()) / x.std(ddof=1)


def log(reward, **extra):
    steps = np.arange(1, len(reward) + 1)
    return pd.DataFrame({"step": steps, "learning_rate": 1e-5 * (1 - steps / 100), "protected_fraction": 0.25,
                         "epoch": steps / 10, "step_time": 3.0 + steps, "num_tokens": 1000.0 * steps,
                         "reward": reward, "loss": np.zeros(len(reward)), **extra})


def actions(steps=STEPS, prompts=4, shift=0):
    return pd.DataFrame([{"step": s, "epoch": 0, "prompt_id": f"p{(s * prompts + i + shift) % 50}",
                          "weight": float(i == 0), "action": "anchor" if i == 0 else "sharpen", "source": "policy"}
                         for s in range(1, steps + 1) for i in range(prompts)])


def test_the_rule_is_3_standard_errors_of_the_difference_with_a_floor():
    se = np.sqrt(2 / STEPS)
    for z, ok in ((2.9, True), (3.1, False), (-2.9, True), (-3.1, False)):
        r = within_3se(0.5 + 0.1 * noise(1), 0.5 + 0.1 * (noise(2) + z * se))
        assert r["se"] == pytest.approx(0.1 * se) and r["difference"] == pytest.approx(0.1 * z * se)
        assert r["ok"] is ok and r["steps"] == (STEPS, STEPS)
    # constant columns: the floor decides; NaN steps are left out; one step: nothing can be told
    assert within_3se(np.zeros(5), np.full(5, 9e-4))["ok"] and not within_3se(np.zeros(5), np.full(5, 2e-3))["ok"]
    assert within_3se([1.0, np.nan, 1.0], [1.0, 1.0])["steps"] == (2, 2)
    assert within_3se([1.0], [5.0])["se"] == np.inf and within_3se([1.0], [5.0])["ok"]
    assert not within_3se([np.nan, np.nan], [1.0, 1.0])["ok"]  # a run that never logged it


def test_pairs_pass_within_3_se_and_fail_beyond_on_a_primary_value_only():
    se = np.sqrt(2 / STEPS)
    ref = log(0.5 + 0.1 * noise(1), entropy=0.5 + 0.02 * noise(3), clip_ratio_low_min=0.01 * noise(5))
    near = log(0.5 + 0.1 * (noise(2) + 2.5 * se), entropy=0.5 + 0.02 * (noise(4) - 2.5 * se),
               clip_ratio_low_min=0.01 * noise(6), sampling_sampling_logp_difference_mean=np.full(STEPS, 0.02))
    checks, table = pairs.pairs_checks(ref, actions(), near, actions())
    assert pairs.passed(checks), checks
    assert list(table["metric"]) == ["reward", "loss", "entropy", "clip_ratio_low_min"]  # both runs' sampled values
    row = table.set_index("metric").loc["reward"]
    assert row["mean generate"] == pytest.approx(0.5) and row["difference"] == pytest.approx(0.1 * 2.5 * se)
    assert row["SE"] == pytest.approx(0.1 * se) and row["|diff|/SE"] == pytest.approx(2.5)
    assert row["verdict"] == "ok" and table.set_index("metric").loc["loss", "verdict"] == "ok (floor 1e-3)"
    assert [text for ok, text in checks][:2] == ["prompt ids per step: 20 of 20 steps equal (4 prompts a step)",
                                                 "epoch, weight, action, source: equal (80 rows)"]

    far = near.assign(reward=0.5 + 0.1 * (noise(2) + 3.5 * se))
    checks, table = pairs.pairs_checks(ref, actions(), far, actions())
    assert not pairs.passed(checks)
    assert (False, f"reward: |diff| {0.1 * 3.5 * se:.3g} > 3 SE {3 * 0.1 * se:.3g}") in checks
    # a secondary value (not one the rule was set for) beyond 3 SE is a note, not a failure
    odd = near.assign(clip_ratio_low_min=0.01 * (noise(6) + 3.5 * se))
    checks, table = pairs.pairs_checks(ref, actions(), odd, actions())
    assert pairs.passed(checks) and table.set_index("metric").loc["clip_ratio_low_min", "verdict"] == "beyond 3 SE"
    assert [ok for ok, text in checks if text.startswith("clip_ratio_low_min")] == [None]


def test_pairs_fail_on_other_prompts_another_anchor_or_another_schedule():
    ref = log(0.5 + 0.1 * noise(1))
    checks, _ = pairs.pairs_checks(ref, actions(), ref, actions(shift=1))
    assert (False, "prompt ids per step: 0 of 20 steps equal (4 prompts a step); first differing step 1") in checks
    moved = actions()
    moved.loc[4, "weight"] = 0.0  # step 2's anchored prompt
    checks, _ = pairs.pairs_checks(ref, actions(), ref, moved)
    assert checks[0][0] and (False, "epoch, weight, action, source: differ (80 vs 80 rows)") in checks
    checks, _ = pairs.pairs_checks(ref, actions(), ref.assign(learning_rate=ref["learning_rate"] * 1.01), actions())
    assert (False, "learning_rate: differs at 20 steps") in checks and not pairs.passed(checks)
    checks, _ = pairs.pairs_checks(ref, actions(), ref.drop(columns=["reward", "loss"]), actions())
    assert not pairs.passed(checks)  # nothing sampled to compare is no evidence


def test_a_resume_that_continues_the_run_passes_and_each_way_of_not_continuing_fails():
    said = "train: resuming from /ck/key/checkpoint-8; 20 steps x 128 completions in 1 process(es)"
    ref = log(0.5 + 0.1 * noise(1))
    good = log(0.5 + 0.1 * noise(2), engine_logp_mean_abs_diff=np.full(STEPS, 0.02))
    checks, table = pairs.resume_checks(said, 8, STEPS, good, actions(), ref, actions())
    assert pairs.passed(checks), checks
    assert table["steps"].tolist() == [12, 12]  # the steps after the resume alone
    assert (True, "log steps [1]..[20]: each of 1..20 once") in checks

    def fails(expected, said=said, run=good, acts=None, save=8):
        checks, _ = pairs.resume_checks(said, save, STEPS, run, actions() if acts is None else acts, ref, actions())
        assert not pairs.passed(checks)
        assert any(ok is False and expected in text for ok, text in checks), checks

    fails("restart did not resume", said=None)
    fails("restart said", said=said.replace("checkpoint-8", "checkpoint-20"))  # the first run had finished
    fails("not each step once", run=pd.concat([good.iloc[:8], good.iloc[4:]]))
    restarted = good.assign(learning_rate=np.r_[ref["learning_rate"][:8], ref["learning_rate"][:12]])
    fails("after the resume, learning_rate: differs", run=restarted)
    stale = good.assign(engine_logp_mean_abs_diff=np.r_[np.full(8, 0.02), np.full(12, 2.5)])
    fails("engine log-prob check at the 12 steps after the resume: missing or above 0.1", run=stale)
    fails("engine log-prob check", run=good.drop(columns=["engine_logp_mean_abs_diff"]))
    from_base = good.assign(reward=np.r_[good["reward"][:8], 0.1 + 0.01 * noise(3, 12)])
    fails("after the resume, reward: |diff|", run=from_base)
    fails("prompt ids per step", acts=actions(shift=2))


def test_one_engine_a_gpu_and_the_pairs_run_is_the_resumed_one_on_a_single_gpu():
    assert pairs.layout(["0"], cpu=False) == {"generate": "0", "killed": "0"}
    assert pairs.layout(["0", "1"], cpu=False) == {"generate": "0", "killed": "0", "vllm": "1"}
    assert pairs.layout(["3", "5", "6", "7"], cpu=False) == {"generate": "3", "killed": "6", "vllm": "5"}
    assert set(pairs.layout([], cpu=True).values()) == {None}
    with pytest.raises(SystemExit, match="no GPU visible"):
        pairs.layout([], cpu=False)
