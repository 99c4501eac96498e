"""The studies' records stay true to the code: every study config still validates and plans
every artifact, every method it ran still builds its trainer config, the arithmetic studies
still draw their committed problems, a finished study's stage keys are the ones it was hashed
with, and the report code still turns each published study's committed inputs into its
published tables."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT

from boundary.cli import main
from boundary.core.config import load_config
from boundary.core.settings import method_settings, resolve
from boundary.tasks.arithmetic import levels_text, modal_answer

STUDIES = ROOT / "lab" / "studies"
CONFIGS = sorted(STUDIES.glob("*/*.yaml"))


def study(name: str) -> Path:
    return STUDIES / f"2026-11-27-{name.replace('_', '-')}"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_study_config_validates_and_builds_each_method_s_trainer_config(tmp_path, path):
    from boundary.training.trainer_config import make_config

    config = load_config(path)
    assert config["train"]["loss_type"] == "grpo"
    refresh = config["gate"]["refresh_steps"]
    for name, spec in config["methods"].items():
        if spec.get("checkpoint_of"):
            continue
        cfg = make_config(resolve("train", {**config["train"], "refresh_steps": refresh, **method_settings(spec)}),
                          0, str(tmp_path))
        if name == "psr":  # the arithmetic studies' positive control: the positive term alone
            assert (cfg.advantage, cfg.positive_weight, cfg.negative_weight) == ("reinforce", 1.0, 0.0)


def test_the_test_configs_cover_every_method_the_methods_study_ran():
    """tests/configs/methods.yaml is the product's list of every method; the study ran these."""
    ran = load_config(STUDIES / "2026-11-26-methods-study" / "methods_study.yaml")["methods"]
    offered = load_config(ROOT / "tests" / "configs" / "methods.yaml")["methods"]
    assert {m: method_settings(s) for m, s in ran.items()} == {m: method_settings(offered[m]) for m in ran}


@pytest.mark.parametrize("name", ["smollm2_arith", "smollm2_arith_easy", "smollm2_arith_add", "smollm2_arith_add15"])
def test_the_target_asks_for_every_artifact(tmp_path, name):
    from test_workflow import assert_all_asks_for_every_output

    assert_all_asks_for_every_output(tmp_path, study(name) / f"{name}.yaml")


def test_the_finished_add15_study_keeps_its_stage_keys():
    """Its committed run (results/ beside its page) was hashed with these keys: a change here
    would rerun it."""
    from test_settings import stage_keys

    folder = study("smollm2_arith_add15")
    expected = json.loads((folder / "stage_keys.json").read_text())
    assert stage_keys(load_config(folder / "smollm2_arith_add15.yaml")) == expected


@pytest.mark.parametrize("name, want", [
    ("smollm2_arith_easy", {"diagnostic": "acc138d8d6fe4bfc", "test": "02b03f1c4761a315", "train": "bed74a0babab1b61"}),
    ("smollm2_arith_add", {"diagnostic": "2838e74fa0188101", "test": "e052f9b9a4d5d411", "train": "1641fd5f0bbc3711"}),
    ("smollm2_arith_add15", {"diagnostic": "f0e4d5eab40add89", "test": "6a7187e02fbd68fa", "train": "3a19cd5851d7259e"})])
def test_a_pre_registered_study_draws_its_committed_problems(tmp_path, name, want):
    """The follow-up's, the third and the fourth study's splits (their levels under the answer
    guard) were fixed before each study ran: these files, byte for byte, and no answer over 5% of a split."""
    section = load_config(study(name) / f"{name}.yaml")["arithmetic"]
    splits = [x for split, n in section["splits"].items() for x in ("--split", f"{split}={n}")]
    assert main(["arithmetic", "--out", str(tmp_path), *splits, "--seed", str(section["seed"]),
                 "--levels", levels_text(section["levels"]),
                 "--max-answer-share", str(section["max_answer_share"])]) == 0
    digests = {s: hashlib.sha256((tmp_path / f"{s}.jsonl").read_bytes()).hexdigest()[:16] for s in section["splits"]}
    assert digests == want
    for split, n in section["splits"].items():
        rows = [json.loads(line) for line in (tmp_path / f"{split}.jsonl").read_text().splitlines()]
        assert modal_answer(rows)[1] <= 0.05 * n


@pytest.mark.parametrize("name, tables", [("smollm2_arith", 12), ("smollm2_arith_easy", 13),
                                          ("smollm2_arith_add", 13), ("smollm2_arith_add15", 13)])
def test_the_published_arithmetic_studies_rebuild_table_for_table(tmp_path, name, tables):
    """A study's folder holds its report's tables and their inputs (results/, report_settings.json)
    beside its page; the report code must still turn those inputs into the published tables."""
    from boundary.stages import report

    folder = study(name)
    root = tmp_path / folder.name
    shutil.copytree(folder / "results", root)
    report.main(["--results", str(root), "--settings", (folder / "report_settings.json").read_text(),
                 "--counts", *map(str, sorted(root.glob("eval/*/*/seed*/counts.parquet"))),
                 "--masks", *map(str, sorted(root.glob("masks/*.parquet"))),
                 "--logs", *map(str, sorted(root.glob("train/*/seed*/log.parquet")))])
    published = [t for t in sorted(folder.glob("*.md")) if t.name not in ("stage_times.md", "README.md")]
    assert len(published) == tables
    for table in published:
        assert (root / "tables" / table.name).read_text() == table.read_text(), table.name
