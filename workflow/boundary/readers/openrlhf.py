"""OpenRLHF's outputs (OpenRLHF/OpenRLHF, read from openrlhf/cli/batch_inference.py and
openrlhf/utils/processor.py at v0.6.0, v0.8.0 and v0.9.5 (the same lines), and openrlhf/trainer/ppo_trainer.py at v0.9.5 and
v0.11):

- batch inference JSONL (`python -m openrlhf.cli.batch_inference --output_path`, up to
  v0.9.5; the module was removed in v0.9.6): one line per sample, {"input": prompt text
  (chat template or --input_template applied), "output": completion}, `--best_of_n` N
  lines per prompt (the prompt list repeated N times: prompts * N); after reward-model
  inference each line also has "reward". Graded with --gold, or by reward >
  --reward-threshold.
- after `--post_processor rs` (rejection sampling) the file keeps one line per prompt, the
  highest-reward output: that is a max over n, not a sample. A file with one line per prompt
  and a reward is warned about.
- PPO evaluation (`--eval.n_samples_per_prompt`; the only evaluation OpenRLHF v0.9.6 to
  v0.11 has) writes no samples, only logs aggregates: eval_{dataset}_pass{n} is the max
  reward over the n samples, eval_{dataset}_pass1 their mean. Neither is a per-prompt count;
  a table with such columns is warned about and cannot be read. Sample with vLLM and write
  a samples file instead (readers.samples).

The prompt text keys the prompt.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from boundary.core.artifacts import read_json
from boundary.core.errors import BoundaryError, warn
from boundary.readers.common import SAMPLE_COLUMNS, verdicts


def looks_like(names) -> bool:
    return {"input", "output"} <= set(names)


def read(path: Path, threshold: float = 0.5) -> pd.DataFrame:
    if path.suffix.lower() not in (".jsonl", ".json"):
        raise BoundaryError(f"{path}: OpenRLHF batch inference writes JSONL")
    df = read_json(path, {"input": pa.string(), "output": pa.string(), "reward": pa.float64()})
    if df["input"].isna().any() or df["output"].isna().any():
        raise BoundaryError(f"{path}: a line without input or output")
    has_reward = df["reward"].notna().all()
    if has_reward and not df["input"].duplicated().any():
        warn(f"{path}: one sample per prompt with a reward: if this file went through OpenRLHF's "
             f"--post_processor rs, each line is the best of N (a max over n), not a sample, and its "
             f"c/n is not an unbiased pass@1")
    return pd.DataFrame({"prompt_id": None, "prompt": df["input"].to_numpy(), "completion": df["output"].to_numpy(),
                         "correct": verdicts(df["reward"], path, "reward", threshold).to_numpy() if has_reward else None,
                         "answer": None, "entropy": float("nan")})[SAMPLE_COLUMNS]
