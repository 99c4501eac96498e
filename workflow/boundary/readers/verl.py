"""verl's outputs (volcengine/verl, read from verl/trainer/ppo/ray_trainer.py and
verl/trainer/main_generation.py):

- validation generation dumps, written when `trainer.validation_data_dir` is set:
  `{validation_data_dir}/{global_step}.jsonl`, one line per sample of every validation
  prompt (val_kwargs.n samples each), keys `input` (decoded prompt), `output` (decoded
  response), `gts` (ground truth; v0.6.0 and later, absent in v0.4.1 and v0.5.0), `score`
  (summed token-level reward), `step`, plus the reward function's extra infos (`reward`, and
  e.g. `acc`, `pred`). The same format serves `trainer.rollout_data_dir` (training
  rollouts). A folder of dumps reads the step its path selects (`DIR@step=N`), else --step,
  else the latest.
- `main_generation` parquet: the dataset (prompt as chat messages, reward_model.ground_truth,
  extra_info.index, ...) plus `responses`, a list of n texts per prompt, and no scores; the
  completions are graded with the project's verifier against --gold, or else against the
  file's own reward_model.ground_truth.

The prompt text keys the prompt (verl keeps no uid in its dumps; main_generation's
extra_info.index is a row number). The verdict is `acc` where the reward function returned
one, else score > --reward-threshold. verl's own validation
metric best@N (metric_utils.bootstrap_metric: the max over N samples drawn with replacement)
is not written to the dumps; if it reaches boundary in a table it is warned about.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from boundary.core.artifacts import read_json
from boundary.core.errors import BoundaryError
from boundary.readers.common import SAMPLE_COLUMNS, verdicts
from boundary.readers.problems import message_text

DUMP_KEYS = {"input", "output", "score", "step"}


def looks_like(names) -> bool:
    names = set(names)
    return {"input", "output"} <= names and bool(names & {"score", "step", "gts"})


def looks_like_generation(names) -> bool:
    return "responses" in set(names) and bool(set(names) & {"reward_model", "prompt"})


def dump_file(path: Path, step: int | None) -> Path:
    """The dump to read: the file itself, or in a folder of {step}.jsonl the given/latest step."""
    if not path.is_dir():
        return path
    steps = {int(p.stem): p for p in path.glob("*.jsonl") if p.stem.isdigit()}
    if not steps:
        raise BoundaryError(f"{path}: no verl dumps ({{step}}.jsonl) in this folder")
    if step is None:
        return steps[max(steps)]
    if step not in steps:
        raise BoundaryError(f"{path}: no dump for step {step} (steps: {', '.join(map(str, sorted(steps)))})")
    return steps[step]


def read(path: Path, threshold: float = 0.5, step: int | None = None) -> pd.DataFrame:
    path = dump_file(path, step)
    df = read_json(path, {"input": pa.string(), "output": pa.string(), "score": pa.float64(),
                           "step": pa.int64(), "acc": None, "pred": None}, text=("pred",))
    if df["input"].isna().any() or df["output"].isna().any():
        raise BoundaryError(f"{path}: a line without input or output (not a verl generation dump?)")
    if df["acc"].notna().all():
        correct = verdicts(df["acc"], path, "acc", 0.5)
    elif df["score"].notna().all():
        correct = verdicts(df["score"], path, "score", threshold)
    else:
        correct = None
    return pd.DataFrame({"prompt_id": None, "prompt": df["input"].to_numpy(), "completion": df["output"].to_numpy(),
                         "correct": None if correct is None else correct.to_numpy(),
                         "answer": df["pred"].astype(object).where(df["pred"].notna(), None).to_numpy()
                         if df["pred"].notna().any() else None,
                         "entropy": np.nan})[SAMPLE_COLUMNS]


def gold_of_generation(df: pd.DataFrame) -> pd.DataFrame:
    """prompt_id, problem, answer of a verl dataset / main_generation parquet."""
    index = [e.get("index") if isinstance(e, dict) else None for e in df["extra_info"]] \
        if "extra_info" in df else [None] * len(df)
    problem = [message_text(p) for p in df["prompt"]]
    ids = [str(i) if i is not None else None for i in index]
    answer = [r.get("ground_truth") if isinstance(r, dict) else None for r in df["reward_model"]] \
        if "reward_model" in df else [None] * len(df)
    return pd.DataFrame({"prompt_id": ids, "problem": problem, "answer": answer})


def read_generation(path: Path) -> pd.DataFrame:
    """One row per response; the user's message keys the prompt (extra_info.index is a row
    number of the dataset, so it pairs nothing across files)."""
    try:
        df = pd.read_parquet(path)
    except Exception as err:
        raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {err})") from None
    if "prompt" not in df:
        raise BoundaryError(f"{path}: no prompt column (verl main_generation keeps the dataset's prompt messages)")
    gold = gold_of_generation(df)
    lengths = df["responses"].map(len)
    rows = np.repeat(np.arange(len(df)), lengths.to_numpy())
    return pd.DataFrame({"prompt_id": None, "prompt": gold["problem"].to_numpy()[rows],
                         "completion": np.concatenate([np.asarray(r, dtype=object) for r in df["responses"]])
                         if len(df) else [], "correct": None, "answer": None, "entropy": np.nan})[SAMPLE_COLUMNS]
