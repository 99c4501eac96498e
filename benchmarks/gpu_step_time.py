"""GPU step time and peak memory of GRPO vs PBA: a random-weight Qwen2, or a real model.

    PYTHONPATH=workflow HF_HUB_OFFLINE=1 python benchmarks/gpu_step_time.py [--steps 10]
    # a real model at a study's settings: the imported base folder, the config's train
    # section and methods, the pipeline's train prompts
    python benchmarks/gpu_step_time.py --model results/smollm2/models/base \
        --config config/smollm2.yaml --split results/smollm2/splits/train.parquet

Without --model: a Qwen2 built from a Qwen2Config (default hidden 1024, 8 layers, vocab 32k)
and a word-level tokenizer built here, on random token strings. With --model: that folder's
weights and tokenizer (`boundary import-base` writes one), on the prompts of --split (the
pipeline's splits/train.parquet) or on random text. Without --config the methods are grpo,
pba with the base and support anchors, pba with the k2 policy anchor, global KL, at the size
flags below; with --config, the config's trained methods at its train settings (prompts per
step, G, completion length, lr, temperature, top-p, bf16, gradient checkpointing, bulk-draw
batch), only the step count and refresh period are this script's. Each method is trained by
the project's PBATrainer, bf16 mixed precision where the device supports it (make_config's
"auto"). The reward is a fixed pseudo-random function of the completion (timing needs work,
not learning). EOS is suppressed so every completion has the full length and methods do
equal generation work: step times are the full-length bound. `--anchored` of the prompts are
anchored (0.7, the paper's protected fraction). The gate refreshes every `--refresh` steps,
so the base anchor's bulk draw of an epoch's rollouts falls inside the timed steps.

Prints, per method, over `--rounds` round-robin runs (first `--warmup` steps of each
dropped): mean and median step time, the mean of refresh steps (a bulk base draw) and of the
others, the step time amortised over a refresh period of R steps (the config's
gate.refresh_steps, else --refresh): others + (refresh - others) / R, its ratio to grpo (the
frozen-base cost), and the GPU's peak memory (torch.cuda max allocated and max reserved).
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

from boundary.core.settings import refresh_epochs, resolve, train_key
from boundary.training.trainer import PBATrainer
from boundary.training.trainer_config import make_config

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


def load_model(args, tok):
    """The model each trainer starts from: --model's weights, else a random Qwen2."""
    if args.model:
        from boundary.sampling.models import from_pretrained  # every weight accounted for

        return from_pretrained(args.model)
    return build_model(args, tok)


def stop_ids(model, tok) -> list[int]:
    """Every id that ends a completion: the tokenizer's eos and the model's generation eos."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return sorted({*ids, tok.eos_token_id} - {None})


def study_settings(path) -> tuple[dict, dict]:
    """A pipeline config's trained methods, each with the settings `boundary train` gets (the
    settings layer's train key), and the first one's, which the figures' header prints."""
    from boundary.core.config import load_config

    config = load_config(path)
    methods = {m: train_key(config, m) for m, spec in config["methods"].items() if not spec["checkpoint_of"]}
    return next(iter(methods.values())), methods


def prompts_for(args, tok, n: int, rng) -> list[str]:
    if args.split:
        from boundary.core.artifacts import read_table

        split = read_table(args.split, ["prompt_id"])
        text = (split["prompt"] if "prompt" in split else split["problem"]).tolist()
        return [text[i % len(text)] for i in range(n)]
    if args.model:  # random ids of the real vocabulary, as text
        return [tok.decode(rng.integers(0, tok.vocab_size, args.prompt_len)) for _ in range(n)]
    return [" ".join(f"t{i}" for i in rng.integers(2, args.vocab, args.prompt_len)) for _ in range(n)]


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
    p.add_argument("--model", help="a model folder (boundary import-base's output): its weights and tokenizer")
    p.add_argument("--config", help="a pipeline config: its train settings and trained methods")
    p.add_argument("--split", help="with --model: a splits parquet whose prompts are used")
    p.add_argument("--steps", type=int, default=14)
    p.add_argument("--refresh", type=int, default=6, help="gate refresh period (steps)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--prompts", type=int, default=16, help="prompts per step (without --config)")
    p.add_argument("--G", type=int, default=8, help="completions per prompt (without --config)")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--completion-len", type=int, default=256, help="without --config")
    p.add_argument("--anchored", type=float, default=0.7)
    p.add_argument("--methods", help="comma-separated (default: every method, or the config's)")
    p.add_argument("--base-batch", type=int, default=1024,
                   help="completions per frozen-base generate call in the bulk draw (without "
                        "--config; a config's train.base_generation_batch_size)")
    p.add_argument("--rounds", type=int, default=2, help="round-robin passes over the methods")
    args = p.parse_args()
    if args.split and not args.model:
        p.error("--split needs --model (the prompts are tokenized by the model's tokenizer)")

    if args.config:
        settings, methods = study_settings(args.config)
        amortise_over = settings["refresh_steps"]
    else:
        settings = {"lr": 1e-6, "num_generations": args.G, "prompts_per_step": args.prompts,
                    "max_completion_length": args.completion_len, "temperature": 1.0, "top_p": 1.0,
                    "bf16": "auto", "base_generation_batch_size": args.base_batch}
        methods, amortise_over = METHODS, args.refresh
    if args.methods:
        unknown = [m for m in args.methods.split(",") if m not in methods]
        if unknown:
            p.error(f"--methods: {unknown[0]} is not one of {', '.join(methods)}")
        methods = {m: methods[m] for m in args.methods.split(",")}
    timed = {"steps": args.steps, "checkpoints": [], "refresh_steps": args.refresh, "save_steps": 10 ** 6}
    settings = {**settings, **timed}
    args.completion_len = int(settings["max_completion_length"])  # the random Qwen2's positions
    if args.model:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.model)
    else:
        tok = build_tokenizer(args.vocab)
    rng = np.random.default_rng(0)
    n = int(settings["prompts_per_step"]) * args.steps
    data = Dataset.from_dict({"prompt": prompts_for(args, tok, n, rng), "answer": ["0"] * n,
                              "prompt_id": [f"p{i}" for i in range(n)]})
    epochs = refresh_epochs(args.steps, args.refresh)
    anchored = np.tile((rng.random(n) < args.anchored).astype(float), (epochs, 1))
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    times: dict[str, list[tuple[int, float]]] = {name: [] for name in methods}  # (step, seconds)
    peaks: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):  # round-robin, so drift in the machine hits every method
            for name, method in methods.items():
                cfg = make_config(resolve("train", {**settings, **method, **timed}), seed=r, checkpoint_dir=f"{tmp}/{name}{r}")
                model = load_model(args, tok)
                cfg.generation_kwargs = {"suppress_tokens": stop_ids(model, tok)}  # full-length rollouts
                cfg.save_strategy = "no"
                base = load_model(args, tok) if (method.get("mask") or method.get("beta_kl")) else None
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                clock = StepClock()
                trainer = PBATrainer(model, reward_funcs=pseudo_reward, args=cfg, train_dataset=data,
                                     processing_class=tok,
                                     anchor_weights=anchored if method.get("mask") else None,
                                     base_model=base, callbacks=[clock])
                trainer.train()
                times[name] += list(enumerate(np.diff(clock.times)))[args.warmup:]
                if torch.cuda.is_available():
                    old = peaks.get(name, (0.0, 0.0))
                    peaks[name] = (max(old[0], torch.cuda.max_memory_allocated() / 2 ** 30),
                                   max(old[1], torch.cuda.max_memory_reserved() / 2 ** 30))
                del trainer, model, base
    df = pd.DataFrame([step_row(m, t, args.refresh, amortise_over, peaks.get(m)) for m, t in times.items()])
    grpo = df.loc[df["method"] == "grpo"]
    if len(grpo):
        df["ratio_to_grpo"] = df["mean_step_s"] / grpo["mean_step_s"].iloc[0]
        df[f"ratio_at_R{amortise_over}"] = df["amortised_step_s"] / grpo["amortised_step_s"].iloc[0]
    what = (f"{args.model} (bf16 mixed precision: {settings['bf16']})" if args.model else
            f"Qwen2 hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}")
    print(f"device: {device}; {what}; {settings['prompts_per_step']} prompts x G={settings['num_generations']}, "
          f"{'split prompts' if args.split else f'{args.prompt_len}-token prompts'} + "
          f"{settings['max_completion_length']} tokens (eos suppressed); refresh every {args.refresh} "
          f"steps here, amortised over R={amortise_over}")
    print(df.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def step_row(method: str, timed: list[tuple[int, float]], refresh: int, R: int, peak) -> dict:
    """One method's step times: steps whose index is a multiple of `refresh` begin a gate
    epoch (the base anchor's bulk draw); amortised = others + (refresh - others) / R."""
    seconds = np.array([t for _, t in timed])
    at_refresh = np.array([i % refresh == 0 for i, _ in timed])
    others = seconds[~at_refresh].mean() if (~at_refresh).any() else np.nan
    fresh = seconds[at_refresh].mean() if at_refresh.any() else others
    return {"method": method, "mean_step_s": seconds.mean(), "median_step_s": np.median(seconds),
            "refresh_step_s": fresh, "other_step_s": others,
            "amortised_step_s": others + (fresh - others) / R,
            "peak_alloc_GiB": peak[0] if peak else np.nan, "peak_reserved_GiB": peak[1] if peak else np.nan,
            "steps_timed": len(seconds)}


if __name__ == "__main__":
    main()
