"""The pilot's seed-lease arithmetic (workflow/scripts/qwen05b_pilot_plan.py, the
pre-registration's Amendment 8) on synthetic lease-1 files with the stage writers' columns."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
from conftest import ROOT

from boundary.core.config import load_config

spec = importlib.util.spec_from_file_location("pilot_plan", ROOT / "workflow" / "scripts" / "qwen05b_pilot_plan.py")
plan_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plan_script)
CONFIG = ROOT / "config" / "qwen05b_pilot.yaml"


def benchmark(path, seconds):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:00\t100.0\n")


def lease1(results, rate, tokens=400, anchored=0.25):
    """Four calibration shards of 100 completions of `tokens` at `rate` tokens a second, a
    160 s import, a PBA mask anchoring `anchored` of its prompt-epochs, 245 labelled prompts."""
    shards = results / "rollouts" / "base_calibration_shards"
    shards.mkdir(parents=True)
    for k in range(4):
        pd.DataFrame({"n_tokens": [tokens] * 100}).to_parquet(shards / f"{k}.parquet")
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
    m = plan_script.measured(tmp_path)
    assert m == {"rate": 40_000, "tokens": 400, "import_s": 160, "anchored": 0.25}
    parts = plan_script.lease_seconds(config, m, 245, 400, 2)
    train = config["train"]
    assert parts["fixed"] == plan_script.CALLS_S + 160 + plan_script.PACK_S
    assert parts["base_rollouts"] == pytest.approx(0.25 * train["steps"] * 32 * 8 * 400 / 40_000)
    assert parts["training"] == pytest.approx(plan_script.START_S + 60 * plan_script.STEP_S * plan_script.ANCHOR_FACTOR)
    assert parts["evaluation"] == pytest.approx((245 + 400) * 256 * 400 / 40_000)
    assert parts["total"] == pytest.approx(sum(v for k, v in parts.items() if k != "total"))
    alone = plan_script.lease_seconds(config, m, 245, 400, 1)  # one method: its evaluation on both GPUs
    assert alone["evaluation"] == pytest.approx(parts["evaluation"] / 2) and alone["training"] == parts["training"]


@pytest.mark.parametrize("rate, design", [(200_000, 1), (60_000, 2), (56_500, 3), (40_000, 4), (22_000, 5),
                                          (10_000, None)])
def test_the_first_design_that_fits_a_hold_is_the_one_the_pilot_trains(tmp_path, capsys, rate, design):
    """In the rule's order: as configured (2 x 200 benchmark prompts), two then one method a
    lease; the benchmarks cut to 32, two then one; the diagnostic split to 128 too; none
    fitting: blocked. A lease at these rates has 1,620 - 370 - 652.6 s for its base rollouts and
    its evaluation: design 1 fits from 113k tokens a second, 2 from 58k, 3 from 55.5k, 4 from
    29k, 5 from 19k."""
    lease1(tmp_path / "qwen05b_pilot", rate=rate)
    plan_script.main(["--configfile", str(CONFIG), "--results", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"lease 1 measured: {rate:,} tokens a GPU-second end to end, 400 tokens a completion" in out
    if design is None:
        assert out.rstrip().endswith("no design fits a hold of 2 GPUs: the pilot is blocked on hold length")
    else:
        assert f"Amendment 8: the pilot trains with design {design}, " in out


def test_a_shard_without_its_wall_time_is_one_line(tmp_path):
    lease1(tmp_path / "qwen05b_pilot", rate=40_000)
    (tmp_path / "qwen05b_pilot" / "benchmarks" / "calibrate_base" / "shard2.tsv").unlink()
    with pytest.raises(SystemExit, match=r"^qwen05b_pilot_plan: .*benchmarks/calibrate_base/shard2.tsv: missing"):
        plan_script.main(["--configfile", str(CONFIG), "--results", str(tmp_path)])
