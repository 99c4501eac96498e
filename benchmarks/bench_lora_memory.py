"""Memory of PBA with the frozen base's copy (full fine-tuning) and without it (LoRA: the base is
the policy with its adapter off), on a small random Qwen2, on the CPU or a GPU.

    PYTHONPATH=workflow HF_HUB_OFFLINE=1 python benchmarks/bench_lora_memory.py [--hidden 512 --layers 8]

Each variant runs in a child process of its own (so one's peak is not the other's), trains
`--steps` steps of PBA (the policy anchor, k1: the base scores every anchored rollout) with
the project's PBATrainer and prints, as counted from the tensors: the policy's parameters and
trainable parameters, the frozen copy's parameters, the bytes of the weights held (policy +
copy), of the gradients (before an optimizer step) and of AdamW's state; and the peak: on a GPU torch's
max allocated, on the CPU the process's peak resident memory above what it held before the
model was built (imports, the tokenizer). Then the ratios LoRA / full.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from gpu_step_time import build_model, build_tokenizer, prompts_for, pseudo_reward, stop_ids  # noqa: E402


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def gradient_bytes_callback():
    from transformers import TrainerCallback

    class GradientBytes(TrainerCallback):
        """The gradients' bytes just before an optimizer step (zeroed, i.e. freed, after it)."""

        def __init__(self):
            self.most = 0

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            self.most = max(self.most, nbytes(p.grad for p in model.parameters() if p.grad is not None))

    return GradientBytes


def run(args, variant: str, queue) -> None:
    from datasets import Dataset

    from boundary.core.settings import resolve
    from boundary.training.lora import parameter_counts
    from boundary.training.trainer import PBATrainer
    from boundary.training.trainer_config import make_config

    GradientBytes = gradient_bytes_callback()  # noqa: N806
    gpu = torch.cuda.is_available()
    tok = build_tokenizer(args.vocab)
    rng = np.random.default_rng(0)
    n = args.prompts * args.steps
    data = Dataset.from_dict({"prompt": prompts_for(args, tok, n, rng), "answer": ["0"] * n,
                              "prompt_id": [f"p{i}" for i in range(n)]})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    model = build_model(args, tok)
    if gpu:
        model.cuda()
        torch.cuda.reset_peak_memory_stats()
    settings = {"steps": args.steps, "lr": 1e-5, "num_generations": args.G, "prompts_per_step": args.prompts,
                "max_completion_length": args.completion_len, "checkpoints": [], "save_steps": 10 ** 6,
                "mask": "pba", "anchor": "policy", "kl_estimator": "k1", "beta_a": 1.0, "bf16": "auto"}
    if variant == "lora":
        settings["lora"] = {"enabled": True, "rank": args.rank}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = make_config(resolve("train", settings), seed=0, checkpoint_dir=tmp)
        cfg.generation_kwargs = {"suppress_tokens": stop_ids(model, tok)}  # full-length rollouts
        cfg.save_strategy = "no"
        anchored = (rng.random(n) < 0.7).astype(float)[None]
        grads = GradientBytes()
        trainer = PBATrainer(model, reward_funcs=pseudo_reward, args=cfg, train_dataset=data,
                             processing_class=tok, anchor_weights=anchored, callbacks=[grads])
        trainer.train()
    policy = trainer.accelerator.unwrap_model(trainer.model)
    trainable, total = parameter_counts(policy)
    copy = [] if trainer.base_model is None else list(trainer.base_model.parameters())
    state = [v for s in trainer.optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    peak = (torch.cuda.max_memory_allocated() if gpu else
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before)
    queue.put({"variant": variant, "parameters": total, "trainable": trainable,
               "frozen_copy_parameters": sum(p.numel() for p in copy),
               "weights_bytes": nbytes(policy.parameters()) + nbytes(copy), "grad_bytes": grads.most,
               "optimizer_bytes": nbytes(state), "peak_bytes": peak})


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=1408)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--G", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--completion-len", type=int, default=32)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--rank", type=int, default=16)
    args = p.parse_args()
    args.model = args.split = None  # gpu_step_time's prompts: random token strings
    context = multiprocessing.get_context("spawn")
    rows = []
    for variant in ("full", "lora"):
        queue = context.Queue()
        child = context.Process(target=run, args=(args, variant, queue))
        child.start()
        rows.append(queue.get())
        child.join()
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (peak: resident memory)"
    print(f"device: {device}; Qwen2 hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; PBA (policy "
          f"anchor, k1), {args.prompts} prompts x G={args.G}, {args.completion_len} tokens, {args.steps} steps; "
          f"LoRA rank {args.rank}")
    mib = 2 ** 20
    for r in rows:
        print(f"{r['variant']:5} parameters {r['parameters']:,} (trainable {r['trainable']:,}), frozen copy "
              f"{r['frozen_copy_parameters']:,}; weights {r['weights_bytes'] / mib:.1f} MiB, gradients "
              f"{r['grad_bytes'] / mib:.1f} MiB, AdamW {r['optimizer_bytes'] / mib:.1f} MiB; "
              f"peak {r['peak_bytes'] / mib:.1f} MiB")
    full, lora = rows
    print("lora / full: " + json.dumps({k: round(lora[k] / full[k], 3) for k in
                                         ("weights_bytes", "optimizer_bytes", "peak_bytes") if full[k]}))


if __name__ == "__main__":
    main()
