"""The paper's model shape on several GPUs: Qwen2.5-7B (7.6B parameters, built from its config
with random weights, no download), bf16 mixed precision, GRPO and PBA (the paper's policy
anchor, k1) steps under train.sharding fsdp, and DDP at the same shape (expected: out of
memory, as every process would hold 16 bytes a parameter, 120 GB, before activations).

    PYTHONPATH=workflow python benchmarks/bench_7b_shape.py [--gpus 4] [--prompts 8 --G 8 \
        --completion-len 256] [--engine generate | vllm] [--runs fsdp:grpo]

The paper's per-step shape (256 prompts x G=8 completions of up to 8,192 tokens) is scaled to
fit a lease: --prompts x --G completions of --completion-len tokens after --prompt-len-token
prompts, EOS suppressed (every completion full length). Prints, per run: mean step time (the
slowest process's, after --warmup steps), tokens per second (prompt + completion tokens of
the step over its time), peak memory on each GPU, and where the step's time goes
(multi_gpu_steps.py: generate, weight sync, the engine check, score, fwd_bwd, optimizer), as each run finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from launched import add_engine_options, engine_options, run_logged

WORKER = Path(__file__).parent / "multi_gpu_steps.py"
RUNS = (("fsdp", "grpo"), ("fsdp", "pba"), ("ddp", "grpo"))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=4)
    p.add_argument("--runs", default=",".join(f"{s}:{m}" for s, m in RUNS), help="sharding:method,...")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--completion-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--timeout", type=int, default=600, help="seconds per run")
    p.add_argument("--shape", default="qwen2.5-7b", help="tiny-qwen2: a CPU dry run (with --cpu)")
    p.add_argument("--engine", choices=("generate", "vllm"), default="generate",
                   help="train.rollout_engine (vllm: starts from dummy weights, the trainer's synced in)")
    add_engine_options(p)
    p.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps (micro-batches a step)")
    p.add_argument("--cpu", action="store_true", help="gloo processes on the CPU (a dry run of this script)")
    p.add_argument("--logs", help="keep each run's log in this folder (default: a temporary one)")
    args = p.parse_args()
    print(f"{args.shape} shape, random weights, bf16, engine {args.engine}; {args.gpus} processes; {args.prompts} prompts x "
          f"G={args.G} = {args.prompts * args.G} completions of {args.completion_len} tokens after "
          f"{args.prompt_len}-token prompts (eos suppressed); {args.steps - args.warmup} timed steps", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 4) // args.gpus)),
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(args.logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for run in args.runs.split(","):
            sharding, method = run.split(":")
            out = Path(tmp) / f"{sharding}_{method}.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={args.gpus}", str(WORKER), "--method", method, "--sharding", sharding,
                   "--prompts", str(args.prompts), "--G", str(args.G), "--prompt-len", str(args.prompt_len),
                   "--completion-len", str(args.completion_len), "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--shape", args.shape, "--out", str(out),
                   "--engine", args.engine, *engine_options(args),
                   "--accum", str(args.accum)]
            log = logs / f"{sharding}_{method}.log"
            started = time.monotonic()
            code = run_logged(cmd, env, log, args.timeout, label=f"{sharding} {method}: ", written=out)
            wall = time.monotonic() - started
            text = log.read_text(errors="replace")
            if out.exists():
                r = {**json.loads(out.read_text().splitlines()[-1]), "wall_s": round(wall)}
            elif "OutOfMemoryError" in text or "CUDA out of memory" in text:
                r = {"status": "out of memory (a process died before reporting)"}
            else:
                lines = [line for line in text.splitlines() if "warn" not in line.lower()]
                print(f"{sharding} {method}: failed (exit {code}, {wall:.0f} s)\n" + "\n".join(lines[-40:]),
                      flush=True)
                continue
            print(f"{sharding} {method}: " + json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
