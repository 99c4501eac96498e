"""How many of each GPU adaptive run's kept draws are, in effect, the full run's draws.

Reads the adaptive-calibration study's per-sample outcomes (pool, run, prompt_id, sample_idx,
correct, n_tokens, finish_reason) and prints, per pool, at the same sample index of the same
prompt: the share of the adaptive run's kept draws identical to the full run's in verdict,
token count and finish reason, and the share whose verdicts agree; beside each, the same share
for draws paired at the next sample index (what independent draws of that prompt give by
chance), and the excess over chance as a share of what chance leaves, (x - chance) / (1 - chance).
Also the draws made and kept against the full run's.

    python lab/studies/2026-11-29-label-reliability/shared_draws.py
"""

from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
OUTCOMES = HERE.parent / "2026-11-28-adaptive-calibration" / "gpu_h200_outcomes.parquet"
FIELDS = ["correct", "n_tokens", "finish_reason"]


def paired(adaptive: pd.DataFrame, full: pd.DataFrame, shift: int) -> pd.DataFrame:
    full = full.assign(sample_idx=(full["sample_idx"] - shift) % 256)
    return adaptive.merge(full, on=["prompt_id", "sample_idx"], suffixes=("_a", "_f"))


def main() -> None:
    d = pd.read_parquet(OUTCOMES)
    for pool, rows in d.groupby("pool", sort=True):
        full, adaptive = rows[rows["run"] == "full"], rows[rows["run"] == "adaptive"]
        same, chance = paired(adaptive, full, 0), paired(adaptive, full, 1)
        print(f"{pool}: kept {len(adaptive):,} of the full run's {len(full):,} ({len(adaptive) / len(full):.1%})")
        for what, cols in (("identical (verdict, tokens, finish)", FIELDS), ("verdicts agree", ["correct"])):
            x = pd.concat([same[f"{c}_a"] == same[f"{c}_f"] for c in cols], axis=1).all(axis=1).mean()
            y = pd.concat([chance[f"{c}_a"] == chance[f"{c}_f"] for c in cols], axis=1).all(axis=1).mean()
            print(f"  {what}: {x:.1%} at the same index, {y:.1%} by chance -> {(x - y) / (1 - y):.1%} shared")


if __name__ == "__main__":
    main()
