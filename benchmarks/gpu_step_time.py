"""GPU step time and peak memory of GRPO vs PBA on a random-weight Qwen2 (no downloads).

    PYTHONPATH=workflow HF_HUB_OFFLINE=1 python benchmarks/gpu_step_time.py [--steps 10]

A Qwen2 built from a Qwen2Config (default hidden 1024, 8 layers, vocab 32k) and a word-level
tokenizer built here, trained in bf16 mixed precision (on a device that supports it) by the
project's PBATrainer for each method: grpo, pba with the base and support anchors, pba with the k2 policy
anchor, global KL. Prompts are random token strings; the reward is a fixed pseudo-random
function of the completion (timing needs work, not learning). EOS is suppressed so every
completion has the full length and methods do equal generation work. 70% of prompts are
anchored, the paper's protected fraction. The gate refreshes every `--refresh` steps, so the
base anchor's bulk draw of an epoch's rollouts (at each refresh) falls inside the timed steps
(every 100 steps in the paper's schedule; charged here every `--refresh`). Prints, per method:
mean and median step time over `--rounds` round-robin runs (first `--warmup` steps of each
dropped), the ratio of means to grpo, and torch.cuda.max_memory_allocated. bf16 mixed
precision is on where the device supports it (make_config's "auto").
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time

import numpy as np
import pandas as pd
import torch
from transformers import TrainerCallback

from boundary.train import PBATrainer, make_config

METHODS = {
    "grpo": {},
    "pba_base": {"mask": "pba", "anchor": "base", "beta_a": 10.0},
    "pba_support": {"mask": "pba", "anchor": "support", "beta_a": 10.0, "support_floor": 0.02},
    "pba_policy_k2": {"mask": "pba", "anchor": "policy", "kl_estimator": "k2", "beta_a": 1.0},
    "global_kl": {"beta_kl": 0.035, "kl_estimator": "k2"},
}


def build_tokenizer(vocab: int):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<eos>": 1, **{f"t{i}": i for i in range(2, vocab)}}
    core = Tokenizer(models.WordLevel(vocab=words, unk_token="t2"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>")
    tok.padding_side = "left"
    return tok


def build_model(args, tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                         intermediate_size=args.intermediate,
                         max_position_embeddings=args.prompt_len + args.completion_len + 8,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                         tie_word_embeddings=False)
    model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    return model


def pseudo_reward(prompts, completions, **kwargs):
    return [float(hashlib.md5(c.encode()).digest()[0] < 77) for c in completions]  # ~30% correct


class StepClock(TrainerCallback):
    def __init__(self):
        self.times = [time.perf_counter()]

    def on_step_end(self, args, state, control, **kwargs):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())


def main():
    from datasets import Dataset

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--refresh", type=int, default=6, help="gate refresh period (steps)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--prompts", type=int, default=16, help="prompts per step")
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--completion-len", type=int, default=256)
    p.add_argument("--anchored", type=float, default=0.7)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--base-batch", type=int, default=1024,
                   help="completions per frozen-base generate call in the bulk draw")
    p.add_argument("--rounds", type=int, default=2, help="round-robin passes over the methods")
    args = p.parse_args()

    tok = build_tokenizer(args.vocab)
    rng = np.random.default_rng(0)
    n = args.prompts * args.steps
    prompts = [" ".join(f"t{i}" for i in rng.integers(2, args.vocab, args.prompt_len)) for _ in range(n)]
    data = Dataset.from_dict({"prompt": prompts, "answer": ["0"] * n,
                              "prompt_id": [f"p{i}" for i in range(n)]})
    epochs = -(-args.steps // args.refresh)
    anchored = np.tile((rng.random(n) < args.anchored).astype(float), (epochs, 1))
    settings = {"steps": args.steps, "lr": 1e-6, "num_generations": args.G,
                "prompts_per_step": args.prompts, "max_completion_length": args.completion_len,
                "temperature": 1.0, "top_p": 1.0, "checkpoints": [], "refresh_steps": args.refresh,
                "save_steps": 10 ** 6, "bf16": "auto"}
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    times: dict[str, list[float]] = {name: [] for name in args.methods.split(",")}
    peaks: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):  # round-robin, so drift in the machine hits every method
            for name in times:
                method = {**METHODS[name], "base_generation_batch_size": args.base_batch}
                cfg = make_config({**settings, **method}, seed=r, checkpoint_dir=f"{tmp}/{name}{r}")
                cfg.generation_kwargs = {"suppress_tokens": [tok.eos_token_id]}  # full-length rollouts
                cfg.save_strategy = "no"
                model = build_model(args, tok)
                base = build_model(args, tok) if (method.get("mask") or method.get("beta_kl")) else None
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                clock = StepClock()
                trainer = PBATrainer(model, reward_funcs=pseudo_reward, args=cfg, train_dataset=data,
                                     processing_class=tok,
                                     anchor_weights=anchored if method.get("mask") else None,
                                     base_model=base, callbacks=[clock])
                trainer.train()
                times[name] += np.diff(clock.times)[args.warmup:].tolist()
                if torch.cuda.is_available():
                    peaks[name] = max(peaks.get(name, 0.0), torch.cuda.max_memory_allocated() / 2 ** 30)
                del trainer, model, base
    df = pd.DataFrame([{"method": m, "mean_step_s": np.mean(t), "median_step_s": np.median(t),
                        "peak_mem_GiB": peaks.get(m, float("nan")), "steps_timed": len(t)}
                       for m, t in times.items()])
    df["ratio_to_grpo"] = df["mean_step_s"] / df.loc[df["method"] == "grpo", "mean_step_s"].iloc[0]
    print(f"device: {device}; Qwen2 hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; "
          f"{args.prompts} prompts x G={args.G}, {args.prompt_len}+{args.completion_len} tokens")
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
