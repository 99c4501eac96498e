"""Issue 41's task selection (lab/studies/2026-11-28-qwen15b-preregistration/README.md, Amendment 2):
the seeded subsamples (lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_candidates.py --subsample) on stand-in data, the
three selection configs (lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select_*.yaml: the study's model and sampling, adaptive
calibration, one gate epoch, a plan of only the stages the selection reads), and the rule
(lab/studies/2026-11-28-qwen15b-task-selection/qwen15b_select.py) on synthetic artifacts with the stage writers' columns. The
subsamples of the real data are checked where ../shared/data is present."""

from __future__ import annotations

import csv
import importlib.util
import json
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from test_workflow import snakemake

from boundary.analysis.regimes import Thresholds, label_counts
from boundary.core import settings
from boundary.core.config import load_config

DATA = ROOT.parent / "shared" / "data"
SOURCES = {"gsm8k": "gsm8k", "math500": "math500", "omni": "omni_d5"}


def script(name):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


candidates, select = script("qwen15b_candidates"), script("qwen15b_select")


def jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Stand-in data sets and their candidates and subsamples."""
    root = tmp_path_factory.mktemp("selection")
    candidates.main(["--stand-in", str(root / "data")])
    candidates.main(["--data", str(root / "data"), "--out", str(root / "cand"), "--subsample"])
    return root / "cand"


def near(folder, name):
    with open(folder / f"{name}_near_copies.csv") as f:
        return {row["diagnostic_id"] for row in csv.DictReader(f)}


@pytest.mark.parametrize("name, train, diagnostic", [("gsm8k", 256, 128), ("math500", None, 128),
                                                     ("omni_d5", 256, 128)])
def test_a_subsample_is_random_41_over_the_rows_near_copies_dropped_first(made, name, train, diagnostic):
    full_train, full_diag = jsonl(made / f"{name}_train.jsonl"), jsonl(made / f"{name}_diagnostic.jsonl")
    sel_train, sel_diag = jsonl(made / f"{name}_sel_train.jsonl"), jsonl(made / f"{name}_sel_diagnostic.jsonl")
    copies = near(made, name)
    assert len(copies) == 3  # the stand-in's planted ones
    kept = [r for r in full_diag if r["id"] not in copies]
    assert {r["id"] for r in sel_diag} == {r["id"] for r in random.Random(41).sample(kept, diagnostic)}
    want_train = full_train if train is None else random.Random(41).sample(full_train, train)
    assert {r["id"] for r in sel_train} == {r["id"] for r in want_train}
    for sel, full in ((sel_train, full_train), (sel_diag, full_diag)):
        order = [r["id"] for r in full]
        assert [order.index(r["id"]) for r in sel] == sorted(order.index(r["id"]) for r in sel)  # file order
        rows = {r["id"]: r for r in full}  # rows as the full split holds them, `id` kept; no subject (added later)
        assert all(r == {k: v for k, v in rows[r["id"]].items() if k != "subject"} for r in sel)
    assert not copies & {r["id"] for r in sel_diag}
    assert all("level" in r for r in sel_diag) == (name == "math500")
    assert all("subject" in r for r in full_diag) == (name == "math500") and not any("subject" in r for r in sel_diag)


@pytest.mark.parametrize("name", ["gsm8k", "math500", "math500_l3", "omni_d5"])
def test_the_held_out_split_is_the_diagnostic_split_less_its_near_copies_in_file_order(made, name):
    full, held_out = jsonl(made / f"{name}_diagnostic.jsonl"), jsonl(made / f"{name}_held_out.jsonl")
    copies = near(made, name)
    assert copies and held_out == [r for r in full if r["id"] not in copies]


def test_there_is_no_math500_l3_subsample_it_is_read_off_math500(made):
    assert not (made / "math500_l3_sel_train.jsonl").exists()
    levels = {r["id"]: r["level"] for r in jsonl(made / "math500_diagnostic.jsonl")}
    assert {r["id"]: r["level"] for r in jsonl(made / "math500_sel_diagnostic.jsonl")}.items() <= levels.items()


@pytest.mark.skipif(not (DATA / "math500" / "test.jsonl").exists(), reason="needs ../shared/data")
def test_the_real_subsamples(tmp_path, capsys):
    candidates.main(["--data", str(DATA), "--out", str(tmp_path), "--subsample"])
    out = capsys.readouterr().out
    for line in ("gsm8k: train 2048, diagnostic 500, near-copies 0; subsample (seed 41): train 256, diagnostic 128",
                 "math500: train 250, diagnostic 250, near-copies 5; subsample (seed 41): train 250, diagnostic 128",
                 "math500_l3: train 182, diagnostic 185, near-copies 1",
                 "omni_d5: train 1079, diagnostic 500, near-copies 4; subsample (seed 41): train 256, diagnostic 128"):
        assert line in out
    levels = [r["level"] for r in jsonl(tmp_path / "math500_sel_diagnostic.jsonl")]
    assert 80 <= sum(level >= 3 for level in levels) <= 110  # "about 95"


@pytest.mark.parametrize("source", SOURCES)
def test_a_selection_config_is_the_studys_sampling_with_adaptive_calibration_and_one_gate_epoch(source):
    study, config = load_config(ROOT / "lab" / "studies" / "2026-11-28-qwen15b-preregistration" / "qwen15b.yaml"), load_config(Path(__file__).resolve().parent / f"qwen15b_select_{source}.yaml")
    assert config["run"] == f"qwen15b_select_{source}"
    for key in ("base_model", "prompt", "verify", "sampling", "regimes", "gate"):
        assert config[key] == study[key], key
    assert config["sampling"]["max_new_tokens"] == 1024
    # shards: how the study's own calibration is spread over GPUs; it draws no other settings
    assert config["calibration"] == {**study["calibration"], "adaptive": True, "shards": 1}
    gate = settings.gate_draws_key(config)["gate"]
    assert (gate["epochs"], gate["G0"], gate["seed"], gate["temperature"], gate["top_p"]) == (1, 8, 2002, 0.6, 0.95)
    name = SOURCES[source]
    assert config["data"]["train"]["path"] == f"results/qwen15b/candidates/{name}_sel_train.jsonl"
    assert config["data"]["diagnostic"]["path"] == f"results/qwen15b/candidates/{name}_sel_diagnostic.jsonl"
    assert config["data"]["diagnostic"]["id_field"] == "id"


@pytest.mark.parametrize("source", SOURCES)
def test_a_selection_run_plans_only_the_stages_the_rule_reads(tmp_path, source, made):
    """Its targets (gate draws, regimes) need the import, two splits, calibration, gate draws and
    regimes: nothing is trained, masked or evaluated."""
    config = load_config(Path(__file__).resolve().parent / f"qwen15b_select_{source}.yaml")
    (tmp_path / "models").mkdir()
    (tmp_path / config["base_model"]).write_bytes(b"")  # the dry run opens none
    (tmp_path / "results" / "qwen15b").mkdir(parents=True)
    (tmp_path / "results" / "qwen15b" / "candidates").symlink_to(made)
    run = f"results/qwen15b_select_{source}"
    out = snakemake(f"{run}/rollouts/base_gate.parquet", f"{run}/regimes/regimes.parquet", "-n", "--cores", "1",
                    "--configfile", str(Path(__file__).resolve().parent / f"qwen15b_select_{source}.yaml"), cwd=tmp_path).stdout
    jobs = re.findall(r"^(?:local)?rule (\w+):", out, re.M)
    assert sorted(jobs) == ["calibrate_base", "gate_draws", "import_base", "regimes", "splits", "splits"], out[-3000:]
    assert f"{run}/splits/bench_full_diagnostic.parquet" not in out


def write_run(root, run, gate_rows, regimes_rows):
    """A selection run's artifacts with the stage writers' columns (calibrate.py's gate draws,
    analysis/regimes.label_counts)."""
    gate = pd.DataFrame(gate_rows, columns=["prompt_id", "correct", "n_tokens"])
    gate = gate.assign(epoch=0, draw_idx=gate.groupby("prompt_id").cumcount(), completion="x", answer="1",
                       verified=True, finish_reason="stop", entropy=0.5)
    (root / run / "rollouts").mkdir(parents=True)
    gate[["prompt_id", "epoch", "draw_idx", "completion", "answer", "correct", "verified", "n_tokens",
          "finish_reason", "entropy"]].to_parquet(root / run / "rollouts" / "base_gate.parquet")
    counts = pd.DataFrame(regimes_rows, columns=["prompt_id", "n", "c"])
    (root / run / "regimes").mkdir(parents=True)
    label_counts(counts, Thresholds(0.6, 0.1, 256, 0.4)).to_parquet(root / run / "regimes" / "regimes.parquet")


def gate_for(ids, success, tokens):
    """8 draws a prompt, round(8 x success) of them correct."""
    return [(i, d < round(8 * success), tokens) for i in ids for d in range(8)]


def regimes_for(ids, boundary):
    """The first `boundary` prompts Boundary (5 of 256), the rest Reachable (64 of 256)."""
    return [(i, 256, 5 if k < boundary else 64) for k, i in enumerate(ids)]


@pytest.fixture
def artifacts(made, tmp_path):
    """Runs whose measurements are known: GSM8K easy (reward 0.75, 10 of 128 Boundary), MATH500
    with 40 Boundary of its 128 (30 of them level >= 3), Omni with 48 of 128 but a reward of 0.125."""
    made = Path(shutil.copytree(made, tmp_path / "cand"))  # a test may edit its near-copy lists
    ids = {s: ([r["id"] for r in jsonl(made / f"{n}_sel_train.jsonl")],
               [r["id"] for r in jsonl(made / f"{n}_sel_diagnostic.jsonl")]) for s, n in SOURCES.items()}
    write_run(tmp_path, "qwen15b_select_gsm8k", gate_for(ids["gsm8k"][0], 0.75, 300), regimes_for(ids["gsm8k"][1], 10))
    math_diag = jsonl(made / "math500_sel_diagnostic.jsonl")
    hard = [r["id"] for r in math_diag if r["level"] >= 3]
    easy = [r["id"] for r in math_diag if r["level"] < 3]
    write_run(tmp_path, "qwen15b_select_math500", gate_for(ids["math500"][0], 0.5, 600),
              regimes_for(hard[:30] + easy[:10] + hard[30:] + easy[10:], 40))
    write_run(tmp_path, "qwen15b_select_omni", gate_for(ids["omni"][0], 0.125, 650), regimes_for(ids["omni"][1], 48))
    return made, tmp_path


def run_select(made, results, tmp_path, capsys):
    select.main(["--candidates", str(made), "--results", str(results), "--out", str(tmp_path / "selection.csv")])
    table = pd.read_csv(tmp_path / "selection.csv").set_index("candidate")
    return table, capsys.readouterr().out


def test_the_rule_qualifies_and_picks_by_expected_boundary_prompts(artifacts, tmp_path, capsys):
    made, results = artifacts
    table, out = run_select(made, results, tmp_path, capsys)
    assert list(table.index) == ["gsm8k", "math500", "math500_l3", "omni_d5"]
    assert table.loc["gsm8k", "reward"] == 0.75 and table.loc["gsm8k", "gate_draws"] == 256 * 8
    assert table.loc["gsm8k", "boundary_share"] == 10 / 128 and not table.loc["gsm8k", "qualifies"]
    assert table.loc["omni_d5", "boundary_share"] == 48 / 128 and not table.loc["omni_d5", "qualifies"]  # reward
    hard = sum(r["level"] >= 3 for r in jsonl(made / "math500_sel_diagnostic.jsonl"))
    assert table.loc["math500_l3", "diagnostic_prompts"] == hard and table.loc["math500_l3", "boundary"] == 30
    train_hard = sum(r["level"] >= 3 for r in jsonl(made / "math500_sel_train.jsonl"))
    assert table.loc["math500_l3", "train_prompts"] == train_hard
    # expected Boundary prompts in the whole split: share x (split size less its near-copies)
    for name in ("math500", "math500_l3"):
        split = len(jsonl(made / f"{name}_diagnostic.jsonl")) - len(near(made, name))
        assert table.loc[name, "split_prompts"] == split
        assert table.loc[name, "expected_boundary"] == pytest.approx(table.loc[name, "boundary_share"] * split)
    assert table.loc["math500", "expected_boundary"] > table.loc["math500_l3", "expected_boundary"]
    assert table["rank"].to_dict() == {"gsm8k": 0, "math500": 1, "math500_l3": 2, "omni_d5": 0}
    lo, hi = select.wilson(40, 128)
    assert (table.loc["math500", "share_lo"], table.loc["math500", "share_hi"]) == pytest.approx((lo, hi))
    assert lo < 40 / 128 < hi and np.isclose(select.wilson(0, 10)[1], 0.2775, atol=1e-4)
    assert table.loc["math500", "mean_completion_tokens"] == 600
    assert "verdict: math500 (expected" in out and "next if its whole split does not confirm: math500_l3" in out


def test_a_tie_goes_to_the_shorter_mean_completion():
    table = pd.DataFrame({"candidate": ["a", "b", "c"], "qualifies": [True, True, False],
                          "expected_boundary": [50.0, 50.0, 90.0], "mean_completion_tokens": [700.0, 400.0, 100.0]})
    assert select.select(table)["rank"].tolist() == [2, 1, 0]


def test_near_copy_boundary_prompts_are_dropped_from_the_share(artifacts, tmp_path, capsys):
    made, results = artifacts
    boundary = pd.read_parquet(results / "qwen15b_select_math500" / "regimes" / "regimes.parquet")
    first = boundary.loc[boundary["regime"] == "Boundary", "prompt_id"].iloc[0]
    with open(made / "math500_near_copies.csv", "a") as f:  # as if the list named one of them
        f.write(f"{first},math500-00000,text\n")
    table, _ = run_select(made, results, tmp_path, capsys)
    assert table.loc["math500", "near_copy_boundary"] == 1
    assert (table.loc["math500", "boundary"], table.loc["math500", "diagnostic_prompts"]) == (39, 127)


def test_none_qualifying_says_the_study_does_not_train(artifacts, tmp_path, capsys):
    made, results = artifacts
    path = results / "qwen15b_select_math500" / "rollouts" / "base_gate.parquet"
    gate = pd.read_parquet(path)
    gate.assign(correct=False).to_parquet(path)
    table, out = run_select(made, results, tmp_path, capsys)
    assert not table["qualifies"].any() and (table["rank"] == 0).all()
    assert "verdict: no candidate qualifies" in out and "does not train on this model" in out


def test_a_run_of_another_subsample_is_refused_in_one_line(artifacts, tmp_path):
    made, results = artifacts
    path = results / "qwen15b_select_omni" / "regimes" / "regimes.parquet"
    pd.read_parquet(path).iloc[1:].to_parquet(path)
    with pytest.raises(SystemExit, match=r"regimes.parquet: 1 of the subsample's 128 prompts missing"):
        select.main(["--candidates", str(made), "--results", str(results), "--out", str(tmp_path / "s.csv")])


@pytest.mark.parametrize("boundary, verdict", [(30, "confirmed: math500's held-out split has 30 of"),
                                               (10, "not confirmed: math500's held-out split has 10 of")])
def test_the_confirmation_reads_the_study_runs_whole_held_out_split(artifacts, tmp_path, capsys, boundary, verdict):
    """Amendment 2: confirmed at a Boundary share of at least 20% of the held-out split; else the
    table's next candidate by rank is named. A run of other prompts is refused in one line."""
    made, results = artifacts
    run_select(made, results, tmp_path, capsys)
    held_out = [r["id"] for r in jsonl(made / "math500_held_out.jsonl")]
    (results / "qwen15b" / "rollouts").mkdir(parents=True)
    (results / "qwen15b" / "regimes").mkdir(parents=True)
    counts = pd.DataFrame(regimes_for(held_out, boundary), columns=["prompt_id", "n", "c"])
    label_counts(counts, Thresholds(0.6, 0.1, 256, 0.4)).to_parquet(results / "qwen15b" / "regimes" / "regimes.parquet")
    args = ["--candidates", str(made), "--results", str(results), "--out", str(tmp_path / "selection.csv"),
            "--confirm", "qwen15b"]
    select.main(args)
    out = capsys.readouterr().out
    lo, hi = select.wilson(boundary, len(held_out))
    assert verdict in out and f"{len(held_out)} Boundary ({boundary / len(held_out):.3f} [{lo:.3f}, {hi:.3f}])" in out
    assert ("confirm math500_l3 next" in out) == (boundary / len(held_out) < 0.2)
    counts.iloc[1:].pipe(label_counts, Thresholds(0.6, 0.1, 256, 0.4)).to_parquet(
        results / "qwen15b" / "regimes" / "regimes.parquet")
    with pytest.raises(SystemExit, match="not math500's held-out split"):
        select.main(args)


@pytest.mark.parametrize("success, cap, verdict", [(0.25, 512, "the pilot trains at its cap"),
                                                   (0.125, 512, "go to 1,024 tokens"),
                                                   (0.125, 1024, "by Amendment 9 the pilot goes on at it")])
def test_the_pilot_check_reads_the_gate_draws_reward_against_the_bar(tmp_path, capsys, success, cap, verdict):
    """Amendment 4: the pilot trains at its cap when its gate draws' mean is at least 20%; else
    its completions go to 1,024 tokens, and if they are there already it goes on (Amendment 9).
    A run without gate draws is one line."""
    gate = pd.DataFrame(gate_for([f"p{i}" for i in range(40)], success, cap), columns=["prompt_id", "correct", "n_tokens"])
    gate["finish_reason"] = ["length" if i % 4 == 0 else "stop" for i in range(len(gate))]
    (tmp_path / "pilot" / "rollouts").mkdir(parents=True)
    gate.to_parquet(tmp_path / "pilot" / "rollouts" / "base_gate.parquet")
    select.main(["--results", str(tmp_path), "--pilot", "pilot"])
    out = capsys.readouterr().out
    correct = int(round(8 * success)) * 40
    lo, hi = select.wilson(correct, 320)
    assert f"pilot: training reward {correct / 320:.3f} [{lo:.3f}, {hi:.3f}] ({correct} of 320 gate draws of 40 prompts; 25.0% cut" in out
    verdicts = ["the pilot trains at its cap", "go to 1,024 tokens", "by Amendment 9 the pilot goes on at it"]
    assert [v for v in verdicts if v in out] == [verdict]
    with pytest.raises(SystemExit, match=r"qwen15b_select: .*other/rollouts/base_gate.parquet"):
        select.main(["--results", str(tmp_path), "--pilot", "other"])


def test_the_confirmation_page_is_rebuilt_from_its_committed_run():
    """lab/studies/2026-11-28-qwen15b-task-selection/README.md's confirmation: the labels recomputed
    from the committed calibration's verdicts at the config's thresholds are the committed
    labels, and give the page's counts (57 of 245 Boundary), its pass@1 and completion figures,
    the gate's reward, and the 115 of 128 labels shared with the selection's adaptive run."""
    from boundary.analysis.regimes import counts_from_calibration

    run = Path(__file__).resolve().parent / "qwen15b"
    calibration = pd.read_parquet(run / "rollouts" / "base_calibration.parquet")
    settings_ = load_config(ROOT / "lab" / "studies" / "2026-11-28-qwen15b-preregistration" / "qwen15b.yaml")["regimes"]
    labels = label_counts(counts_from_calibration(calibration), Thresholds(**settings_))
    committed = pd.read_parquet(run / "regimes" / "regimes.parquet")
    pd.testing.assert_frame_equal(labels.reset_index(drop=True), committed.reset_index(drop=True), check_like=True)
    counts = committed["regime"].value_counts().to_dict()
    assert counts == {"SolvedEasy": 77, "Reachable": 84, "Boundary": 57, "OutOfReach": 27}
    assert (len(calibration), round(calibration["correct"].mean(), 3), round(calibration["n_tokens"].mean(), 1),
            round((calibration["finish_reason"] == "length").mean(), 3)) == (62_720, 0.382, 546.8, 0.123)
    gate = pd.read_parquet(run / "rollouts" / "base_gate.parquet")
    assert (len(gate), round(gate["correct"].mean(), 3)) == (6_000, 0.321)
    assert gate.groupby("epoch")["correct"].sum().tolist() == [641, 640, 644]
    selection = pd.read_parquet(run.parent / "qwen15b_select_math500" / "regimes" / "regimes.parquet")
    both = selection.merge(committed, on="prompt_id", suffixes=("_selection", ""))
    assert (len(both), (both["regime_selection"] == both["regime"]).sum()) == (128, 115)
    assert (both["regime"] == "Boundary").sum() == 31 and (both["regime_selection"] == "Boundary").sum() == 34
