"""The training processes of tests/test_fsdp.py (not a test itself): the project's PBATrainer,
by default the policy anchor with a global KL (so the frozen base is loaded, sharded under FSDP
and scored every step), 3 steps on the smoke base. One launch runs the JSON list of jobs in
`JOBS` one after another (a launch is three process starts, most of such a test's time), each
{"mode": fsdp or ddp, "out": folder, "method": settings over these, "resume": a checkpoint to
resume from, "copy": [checkpoint, where to copy it first] (a run killed after it),
"base_rollouts": the base_rollouts stage's file for a base-sampled anchor, "every": the mask's
unanchored stride}. make_config maps fsdp to ddp without GPUs; here the FSDP arguments are
passed anyway (the test runs this with an accelerate that allows FSDP on CPU processes).
The launch and the reset between jobs are torchrun_jobs.py's. Rank 0 reports each job: its
folder, the log, the wrapped classes, the checkpoints written."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from datasets import Dataset
from torchrun_jobs import serve
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

import boundary.training.trainer_config as trainer_config
from boundary.core.settings import resolve
from boundary.stages.train import save_atomic
from boundary.training import trl_pin
from boundary.training.sharding import config_args

SETTINGS = {"steps": 3, "lr": 1e-4, "num_generations": 4, "prompts_per_step": 4, "max_completion_length": 6,
            "checkpoints": [], "refresh_steps": 3, "save_steps": 2, "mask": "m",
            "anchor": "policy", "kl_estimator": "k2", "beta_kl": 0.05}


def anchored(n: int, every: int = 2) -> np.ndarray:
    """The mask, one refresh epoch: every row anchored but each `every`-th (2: odd rows)."""
    return (np.arange(n) % every != 0).astype(float)[None]


def reward(prompts, completions, answer, **kwargs):
    return [float(hashlib.md5(c.encode()).digest()[0] < 100) for c in completions]  # ~40% correct


class Steps(TrainerCallback):
    """The steps this process ran (a resumed run skips those in its checkpoint)."""

    def __init__(self):
        self.run = []

    def on_step_end(self, args, state, control, **kwargs):
        self.run.append(state.global_step)


def run(base: str, split: pd.DataFrame, job: dict) -> dict:
    mode, out = job["mode"], job["out"]
    if job.get("copy"):
        if torch.distributed.get_rank() == 0:
            shutil.copytree(*job["copy"])
        torch.distributed.barrier()
    trainer_config.config_args = lambda sharded, checkpointing: config_args(mode, checkpointing)
    data = Dataset.from_dict({"prompt": split["problem"].tolist(), "answer": split["answer"].astype(str).tolist(),
                              "prompt_id": split["prompt_id"].tolist()})
    settings = {**SETTINGS, "sharding": mode, **job.get("method", {})}
    cfg = trainer_config.make_config(resolve("train", settings), 0, out)
    tok = AutoTokenizer.from_pretrained(base)
    trl_pin.without_vllm()  # as `boundary train` without the engine: TRL's import of vLLM is ~10 s a process
    from boundary.training.trainer import PBATrainer

    trainer = PBATrainer(AutoModelForCausalLM.from_pretrained(base), reward_funcs=reward, args=cfg,
                         train_dataset=data, processing_class=tok,
                         anchor_weights=anchored(len(split), job.get("every", 2)),
                         base_rollouts=[job["base_rollouts"]] if job.get("base_rollouts") else None)
    steps = Steps()
    trainer.add_callback(steps)
    policy_rows = []  # per generation call: this process's rows the policy draws
    generate = trainer._generate_single_turn

    def counted(prompt_ids, *args, **kwargs):
        policy_rows.append(len(prompt_ids) - sum(trainer._from_base or []))
        return generate(prompt_ids, *args, **kwargs)

    trainer._generate_single_turn = counted
    trainer.train(resume_from_checkpoint=job.get("resume"))
    every_rank = [None] * trainer.accelerator.num_processes
    torch.distributed.all_gather_object(every_rank, policy_rows)
    save_atomic(trainer.accelerator, trainer.model, tok, Path(out) / "final")
    keys = ("step", "loss", "grad_norm", "kl", "anchor_loss", "reward", "learning_rate")
    return {"log": [{k: h.get(k) for k in keys} for h in trainer.state.log_history if "loss" in h],
            "out": out, "sharded": trainer._sharded, "policy": type(trainer.model).__name__,
            "base": type(trainer.base_model).__name__, "steps_run": steps.run, "policy_rows": every_rank,
            "checkpoints": sorted(p.name for p in Path(out).glob("checkpoint-*"))}


def main(base: str, split_path: str):
    split = pd.read_parquet(split_path)
    serve(lambda job: run(base, split, job))


if __name__ == "__main__":
    main(*sys.argv[1:])
