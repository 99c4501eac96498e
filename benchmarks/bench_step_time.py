"""Step time of GRPO vs PBA (each anchor), global KL and the field's methods on the testbed, in one process.

    PYTHONPATH=workflow python benchmarks/bench_step_time.py --model .scratch/base [--steps 40]

Every method trains from the same base on the same 800 prompts with the same batch; methods
run round-robin (`--rounds`) so machine load drifts hit them alike. A step's time is the wall
time between optimizer steps (generation, rewards, frozen-base passes, loss, backward,
optimizer); the first `--warmup` steps of each run are dropped (verifier pool start-up).
PBA masks anchor a fixed random `--anchored` fraction of prompts (the paper's 70% protected);
the masked methods of the methods study (zero_success drops them, the DPH-RL anchors rehearse
them) use the same mask, so their cost is charged at 70% masked whatever their own mask's share.
Ratios are of mean step times, so the base anchor's bulk draw at each refresh (every 20
steps here, every 100 in the default config) is charged in full.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import pandas as pd
from transformers import TrainerCallback

from boundary.stages.train import train
from boundary.tasks.testbed import TestbedTask, make_prompts
from boundary.training.gate import build_mask

METHODS = {
    "grpo": {},
    "pba_policy_k1": {"mask": "pba", "anchor": "policy", "kl_estimator": "k1", "beta_a": 1.0},
    "pba_policy_k2": {"mask": "pba", "anchor": "policy", "kl_estimator": "k2", "beta_a": 1.0},
    "pba_policy_k3": {"mask": "pba", "anchor": "policy", "kl_estimator": "k3", "beta_a": 1.0},
    "pba_base": {"mask": "pba", "anchor": "base", "beta_a": 10.0, "base_generation_batch_size": 4096},
    "pba_support": {"mask": "pba", "anchor": "support", "beta_a": 10.0, "support_floor": 0.02,
                    "base_generation_batch_size": 4096},
    "global_kl": {"beta_kl": 0.035, "kl_estimator": "k2"},
    # The field's methods (tests/configs/methods.yaml); mask methods use the same random mask.
    "zero_success": {"mask": "pba", "masked_action": "drop"},
    "dph_forward_kl": {"mask": "pba", "anchor": "forward_kl", "beta_a": 0.05, "base_generation_batch_size": 4096},
    "dph_js": {"mask": "pba", "anchor": "js", "beta_a": 0.2, "base_generation_batch_size": 4096},
    "passk": {"advantage": "passk", "passk_k": 4},
    "w_reinforce": {"advantage": "reinforce", "positive_weight": 0.1},
    "nsr": {"advantage": "reinforce", "positive_weight": 0.0},
    "clip_cov": {"cov_select": "clip", "cov_fraction": 2e-4, "cov_bounds": [1.0, 5.0]},
    "kl_cov": {"cov_select": "kl", "cov_fraction": 0.002, "cov_kl_coef": 1.0},
    "clip_higher": {"epsilon_high": 0.28},
    "unlikeliness": {"unlikeliness": 0.25},
}


class StepClock(TrainerCallback):
    def __init__(self):
        self.times = []

    def on_step_end(self, args, state, control, **kwargs):
        self.times.append(time.perf_counter())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="testbed base folder")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--anchored", type=float, default=0.7)
    parser.add_argument("--settings", default="{}", help="JSON overriding the train settings")
    parser.add_argument("--methods", default=",".join(METHODS))
    args = parser.parse_args()
    split = make_prompts(TestbedTask(), {"train": 800})["train"]
    settings = {"steps": args.steps, "lr": 1e-4, "num_generations": 8, "prompts_per_step": 8,
                "max_completion_length": 6, "refresh_steps": 20, "checkpoints": [],
                "save_steps": 10 ** 6, **json.loads(args.settings)}
    epochs = -(-settings["steps"] // settings["refresh_steps"])
    mask = build_mask("random", {"fraction": args.anchored, "seed": 17, "epochs": epochs}, None,
                      split["prompt_id"])
    times: dict[str, list[float]] = {m: [] for m in args.methods.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in times:
                clock = StepClock()
                method = METHODS[name]
                train(args.model, split, {**settings, **method}, seed=r, out_dir=f"{tmp}/{name}{r}",
                      checkpoint_dir=f"{tmp}/ck/{name}{r}", mask=mask if method.get("mask") else None,
                      callbacks=[clock])
                times[name] += np.diff(clock.times)[args.warmup:].tolist()
    grpo = np.mean(times["grpo"]) if "grpo" in times else np.nan
    rows = [{"method": m, "median_step_s": np.median(t), "mean_step_s": np.mean(t),
             "ratio_to_grpo": np.mean(t) / grpo, "steps_timed": len(t)} for m, t in times.items()]
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
