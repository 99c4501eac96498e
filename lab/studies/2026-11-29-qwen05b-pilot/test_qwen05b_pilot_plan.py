"""The pilot's seed-lease arithmetic (lab/studies/2026-11-29-qwen05b-pilot/qwen05b_pilot_plan.py, the
pre-registration's Amendment 8) on synthetic lease-1 files with the stage writers' columns."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from boundary.core.config import load_config

spec = importlib.util.spec_from_file_location("pilot_plan", Path(__file__).resolve().parent / "qwen05b_pilot_plan.py")
plan_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plan_script)
CONFIG = Path(__file__).resolve().parent / "qwen05b_pilot.yaml"


def benchmark(path, seconds):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:00\t100.0\n")


def lease1(results, rate, tokens=400, anchored=0.25):
    """A calibration of 400 completions of `tokens` drawn in four shards at `rate` tokens a second,
    a 160 s import, a PBA mask anchoring `anchored` of its prompt-epochs, 245 labelled prompts."""
    (results / "rollouts").mkdir(parents=True)
    pd.DataFrame({"n_tokens": [tokens] * 400}).to_parquet(results / "rollouts" / "base_calibration.parquet")
    for k in range(4):
        benchmark(results / "benchmarks" / "calibrate_base" / f"shard{k}.tsv", 100 * tokens / rate)
    benchmark(results / "benchmarks" / "import_base.tsv", 160)
    (results / "masks").mkdir()
    anchors = int(anchored * 400)
    pd.DataFrame({"action": ["anchor"] * anchors + ["reinforce"] * (400 - anchors)}).to_parquet(
        results / "masks" / "pba.parquet")
    (results / "regimes").mkdir()
    pd.DataFrame({"prompt_id": [f"p{i}" for i in range(245)]}).to_parquet(results / "regimes" / "regimes.parquet")


def test_a_lease_is_its_fixed_costs_base_rollouts_training_and_one_evaluation(tmp_path):
    lease1(tmp_path, rate=40_000)
    config = load_config(CONFIG)
    m = plan_script.measured(tmp_path, 4)
    assert m == {"rate": 40_000, "tokens": 400, "import_s": 160, "anchored": 0.25}
    parts = plan_script.lease_seconds(config, m, 245, 400, 2)
    train = config["train"]
    assert parts["fixed"] == plan_script.CALLS_S + 160 + plan_script.PACK_S
    assert parts["base_rollouts"] == pytest.approx(0.25 * train["steps"] * 32 * 8 * 400 / 40_000)
    step = plan_script.STEP_S[(train["max_completion_length"], 1)]
    assert parts["training"] == pytest.approx(plan_script.START_S + 60 * step * plan_script.ANCHOR_FACTOR)
    assert parts["evaluation"] == pytest.approx((245 + 400) * 256 * 400 / 40_000)
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    alone = plan_script.lease_seconds(config, m, 245, 400, 1)  # one method: its evaluation on both GPUs
    assert alone["evaluation"] == pytest.approx(parts["evaluation"] / 2) and alone["training"] == parts["training"]
    single = plan_script.lease_seconds(config, m, 245, 400, 1, gpus=1)  # a hold of one GPU: all of it there
    assert single["evaluation"] == pytest.approx(parts["evaluation"])


def test_the_step_is_the_one_measured_at_the_config_s_cap(tmp_path):
    lease1(tmp_path, rate=40_000)
    config = load_config(CONFIG)
    m = plan_script.measured(tmp_path, 4)
    steps = {cap: plan_script.lease_seconds({**config, "train": {**config["train"], "max_completion_length": cap}},
                                            m, 245, 400, 2)["training"] for cap in (512, 1024)}
    assert steps[1024] - steps[512] == pytest.approx(60 * (16.43 - 11.12) * plan_script.ANCHOR_FACTOR)
    with pytest.raises(plan_script.BoundaryError, match=r"train.max_completion_length 768: no training step measured"):
        plan_script.lease_seconds({**config, "train": {**config["train"], "max_completion_length": 768}}, m, 245, 400, 2)


@pytest.mark.parametrize("gpus, rate, design", [(2, 700_000, 1), (2, 400_000, 2), (2, 292_000, 3), (2, 200_000, 4),
                                                (2, 120_000, 5), (2, 50_000, None), (1, 700_000, 2),
                                                (1, 200_000, 5), (1, 120_000, None)])
def test_the_first_design_that_fits_a_hold_is_the_one_the_pilot_trains(tmp_path, capsys, gpus, rate, design):
    """In the rule's order: as configured (2 x 200 benchmark prompts), two then one method a
    lease; the benchmarks cut to 32, two then one; the diagnostic split to 128 too; none
    fitting: blocked. At the config's cap (1,024: a 16.43 s step) a lease has 1,620 - 370 -
    1,134.4 s for its base rollouts and its evaluation: on 2 GPUs design 1 fits from 584k tokens
    a second, 2 from 299k, 3 from 287k, 4 from 150k, 5 from 98k; on 1 GPU (one method a lease,
    its evaluation on that GPU) 2 from 584k, 4 from 287k, 5 from 184k."""
    lease1(tmp_path / "qwen05b_pilot", rate=rate)
    plan_script.main(["--configfile", str(CONFIG), "--results", str(tmp_path), "--gpus", str(gpus)])
    out = capsys.readouterr().out
    assert f"the calibration's lease measured: {rate:,} tokens a GPU-second end to end, 400 tokens a completion" in out
    if design is None:
        assert f"no design fits a hold of {gpus} GPU(s): the pilot is blocked on hold length" in out
        assert ("until row q measures the step on 2 GPUs (design(s) 6: fits with a step of at most " in out) == (gpus == 2)
    else:
        assert f"Amendment 8: the pilot trains with design {design}, " in out and f"a lease of {gpus} GPU(s)" in out


@pytest.mark.parametrize("step, design", [(15.0, 6), (15.8, 7), (17.0, None)])
def test_a_run_trained_on_both_gpus_comes_after_the_diagnostic_split_whole(tmp_path, capsys, monkeypatch, step,
                                                                          design):
    """Amendment 9: once row q has measured the step on 2 GPUs, design 6 (design 4 trained on both)
    comes before design 5 (the diagnostic split cut), and 7 after it. At 90k tokens a second the
    one-GPU designs 1-5 do not fit (the 16.43 s step); 6 fits below a 15.3 s step, 7 below 16.3."""
    monkeypatch.setitem(plan_script.STEP_S, (1024, 2), step)
    lease1(tmp_path / "qwen05b_pilot", rate=90_000)
    plan_script.main(["--configfile", str(CONFIG), "--results", str(tmp_path)])
    out = capsys.readouterr().out
    if design is None:
        assert out.rstrip().endswith("no design fits a hold of 2 GPU(s): the pilot is blocked on hold length")
    else:
        assert f"the pilot trains with design {design}, " in out and out.rstrip().endswith("each trained on 2")


def test_a_shard_without_its_wall_time_is_one_line(tmp_path):
    lease1(tmp_path / "qwen05b_pilot", rate=40_000)
    (tmp_path / "qwen05b_pilot" / "benchmarks" / "calibrate_base" / "shard2.tsv").unlink()
    with pytest.raises(SystemExit, match=r"^qwen05b_pilot_plan: .*benchmarks/calibrate_base/shard2.tsv: missing"):
        plan_script.main(["--configfile", str(CONFIG), "--results", str(tmp_path)])


LEASES = {  # each lease's figures on lab/studies/2026-11-29-qwen05b-pilot/README.md
    "lease1_512": {"regimes": {"Boundary": 125, "OutOfReach": 56, "Reachable": 53, "SolvedEasy": 11},
                   "calibration": (62_720, 0.106, 387.7, 0.341), "gate": (4_000, 334, 0.352), "by_epoch": [166, 168],
                   "anchored_by_epoch": [175, 185], "masks": (46, 0.72, 0.72), "both": 0.528,
                   "measured": (35_683, 97.59, 0.72), "totals": [55.9, 41.0, 40.4, 33.2, 30.5],
                   "step_at_most": "6: fits with a step of at most 10.80 s, 7: fits with a step of at most 13.26 s"},
    "lease2_1024": {"regimes": {"Boundary": 130, "OutOfReach": 49, "Reachable": 55, "SolvedEasy": 11},
                    "calibration": (62_720, 0.109, 488.1, 0.131), "gate": (4_000, 330, 0.136), "by_epoch": [162, 168],
                    "anchored_by_epoch": [178, 184], "masks": (48, 0.724, 0.724), "both": 0.534,
                    "measured": (31_733, 47.98, 0.724), "totals": [68.4, 47.2, 46.3, 36.2, 32.4],
                    "step_at_most": "6: fits with a step of at most 8.07 s, 7: fits with a step of at most 11.56 s"},
}


@pytest.mark.parametrize("lease", sorted(LEASES))
def test_the_pilot_page_is_rebuilt_from_its_committed_leases(lease, tmp_path, capsys):
    """lab/studies/2026-11-29-qwen05b-pilot/README.md: the regimes recomputed from the committed
    calibration's verdicts, its pass@1 and completion figures, the training reward by epoch, both
    masks rebuilt from the committed gate draws, the rate the plan reads, and the re-cost table
    with its verdict."""
    from boundary.analysis.regimes import Thresholds, counts_from_calibration, label_counts
    from boundary.core import settings
    from boundary.training.gate import build_mask

    want = LEASES[lease]
    run = Path(__file__).resolve().parent / lease
    config = load_config(CONFIG)
    calibration = pd.read_parquet(run / "rollouts" / "base_calibration.parquet")
    labels = label_counts(counts_from_calibration(calibration), Thresholds(**config["regimes"]))
    committed = pd.read_parquet(run / "regimes" / "regimes.parquet")
    pd.testing.assert_frame_equal(labels.reset_index(drop=True), committed.reset_index(drop=True), check_like=True)
    assert committed["regime"].value_counts().to_dict() == want["regimes"]
    assert (len(calibration), round(calibration["correct"].mean(), 3), round(calibration["n_tokens"].mean(), 1),
            round((calibration["finish_reason"] == "length").mean(), 3)) == want["calibration"]
    gate = pd.read_parquet(run / "rollouts" / "base_gate.parquet")
    assert (len(gate), gate["correct"].sum(), round((gate["finish_reason"] == "length").mean(), 3)) == want["gate"]
    assert gate.groupby("epoch")["correct"].sum().tolist() == want["by_epoch"]

    prompts = sorted(gate["prompt_id"].unique())
    gated = {"G0": config["gate"]["G0"], "tau": config["gate"]["tau"], "epochs": 2}
    masks = {"pba": build_mask("gate", settings.resolve("masks", {"kind": "gate", **gated}), gate, prompts),
             "random": build_mask("random", settings.resolve("masks", {
                 "kind": "random", "epochs": 2, "seed": 17, "share_of": "pba",
                 "share_of_settings": settings.resolve("masks", {"kind": "gate", **gated})}), gate, prompts)}
    for name, mask in masks.items():
        pd.testing.assert_frame_equal(mask, pd.read_parquet(run / "masks" / f"{name}.parquet"), check_like=True)
    anchored = {name: mask["action"].eq("anchor") for name, mask in masks.items()}
    assert masks["pba"].groupby("epoch")["action"].apply(lambda a: a.eq("anchor").sum()).tolist() == \
        want["anchored_by_epoch"]
    assert (masks["pba"]["flip"].sum(), anchored["pba"].mean(), anchored["random"].mean()) == want["masks"]
    assert round((anchored["pba"] & anchored["random"]).mean(), 3) == want["both"]

    m = plan_script.measured(run, config["calibration"]["shards"])
    assert (round(m["rate"]), m["import_s"], m["anchored"]) == want["measured"]
    totals = [round(plan_script.lease_seconds(config, m, d, b, k)["total"] / 60, 1)
              for d, b, k in [(245, 400, 2), (245, 400, 1), (245, 64, 2), (245, 64, 1), (128, 64, 1)]]
    assert totals == want["totals"]
    (tmp_path / config["run"]).symlink_to(run)
    plan_script.main(["--configfile", str(CONFIG), "--results", str(tmp_path)])
    assert capsys.readouterr().out.rstrip().endswith(f"(design(s) {want['step_at_most']})")
