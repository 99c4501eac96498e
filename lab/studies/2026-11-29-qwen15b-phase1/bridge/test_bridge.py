"""The bridge's table (bridge_table.py) on synthetic inputs of Phase 1's layout: the readouts it
must give at step 30, and "not yet run" until the full fine-tuning run's log is in."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.artifacts import read_table, write_table

HERE = Path(__file__).resolve().parent


def module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bridge = module("bridge_table", HERE / "bridge_table.py")
study = module("test_phase1", HERE.parent / "test_phase1.py")  # its synthetic study and sequential draws


def full_log(rng) -> pd.DataFrame:
    """A stopped run's log: steps 1-30, the KL every 10th step."""
    steps = np.arange(1, 31)
    return pd.DataFrame({"step": steps, "reward": rng.uniform(0.2, 0.5, 30), "entropy": rng.uniform(0.05, 0.1, 30),
                         "loss": 0.0, "kl_base_k1": np.where(steps % 10 == 0, 1e-4 * steps, np.nan),
                         "kl_base_k3": np.where(steps % 10 == 0, 9e-5 * steps, np.nan)})


def test_the_bridge_reads_both_runs_at_step_30(tmp_path):
    s = study.synthetic_study(tmp_path)
    inputs, p, rng = s["inputs"], s["p"], np.random.default_rng(11)
    regimes = read_table(s["regimes"]).assign(prompt_id=lambda r: r["prompt_id"].astype(str))
    table = bridge.bridge_table(bridge.load(inputs), regimes, resamples=200)
    assert table.rows == [[bridge.phase1.NOT_RUN]]  # the full fine-tuning run's log is not in

    log = full_log(rng)
    write_table(log, bridge.log_path(inputs, "grpo_full"))
    sharpened = p.copy()
    easy = np.flatnonzero(regimes["regime"].to_numpy() == "SolvedEasy")[:5]
    sharpened[easy] = 0.0  # the full fine-tuning policy loses five easy prompts outright
    write_table(study.sequential_draw(sharpened, rng), bridge.phase1.counts_path(inputs, "grpo_full_step30", 0))
    write_table(study.sequential_draw(p, rng), bridge.phase1.counts_path(inputs, "grpo_step30", 0))
    table = bridge.bridge_table(bridge.load(inputs), regimes, resamples=400)
    data = table.data.set_index("run")

    lora_log = read_table(inputs / "train/grpo/seed0/log.parquet")
    for who, frame in (("full fine-tuning", log), ("LoRA", lora_log)):
        window = frame[frame["step"].between(21, 30)]
        assert np.isclose(data.loc[who, "reward"], window["reward"].mean())
        assert np.isclose(data.loc[who, "entropy"], window["entropy"].mean())
        for step in (10, 20, 30):
            assert np.isclose(data.loc[who, f"kl_base_k3_step{step}"], frame.loc[frame["step"] == step, "kl_base_k3"].iloc[0])
    assert data.loc["full fine-tuning", "last_step"] == 30 and data.loc["LoRA", "last_step"] == 150
    # Δpass@1 against the pooled base: five easy prompts lost are about -sum(p)/prompts; LoRA's draw is the base's
    expected = -p[easy].sum() / len(p)
    full, lora = data.loc["full fine-tuning"], data.loc["LoRA"]
    assert abs(full["delta_pass1"] - expected) < 0.03, (full["delta_pass1"], expected)
    assert full["delta_pass1_high"] < 0 < lora["delta_pass1_high"] and lora["delta_pass1_low"] < 0
    assert table.rows[0][-1].startswith(f"{100 * full['delta_pass1']:+.1f} [")
    assert len(table.notes) == 1


def test_a_log_short_of_the_window_is_said(tmp_path):
    s = study.synthetic_study(tmp_path)
    log = full_log(np.random.default_rng(3))
    write_table(log[log["step"] <= 27], bridge.log_path(s["inputs"], "grpo_full"))
    regimes = read_table(s["regimes"]).assign(prompt_id=lambda r: r["prompt_id"].astype(str))
    table = bridge.bridge_table(bridge.load(s["inputs"]), regimes, resamples=100)
    assert "full fine-tuning: 7 of steps 21-30 logged (the log ends at step 27)." in table.notes
    assert table.rows[0][3].endswith("not logged") and table.rows[0][-1] == "not evaluated"


def test_collect_takes_the_bridges_log_and_record(tmp_path):
    results = tmp_path / "results"
    write_table(full_log(np.random.default_rng(0)), results / "bridge/grpo_full/seed0/log.parquet")
    (results / "bridge/grpo_full/seed0/evaluate_step30.json").write_text("{}\n")
    (results / "bridge/grpo_full/seed0/trainer_state.json").write_text("{}\n")
    copied = bridge.collect(results, tmp_path / "inputs")
    assert sorted(p.relative_to(tmp_path / "inputs").as_posix() for p in copied) == [
        "bridge/grpo_full/seed0/evaluate_step30.json", "bridge/grpo_full/seed0/log.parquet"]


def test_the_override_adds_the_full_run_and_changes_only_the_lr(tmp_path):
    """grpo_full.yaml over qwen15b_phase1.yaml (merged as Snakemake merges config files): a
    method training every weight at lr 1e-6 at seed 0 with the LoRA runs' other settings, and the
    step-30 snapshot's evaluation with the LoRA step-30 evaluation's settings. The LoRA runs' own
    settings change by the lr alone: why the override never goes with their targets."""
    import yaml
    from snakemake.utils import update_config

    from boundary.core import settings
    from boundary.core.config import validate_config

    study = yaml.safe_load((HERE.parents[1] / "2026-11-28-qwen15b-preregistration/qwen15b_phase1.yaml").read_text())
    merged = yaml.safe_load((HERE.parents[1] / "2026-11-28-qwen15b-preregistration/qwen15b_phase1.yaml").read_text())
    update_config(merged, yaml.safe_load((HERE / "grpo_full.yaml").read_text()))
    plain, bridged = validate_config(study), validate_config(merged)
    full, lora = settings.train_key(bridged, "grpo_full"), settings.train_key(plain, "grpo")
    assert full["lr"] == 1e-6 and lora["lr"] == 1e-5 and "lora" in lora and "lora" not in full
    assert {k: v for k, v in full.items() if k not in ("lr", "lora")} == {k: v for k, v in lora.items() if k not in ("lr", "lora")}
    assert settings.train_key(bridged, "grpo") == {**lora, "lr": 1e-6}
    assert settings.seeds_of(bridged, "grpo_full") == settings.seeds_of(bridged, "grpo_full_step30") == [0]
    assert (settings.evaluate_key(bridged, "diagnostic", "grpo_full_step30", 0)
            == settings.evaluate_key(plain, "diagnostic", "grpo_step30", 0))


def test_the_hold_calls_fit_the_run_tool():
    import subprocess

    for call in sorted((HERE / "hold").glob("*.sh")):
        text = call.read_text()
        assert len(text.strip()) < 2000, call.name
        assert subprocess.run(["bash", "-n", str(call)]).returncode == 0, call.name
        assert "--pin c5e8ba9" in text and "grpo_full.yaml" in text, call.name


def test_the_exploratory_boundary_table_counts_what_each_step_30_policy_lost(tmp_path):
    s = study.synthetic_study(tmp_path)
    inputs, p, rng = s["inputs"], s["p"], np.random.default_rng(5)
    regimes = read_table(s["regimes"]).assign(prompt_id=lambda r: r["prompt_id"].astype(str))
    table = bridge.boundary_table(bridge.load(inputs), regimes, resamples=100, sims=200)
    assert table.rows == [[bridge.phase1.NOT_RUN]]  # no step-30 counts yet

    write_table(full_log(rng), bridge.log_path(inputs, "grpo_full"))
    boundary = np.flatnonzero(regimes["regime"].to_numpy() == "Boundary")
    collapsed = boundary[:4]
    sharpened = p.copy()
    sharpened[collapsed] = 0.0  # the full fine-tuning policy never solves four Boundary prompts
    write_table(study.sequential_draw(sharpened, rng), bridge.phase1.counts_path(inputs, "grpo_full_step30", 0))
    write_table(study.sequential_draw(p, rng), bridge.phase1.counts_path(inputs, "grpo_step30", 0))
    table = bridge.boundary_table(bridge.load(inputs), regimes, resamples=300, sims=200)
    data = table.data.set_index("run")

    pooled = pd.concat([read_table(bridge.phase1.counts_path(inputs, "base", i)) for i in range(4)])
    solved = set(pooled.loc[pooled["c"] > 0, "prompt_id"])
    ids = regimes["prompt_id"].to_numpy()
    assert data.loc["full fine-tuning", "lost"] >= sum(ids[i] in solved for i in collapsed) >= 3
    assert data.loc["full fine-tuning", "delta_passk"] < data.loc["LoRA", "delta_passk"]
    assert data.loc["full fine-tuning", "boot_low"] <= data.loc["full fine-tuning", "delta_passk"] <= data.loc["full fine-tuning", "boot_high"]
    null = bridge.phase1.lost_null(regimes, "Boundary", 1, 200)
    assert (data["null_median"] == np.median(null)).all() and (data["null_p95"] == np.quantile(null, 0.95)).all()
    assert table.rows[0][2] == str(int(data.loc["full fine-tuning", "lost"]))
    assert "Not pre-registered" in table.notes[0]
