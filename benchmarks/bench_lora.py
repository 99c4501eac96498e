"""LoRA against full fine-tuning on one GPU, side by side in one run: step time and peak memory of
GRPO and PBA at the study's 1.5B shape (both), and at Qwen2.5-7B's (LoRA), random weights built
from the models' configs (no download).

    PYTHONPATH=workflow HF_HUB_OFFLINE=1 python benchmarks/bench_lora.py [--engine vllm] [--rank 16]
    PYTHONPATH=workflow python benchmarks/bench_lora.py --cpu     # a dry run at toy shape

Runs, each a one-process launch of benchmarks/multi_gpu_steps.py (the project's PBATrainer,
bf16 mixed precision, EOS suppressed so every completion is full length, PBA = the paper's
policy anchor k1 on 70% of the prompts), one after another on the same GPU:

  qwen2.5-coder-1.5b-gguf (the study's model as its GGUF loads, 1.78B)  32 prompts x 8, 1,024 tokens
      full fine-tuning: grpo, pba;  LoRA: grpo, pba
  qwen2.5-7b (7.6B)                                                     16 prompts x 8, 1,024 tokens
      LoRA: grpo, pba, pba_value10 (kl_value_every 10: the steps that do not score the base)

Prints the card and the commit, then per run its step seconds (mean after --warmup steps),
peak GiB (torch's max allocated; with the engine's sleep mode it also counts the engine's pool,
which sleeps and wakes within a step, and can exceed the card) and the card's peak in use
(every pool, sampled every 50 ms: the figure that says what fits) with what that leaves of
the card; then per
shape and variant the PBA/GRPO step ratio, and LoRA's step and peak against full fine-tuning's.
With --logs those last lines take in every run whose result is in that folder, so the six runs
may be split over calls (one GPU command of under 10 minutes each). The goal is read off them:
PBA with LoRA at 7B with at least 30 GiB of the card to spare, its step within 1.1x of GRPO's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from launched import add_engine_options, engine_options, run_logged

WORKER = Path(__file__).parent / "multi_gpu_steps.py"
# (shape, prompts, LoRA: False / True, method)
RUNS = [("qwen2.5-coder-1.5b-gguf", 32, False, "grpo"), ("qwen2.5-coder-1.5b-gguf", 32, False, "pba"),
        ("qwen2.5-coder-1.5b-gguf", 32, True, "grpo"), ("qwen2.5-coder-1.5b-gguf", 32, True, "pba"),
        ("qwen2.5-7b", 16, True, "grpo"), ("qwen2.5-7b", 16, True, "pba"), ("qwen2.5-7b", 16, True, "pba_value10")]


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).parent).stdout.strip()
        return out + ("+edits" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def card() -> tuple[str, float]:
    import torch

    if not torch.cuda.is_available():
        return "cpu", 0.0
    props = torch.cuda.get_device_properties(0)
    return props.name, props.total_memory / 2 ** 30


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, default=16, help="LoRA rank (the schema's default)")
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--completion-len", type=int, default=1024)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--engine", choices=("generate", "vllm"), default="vllm", help="train.rollout_engine")
    p.add_argument("--only", help="comma-separated run labels to keep (e.g. 7b:lora:pba)")
    p.add_argument("--timeout", type=int, default=900, help="seconds per run")
    p.add_argument("--cpu", action="store_true", help="a dry run on the CPU at a toy shape (tiny-qwen2)")
    p.add_argument("--logs", help="keep each run's log and result in this folder; the ratios then take in the "
                                   "results an earlier call left there (the runs split over calls)")
    add_engine_options(p)
    args = p.parse_args()
    name, total_gib = card()
    print(f"card: {name} ({total_gib:.0f} GiB); commit {commit()}; engine {args.engine}; LoRA rank {args.rank}, "
          f"every linear layer; G={args.G}, {args.prompt_len}-token prompts + {args.completion_len} tokens "
          f"(eos suppressed); {args.steps - args.warmup} timed steps a run", flush=True)
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(args.logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for shape, prompts, lora, method in RUNS:
            label = f"{'7b' if '7b' in shape else '1.5b'}:{'lora' if lora else 'full'}:{method}"
            if args.only and label not in args.only.split(","):
                continue
            if args.cpu:
                shape, prompts = "tiny-qwen2", 2
            out = Path(tmp) / f"{label.replace(':', '_')}.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", str(WORKER),
                   "--shape", shape, "--method", method, "--sharding", "ddp", "--prompts", str(prompts),
                   "--G", str(args.G), "--prompt-len", str(args.prompt_len),
                   "--completion-len", str(args.completion_len), "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--engine", args.engine, "--out", str(out),
                   *(["--lora", str(args.rank)] if lora else []), *engine_options(args)]
            log = logs / f"{label.replace(':', '_')}.log"
            started = time.monotonic()
            code = run_logged(cmd, env, log, args.timeout, label=f"{label}: ", written=out)
            if not out.exists():
                lines = [x for x in log.read_text(errors="replace").splitlines() if "warn" not in x.lower()]
                print(f"{label}: failed (exit {code}, {time.monotonic() - started:.0f} s)\n" + "\n".join(lines[-30:]),
                      flush=True)
                continue
            r = json.loads(out.read_text().splitlines()[-1])
            results[label] = r
            (logs / f"{label.replace(':', '_')}.result.json").write_text(json.dumps({**r, "label": label}))
            peak = (r.get("peak_alloc_gib_per_gpu") or [r.get("peak_alloc_gib_rank0")])[0]
            used = r.get("peak_device_used_gib_rank0")
            print(f"{label}: {r['status']}; shape {shape}, {prompts} x {args.G}; step {r.get('step_s')} s; "
                  f"peak {peak} GiB allocated, {used} GiB in use on the card"
                  + (f" ({total_gib - used:.1f} GiB to spare)" if total_gib and used else "") + f"; phases {json.dumps({k: r.get(k) for k in ('generate_s', 'sync_s', 'check_s', 'score_s', 'fwd_bwd_s', 'optimizer_s')})}",
                  flush=True)
        for kept in logs.glob("*.result.json"):  # an earlier call's runs, in this folder
            r = json.loads(kept.read_text())
            results.setdefault(r["label"], r)
    for size in ("1.5b", "7b"):
        for variant in ("full", "lora"):
            g, b = results.get(f"{size}:{variant}:grpo"), results.get(f"{size}:{variant}:pba")
            if g and b and g.get("step_s") and b.get("step_s"):
                print(f"{size} {variant}: PBA/GRPO step {b['step_s'] / g['step_s']:.3f}", flush=True)
        for method in ("grpo", "pba"):
            f, lo = results.get(f"{size}:full:{method}"), results.get(f"{size}:lora:{method}")
            if f and lo and f.get("step_s") and lo.get("step_s"):
                print(f"{size} {method}: LoRA/full step {lo['step_s'] / f['step_s']:.3f}; peak allocated "
                      f"{lo.get('peak_alloc_gib_per_gpu')} vs {f.get('peak_alloc_gib_per_gpu')} GiB, in use on the card "
                      f"{lo.get('peak_device_used_gib_rank0')} vs {f.get('peak_device_used_gib_rank0')} GiB", flush=True)
    g, b = results.get("7b:lora:grpo"), results.get("7b:lora:pba")
    if b and b.get("peak_device_used_gib_rank0") and total_gib:
        spare = total_gib - b["peak_device_used_gib_rank0"]
        ratio = b["step_s"] / g["step_s"] if g and g.get("step_s") and b.get("step_s") else float("nan")
        print(f"goal, PBA with LoRA at 7B: {spare:.1f} GiB of the card to spare (>= 30: "
              f"{'met' if spare >= 30 else 'not met'}); PBA/GRPO step {ratio:.3f} (<= 1.1: "
              f"{'met' if ratio <= 1.1 else 'not met'})", flush=True)
    v = results.get("7b:lora:pba_value10")
    if g and b and v and g.get("step_s") and b.get("step_s") and v.get("step_s"):
        # Nine steps of ten skip the base, the tenth is PBA's step: a period's mean.
        mean = (9 * v["step_s"] + b["step_s"]) / 10
        print(f"PBA with LoRA at 7B, kl_value_every 10: {v['step_s']} s a step without the base, {mean:.2f} s "
              f"a step over a period of 10 (one of them PBA's); PBA/GRPO {mean / g['step_s']:.3f} (<= 1.1: "
              f"{'met' if mean / g['step_s'] <= 1.1 else 'not met'})", flush=True)


if __name__ == "__main__":
    main()
