"""Phase 1's tables (phase1_tables.py): rebuilt from small synthetic inputs of the committed
layout, checked against what they must say, and rebuilt from the committed inputs once the
holds have brought them back (skipped until then)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from boundary.analysis.regimes import Thresholds, label
from boundary.core.artifacts import read_table, write_table
from boundary.core.passk import estimate
from boundary.core.sequential import SequentialRule, replay, sequential_counts

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("phase1_tables", HERE / "phase1_tables.py")
phase1 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(phase1)

TH = Thresholds(easy=0.6, boundary=0.10, coverage_k=256, coverage_min=0.4)
RULE = SequentialRule(block=16, round_size=16, cap=256)
COLLAPSED = 3  # Boundary prompts every GRPO seed loses outright in the synthetic study


def sequential_draw(p, rng) -> pd.DataFrame:
    """One sequential first-success evaluation (block 16, rounds of 16, cap 256) of prompts with
    success rates p: the full run's outcomes, replayed by the rule, counted."""
    ids = np.repeat([f"p{i:03d}" for i in range(len(p))], RULE.cap)
    correct = rng.random((len(p), RULE.cap)) < np.asarray(p)[:, None]
    samples = pd.DataFrame({"prompt_id": ids, "sample_idx": np.tile(np.arange(RULE.cap), len(p)),
                            "correct": correct.ravel()})
    return sequential_counts(replay(samples, RULE), RULE.block, RULE.cap)


def synthetic_study(folder: Path, rise_per_step: float = 0.001) -> dict:
    rng = np.random.default_rng(57)
    p = np.concatenate([rng.uniform(0.7, 0.9, 10), rng.uniform(0.15, 0.5, 10), rng.uniform(0.004, 0.08, 14),
                        np.zeros(6)])
    c = rng.binomial(256, p)
    c[20:22] = [1, 2]  # two Boundary labels outside the robust stratum (c >= 3)
    regimes = pd.DataFrame({"prompt_id": [f"p{i:03d}" for i in range(len(p))], "n": 256, "c": c, "p_base": c / 256,
                            "regime": label(c / 256, TH), "easy": TH.easy, "boundary": TH.boundary,
                            "coverage_k": TH.coverage_k, "coverage_min": TH.coverage_min})
    write_table(regimes, folder / "regimes.parquet")
    inputs = folder / "inputs"
    for i in range(4):
        write_table(sequential_draw(p, rng), phase1.counts_path(inputs, "base", i))
    boundary = np.flatnonzero((regimes["regime"] == "Boundary").to_numpy())
    trained = p.copy()
    trained[boundary[:COLLAPSED]] = 0.0
    for step, method in phase1.CHECKPOINTS.items():
        for s in phase1.SEEDS:
            write_table(sequential_draw(trained, rng), phase1.counts_path(inputs, method, s))
    steps = np.arange(1, 151)
    for s in phase1.SEEDS:
        log = pd.DataFrame({"step": steps, "reward": 0.32 + rise_per_step * steps + rng.normal(0, 0.01, len(steps)),
                            "entropy": 0.5 - 0.001 * steps, "loss": 0.0,
                            "kl_base_k1": np.where(steps % 10 == 0, 0.001 * steps, np.nan),
                            "kl_base_k3": np.where(steps % 10 == 0, 0.0009 * steps, np.nan)})
        write_table(log, inputs / "train" / "grpo" / f"seed{s}" / "log.parquet")
    return {"inputs": inputs, "regimes": folder / "regimes.parquet", "p": p}


def test_the_tables_say_what_the_synthetic_study_holds(tmp_path):
    study = synthetic_study(tmp_path)
    tables = {t.name: t for t in phase1.build(study["inputs"], study["regimes"], resamples=300, sims=40)}
    loaded = phase1.load(study["inputs"])
    regimes = read_table(study["regimes"])

    # The checkpoint rule: the first checkpoint whose mean rise over the seeds is >= 10 points.
    rises = {step: np.mean([phase1.reward_rise(loaded["logs"][s], step) for s in phase1.SEEDS])
             for step in phase1.CHECKPOINTS}
    first = next((st for st, r in rises.items() if r >= 0.10), 150)
    assert tables["checkpoint_rule"].notes[0].startswith(f"Primary checkpoint: step {first}")
    assert first == 150  # the synthetic reward rises 0.1 points a step: 10 points by about step 130

    # The primary endpoint: the mean over Boundary prompts and seeds of trained pass@256 less the
    # base's (the mean of its draws' estimates), inside its interval.
    boundary_ids = set(regimes.loc[regimes["regime"] == "Boundary", "prompt_id"])
    base = np.mean([estimate(d.set_index("prompt_id").loc[sorted(boundary_ids)].reset_index(), [256])[:, 0]
                    for d in loaded["base"]], axis=0)
    trained = np.mean([estimate(loaded["runs"][(first, s)].set_index("prompt_id").loc[sorted(boundary_ids)]
                                .reset_index(), [256])[:, 0] for s in phase1.SEEDS], axis=0)
    primary = tables["primary"].data
    pooled = primary[(primary["prompts"] == "all Boundary") & primary["seed"].isna()].iloc[0]
    assert pooled["value"] == pytest.approx(float((trained - base).mean()), abs=1e-9)
    assert pooled["boot_low"] <= pooled["value"] <= pooled["boot_high"] and pooled["value"] < 0
    robust = primary[primary["prompts"].str.startswith("robust")]
    assert set(robust["boundary_prompts"]) == {int(((regimes["regime"] == "Boundary") & (regimes["c"] >= 3)).sum())}
    assert robust["boundary_prompts"].iloc[0] == primary["boundary_prompts"].iloc[0] - 2
    assert len(primary) == 2 * (len(phase1.SEEDS) + 1)  # per seed and pooled, on both strata

    # Lost prompts: solved by the pooled base, 0 successes in the seed's draw, summed over seeds.
    pooled_c = sum(d.set_index("prompt_id")["c"] for d in loaded["base"])
    lost = sum(int(((pooled_c > 0) & (loaded["runs"][(first, s)].set_index("prompt_id")["c"].reindex(pooled_c.index) == 0)
                    & pooled_c.index.isin(boundary_ids)).sum()) for s in phase1.SEEDS)
    row = tables["lost_gained"].data.set_index("regime").loc["Boundary"]
    assert row["lost_total"] == lost >= len(phase1.SEEDS) * COLLAPSED
    assert 0 <= row["null_median"] <= row["null_p95"]
    # OutOfReach's calibrated rates are 0 by its label: a null on them would say 0 lost, so none is given.
    out = tables["lost_gained"].data.set_index("regime").loc["OutOfReach"]
    assert np.isnan(out["null_median"]) and np.isnan(out["null_p95"]) and out["null_sims"] == 0
    verdict = tables["phase2"].data.iloc[0]
    assert verdict["phase2"] == (lost > row["null_p95"] and pooled["value"] < 0)

    # Curves, trajectories, the bridge (not run here), and every table renders.
    curves = tables["passk_curves"].data
    assert set(curves["k"]) == set(phase1.KS) and (curves["boot_low"] <= curves["boot_high"]).all()
    traj = tables["trajectories"]
    assert not traj.notes and [r[4] for r in traj.rows[:2]] == ["0.01000", "0.02000"]  # seed 0's k1 at steps 10, 20 (5 decimals)
    assert tables["bridge"].rows == [[phase1.NOT_RUN]] and tables["stage_times"].rows == [[phase1.NOT_RUN]]
    for t in tables.values():
        assert t.md().startswith("**")
    phase1.write(list(tables.values()), tmp_path / "out")
    assert {p.name for p in (tmp_path / "out").glob("*.png")} == {"passk.png", "trajectories.png"}
    assert {p.name for p in (tmp_path / "out").glob("*.csv")} == {f"{name}.csv" for name in tables}


def test_nothing_is_invented_before_the_holds(tmp_path):
    """Without inputs every table says 'not yet run' and holds no number."""
    regimes = synthetic_study(tmp_path)["regimes"]
    tables = phase1.build(tmp_path / "empty", regimes, resamples=50, sims=5)
    assert all(t.rows == [[phase1.NOT_RUN]] for t in tables)


def test_the_committed_tables_rebuild_from_the_committed_inputs(tmp_path):
    if not phase1.counts_path(phase1.INPUTS, "base", 0).exists():
        pytest.skip("Phase 1's holds have not run: no committed inputs in lab/studies/2026-11-29-qwen15b-phase1/inputs")
    tables = phase1.build(phase1.INPUTS, phase1.REGIMES)
    for t in tables:
        # Through the file, as the committed table went (a nullable column reads back as float).
        write_table(t.data, tmp_path / f"{t.name}.csv")
        rebuilt = read_table(tmp_path / f"{t.name}.csv")
        committed = read_table(phase1.OUT / f"{t.name}.csv")
        pd.testing.assert_frame_equal(rebuilt, committed, check_dtype=False, rtol=1e-6)


def test_collect_copies_counts_logs_and_stage_times_never_text(tmp_path):
    """--collect: the diagnostic counts, the training logs and the benchmark files of a merged
    results folder, at their relative paths; never samples or splits (they hold the data's text)."""
    results = tmp_path / "results" / "qwen15b"
    keep = ["eval/diagnostic/base/seed0/counts.parquet", "train/grpo/seed0/log.parquet",
            "benchmarks/evaluate/diagnostic/base/seed0.tsv"]
    for rel in keep + ["eval/diagnostic/base/seed0/samples.parquet", "splits/diagnostic.parquet",
                       "eval/gsm8k/base/seed0/counts.parquet"]:
        (results / rel).parent.mkdir(parents=True, exist_ok=True)
        (results / rel).write_text("s\th:m:s\tmax_rss\n12.5\t0:00:12\t900\n" if rel.endswith(".tsv") else "x")
    copied = phase1.collect(results, tmp_path / "inputs")
    assert sorted(p.relative_to(tmp_path / "inputs").as_posix() for p in copied) == sorted(keep)
    times = phase1.stage_times(tmp_path / "inputs")
    assert times.data["seconds"].tolist() == [12.5] and times.data["stage"].tolist() == ["evaluate"]


def test_hold8_s_second_gpu_runs_main_s_code_and_brings_back_its_figures(tmp_path):
    """gpu1.sh on a stand-in of main's tarball: `start` runs the bench, then the decode rows, from
    the unpacked tree (not the checkout), once; `collect` returns their lines and files."""
    import subprocess
    import tarfile
    import time

    plan = HERE / "holds" / "2026-12-01-hold8-plan"
    assert len((plan / "callR.sh").read_text().strip()) < 2000  # one run call's command
    for call in (plan / "callR.sh", plan / "gpu1.sh"):
        assert subprocess.run(["bash", "-n", str(call)]).returncode == 0, call.name
    tree = tmp_path / "tree"
    decode = tree / "lab/studies/2026-11-29-decode-step-h200"
    (tree / "benchmarks").mkdir(parents=True)
    decode.mkdir(parents=True)
    (tree / "benchmarks/bench_lora.py").write_text(
        "import os, sys\nassert os.getcwd().endswith('head'), os.getcwd()\nos.makedirs('lora7b', exist_ok=True)\n"
        "open('lora7b/7b_lora_pba.result.json', 'w').write('{}')\nprint('7b:lora:pba: ok; step 27.3 s', sys.argv[1:3])\n"
        "print('PBA with LoRA at 7B, kl_value_every 10: 24.5 s')\n")
    (decode / "decode_step.sh").write_text('mkdir -p "$OUT" && echo "row o: 8.1 ms a step" && touch "$OUT/console.log"\n')
    head = tmp_path / "checkout" / ".lease" / "head"
    head.mkdir(parents=True)
    with tarfile.open(head / "head.tgz", "w:gz") as tar:
        for name in ("benchmarks", "lab"):
            tar.add(tree / name, arcname=name)
    (head / "COMMIT").write_text("abc1234\n")
    env = {**os.environ, "GPU1_DIR": str(tmp_path / "head"), "GPU1_CORES": "0"}
    run = lambda *a, **kw: subprocess.run(["bash", str(plan / "gpu1.sh"), *a], cwd=tmp_path / "checkout", env={**env, **kw},
                                          capture_output=True, text=True)
    assert "commit abc1234" in run("start").stdout
    log = tmp_path / "head" / "gpu1.log"
    for _ in range(100):
        if log.exists() and "decode exit" in log.read_text():
            break
        time.sleep(0.1)
    assert "started before" in run("start").stdout  # a second call starts nothing
    out = tmp_path / "out"
    out.mkdir()
    run("collect", OUT=str(out))
    lines = (out / "gpu1.txt").read_text()
    assert "lora7b exit 0" in lines and "decode exit 0" in lines and "kl_value_every 10: 24.5 s" in lines
    assert "row o: 8.1 ms a step" in lines and "['--only', '7b:lora:grpo,7b:lora:pba,7b:lora:pba_value10']" in lines
    with tarfile.open(out / "gpu1.tgz") as tar:
        names = set(tar.getnames())
    assert {"COMMIT", "gpu1.log", "lora7b.log", "lora7b/7b_lora_pba.result.json", "decode/console.log"} <= names
