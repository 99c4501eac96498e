"""The sequential-evaluation page's GPU rows: rebuilt from the GPU run's console, and the 1.5B
row by replaying the committed calibration's draws under the schema's rule."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

LAB = Path(__file__).resolve().parents[1] / "studies"
STUDY = LAB / "2026-11-29-sequential-evaluation"
CALIBRATION = LAB / "2026-11-28-qwen15b-task-selection" / "qwen15b" / "rollouts" / "base_calibration.parquet"


def test_the_gpu_rows_are_the_console():
    console = (STUDY / "gpu_h200_smollm2.txt").read_text()
    page = (STUDY / "README.md").read_text()
    draws = re.findall(r"^draws: sequential [\d,]+ of [\d,]+ = ([\d.]+)% kept; [\d,]+ drawn = ([\d.]+)%", console, re.M)
    walls = re.findall(r"^wall time .*: full ([\d.]+) s, sequential ([\d.]+) s = ([\d.]+)%", console, re.M)
    assert len(draws) == len(walls) == 2
    rows = [line for line in page.splitlines() if line.startswith("| SmolLM2") and "1 x H200" in line]
    assert len(rows) == 2
    for row, (kept, made), (full, seq, share) in zip(rows, draws, walls):
        assert f"{kept}%" in row and f"{made}%" in row, row
        assert f"{seq} s against {full} s = " in row and f"{share}%" in row, row


def test_the_1_5b_row_is_the_replay_of_its_calibration():
    from boundary.core.sequential import SequentialRule
    from boundary.core.settings import defaults

    ev = defaults("evaluate")
    rule = SequentialRule(int(ev["block"]), int(ev["round_size"]), 256)
    rows = pd.read_parquet(CALIBRATION, columns=["prompt_id", "sample_idx", "correct", "n_tokens"])
    rows = rows.sort_values(["prompt_id", "sample_idx"])
    draws = tokens = 0
    for _, g in rows.groupby("prompt_id"):
        d = rule.draws(g["correct"].to_numpy())
        draws += d
        tokens += int(g["n_tokens"].to_numpy()[:d].sum())
    row = next(line for line in (STUDY / "README.md").read_text().splitlines() if line.startswith("| Qwen2.5-Coder-1.5B, MATH500, 245 held-out"))
    assert f"**{draws / len(rows):.1%}**" in row and f"{tokens / rows['n_tokens'].sum():.1%}" in row, row


def test_the_floor_rows_are_each_prompt_drawn_to_its_first_success():
    """The page's floor (the least any exact rule draws) for the committed draws: the 1.5B
    calibration and the three GSM8K and one arithmetic H200 calibrations, recomputed here."""
    def floor(rows: pd.DataFrame) -> float:
        n = int(rows.groupby("prompt_id").size().min())
        least = 0
        for _, g in rows.sort_values("sample_idx").groupby("prompt_id"):
            hit = g["correct"].to_numpy().astype(bool)
            least += int(hit.argmax()) + 1 if hit.any() else n
        return least / len(rows)

    page = (STUDY / "README.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| Qwen2.5-Coder-1.5B, MATH500, the committed"))
    assert f"**{floor(pd.read_parquet(CALIBRATION)):.1%}**" in row, row
    outcomes = pd.read_parquet(LAB / "2026-11-28-adaptive-calibration" / "gpu_h200_outcomes.parquet")
    outcomes = outcomes[outcomes["run"] == "full"] if "run" in outcomes else outcomes
    shares = {pool: f"{floor(g):.1%}" for pool, g in outcomes.groupby("pool")}
    arith = next(line for line in page.splitlines() if line.startswith("| SmolLM2 arithmetic pool, H200 calibration"))
    gsm8k = next(line for line in page.splitlines() if line.startswith("| SmolLM2 GSM8K, three H200 calibrations"))
    assert f"**{shares['arith']}**" in arith, arith
    assert f"**{shares['gsm8k_1']}, {shares['gsm8k_2']}, {shares['gsm8k_3']}**" in gsm8k, gsm8k
