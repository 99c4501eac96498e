"""The settings layer (core/settings.py): each stage's key is what finished runs were hashed
with, a bad `--settings` is one line naming the key, and no default is written outside the
schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from boundary.core import settings
from boundary.core.config import load_config
from boundary.core.errors import BoundaryError
from boundary.core.names import DIAGNOSTIC

ROOT = Path(__file__).resolve().parents[1]
# Every stage key of these configs as the rules built them before the settings layer existed
# (common.smk at 4e77492), byte for byte: a change here reruns every finished run of them.
SNAPSHOT = ROOT / "tests" / "fixtures" / "stage_keys.json"


def stage_keys(config: dict) -> dict[str, str]:
    """Every key a run of `config` hashes, by stage (and split, mask, method or benchmark)."""
    keys = {}
    if config["testbed"] is not None:
        keys["pretrain"] = settings.text(settings.pretrain_key(config))
        keys["data"] = settings.text(settings.data_key(config))
        benchmarks = ["testbed"]
    else:
        benchmarks = sorted(config["data"]["benchmarks"])
        for split in ["train", "diagnostic"] + [f"bench_{b}" for b in benchmarks]:
            keys[f"data/{split}"] = settings.text(settings.data_key(config, split))
    for part, split in {"": "diagnostic", "_train": "train"}.items():
        keys[f"calibrate{part}"] = settings.text(settings.calibrate_key(config, split))
    keys["gate-draws"] = settings.text(settings.gate_draws_key(config))
    keys["regimes"] = settings.text(settings.regimes_key(config))
    for mask in config["masks"]:
        keys[f"masks/{mask}"] = settings.text(settings.mask_key(config, mask))
    for method, spec in config["methods"].items():
        if not spec["checkpoint_of"]:
            keys[f"train/{method}"] = settings.text(settings.train_key(config, method))
    for bench in [DIAGNOSTIC] + benchmarks:
        keys[f"evaluate/{bench}"] = settings.text(settings.evaluate_key(config, bench))
    keys["report"] = settings.text(settings.report_key(config))
    return keys


@pytest.mark.parametrize("name", sorted(json.loads(SNAPSHOT.read_text())))
def test_every_stage_key_is_the_one_finished_runs_were_hashed_with(name):
    expected = json.loads(SNAPSHOT.read_text())[name]
    assert stage_keys(load_config(ROOT / "config" / name)) == expected


@pytest.mark.parametrize("path", sorted((ROOT / "config").glob("*.yaml")), ids=lambda p: p.name)
def test_every_key_resolves_to_complete_settings(path):
    """What a rule passes is what its stage accepts, and resolving is idempotent."""
    config = load_config(path)
    stages = {"gate-draws": settings.gate_draws_key(config), "regimes": settings.regimes_key(config),
              "report": settings.report_key(config)}
    if config["testbed"] is not None:
        stages["pretrain"] = settings.pretrain_key(config)
        stages["data"] = settings.data_key(config)
    else:
        stages["data"] = settings.data_key(config, "train")
    stages["calibrate"] = settings.calibrate_key(config, "diagnostic")
    stages["evaluate"] = settings.evaluate_key(config, DIAGNOSTIC)
    for stage, key in stages.items():
        full = settings.resolve(stage, key)
        assert settings.resolve(stage, full) == full, stage
    for mask in config["masks"]:
        full = settings.resolve("masks", settings.mask_key(config, mask))
        assert settings.resolve("masks", full) == full
    for method, spec in config["methods"].items():
        if not spec["checkpoint_of"]:
            full = settings.resolve("train", settings.train_key(config, method))
            assert set(settings.defaults("methods")) <= set(full)


def test_complete_settings_hold_every_default_of_the_schema():
    full = settings.resolve("train", {"steps": 2, "lr": 1e-4, "num_generations": 2, "prompts_per_step": 2})
    assert full["kl_estimator"] == settings.defaults("methods")["kl_estimator"]
    assert full["refresh_steps"] == settings.defaults("gate")["refresh_steps"]
    assert full["verify_timeout"] == settings.defaults("verify")["timeout"]
    assert full["gradient_checkpointing"] == "auto" and "save_steps" not in full
    soft = settings.resolve("masks", {"kind": "soft", "G0": 8, "tau": 0.1, "epochs": 1})
    assert soft["confidence"] == 0.9
    assert "confidence" not in settings.resolve("masks", {"kind": "gate", "G0": 8, "tau": 0.1, "epochs": 1})
    cal = settings.resolve("calibrate", {"calibration": {"n": 4, "seed": 0}})
    assert cal["sampling"]["max_new_tokens"] == 8192 and cal["sampling"]["vllm_max_num_seqs"] == 4096
    assert settings.allowed("methods", "kl_estimator") == ("k1", "k2", "k3")


@pytest.mark.parametrize("stage, given, says", [
    ("regimes", {"easy": "high"}, "regimes settings: easy: 'high' is not of type 'number'"),
    ("evaluate", {}, "evaluate settings: evaluate: missing"),
    ("evaluate", {"evaluate": {"n": 4, "seed": 0}, "sampling": {"backend": "tgi"}}, "sampling.backend"),
    ("train", {"steps": 2, "lr": 1e-4, "num_generations": 2, "prompts_per_step": 2, "kl_estimator": "k4"},
     "train settings: kl_estimator: 'k4' is not one of"),
    ("train", {"steps": 2, "lr": 1e-4, "num_generations": 2}, "train settings: prompts_per_step: missing"),
    ("train", {"steps": 2, "lr": 1e-4, "num_generations": 2, "prompts_per_step": 2, "learning_rate": 1},
     "unknown key 'learning_rate'"),
    ("masks", {"kind": "random", "fraction": 0.5, "epochs": 1}, "masks settings: seed: missing"),
    ("masks", {"kind": "gate", "G0": 8, "tau": 0.1, "epochs": 1, "seed": 3}, "seed: not read by a gate mask"),
    ("gate-draws", {"gate": {"G0": 4}}, "gate-draws settings: gate.epochs: missing"),
    ("report", {"ks": [0]}, "report settings: ks.0"),
    ("pretrain", {"task": {}, "model": {}}, "pretrain settings: pretrain: missing"),
])
def test_a_bad_settings_is_one_line_naming_the_key(stage, given, says):
    with pytest.raises(BoundaryError) as err:
        settings.resolve(stage, given)
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("command, given, says", [
    ("regimes", '{"easy": "0.6"}', "--settings: regimes settings: easy:"),
    ("evaluate", "{}", "--settings: evaluate settings: evaluate: missing"),
])
def test_a_stage_command_refuses_a_bad_settings_in_one_line(command, given, says, tmp_path, capsys):
    from boundary import cli

    paths = {"regimes": ["--calibration", str(tmp_path / "c.parquet"), "--out", str(tmp_path / "r.parquet")],
             "evaluate": ["--model", str(tmp_path), "--split", str(tmp_path / "s.parquet"),
                          "--samples", str(tmp_path / "s.parquet")]}
    code = cli.main([command, "--settings", given, *paths[command]])
    err = capsys.readouterr().err.strip()
    assert code == 1 and says in err and len(err.splitlines()) == 1, err
