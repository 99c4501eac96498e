"""GRPO step time on 1, 2 and 4 GPUs at a fixed global batch: the scaling of the trainer's
multi-process (one process per GPU, NCCL) training, with either rollout engine.

    PYTHONPATH=workflow python benchmarks/bench_scaling.py [--model results/smollm2/models/base \
        --split results/smollm2/splits/train.parquet] [--gpus 1,2,4] [--sharding ddp] \
        [--shape smollm2-135m | qwen2.5-1.5b | ... (multi_gpu_steps.SHAPES)] [--engine generate | vllm] [--eos]

Each count runs the project's PBATrainer (GRPO) in that many processes (torchrun, one GPU
each) on the same global batch (--prompts x --G completions of --completion-len tokens, EOS
suppressed so every completion has the full length); the first --warmup steps are dropped.
A row is printed as each count finishes: mean step time (the slowest process's), speedup over
one GPU and its goal (1.8x at 2 GPUs, 3.2x at 4), tokens per second, peak memory, and where
the time goes (multi_gpu_steps.py: generate, the engine's weight sync, its log-prob check,
score = rewards + gathers + old and base log-probs, fwd_bwd = the loss's forward and backward with
the gradient all-reduce, optimizer), the mean completion length, and the engine's largest mean
log-prob difference from the policy over its checks (vllm; every sync unless --check-every).
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

from boundary.core.gpus import visible

WORKER = Path(__file__).parent / "multi_gpu_steps.py"
GOALS = {2: 1.8, 4: 3.2}


def accumulation(n: int, args) -> int:
    """Micro-batches a step on n processes: --accum, or as many as keep --micro-batch rows a process
    (the same memory a process at every count: a 1-GPU row of a large batch otherwise runs out)."""
    if not args.micro_batch:
        return args.accum
    rows = args.prompts * args.G
    if rows % (n * args.micro_batch):
        raise SystemExit(f"--micro-batch {args.micro_batch}: {rows} completions do not split into "
                         f"{n} processes x micro-batches of {args.micro_batch}")
    return rows // (n * args.micro_batch)


def run(n: int, args, out: Path, logs: Path) -> dict | None:
    worker = [str(WORKER), "--method", "grpo", "--sharding", args.sharding, "--shape", args.shape,
              "--engine", args.engine, *(["--eos"] if args.eos else []),
              *engine_options(args), "--accum", str(accumulation(n, args)),
              "--prompt-len", str(args.prompt_len), "--prompts", str(args.prompts),
              "--G", str(args.G), "--completion-len", str(args.completion_len), "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--out", str(out),
              *(["--model", args.model] if args.model else []), *(["--split", args.split] if args.split else [])]
    launch = ([sys.executable] if n == 1 else
              [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}"])
    devices = [] if args.cpu else visible()[:n]  # the first n this process sees: a job beside it keeps its own
    if not args.cpu and len(devices) < n:
        print(f"{n} GPU(s): skipped, {len(devices)} visible", flush=True)
        return None
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(devices),
           "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or n) // n))}
    log = logs / f"scaling_{n}.log"
    started = time.monotonic()
    code = run_logged([*launch, *worker], env, log, args.timeout, label=f"{n} GPU(s): ", written=out)
    if not out.exists():
        lines = [line for line in log.read_text(errors="replace").splitlines() if "warn" not in line.lower()]
        print(f"{n} GPU(s): failed (exit {code}, {time.monotonic() - started:.0f} s)\n" + "\n".join(lines[-30:]),
              flush=True)
        return None
    return json.loads(out.read_text().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="the imported SmolLM2 folder (boundary import-base); default: its shape "
                                  "with random weights (EOS suppressed, a step's work is the same)")
    p.add_argument("--split", help="a splits parquet whose prompts are used (with --model)")
    p.add_argument("--gpus", default="1,2,4")
    p.add_argument("--shape", default="smollm2-135m", help="with random weights: a shape of multi_gpu_steps.SHAPES (smollm2-135m, qwen2.5-1.5b, ...)")
    p.add_argument("--engine", choices=("generate", "vllm"), default="generate", help="train.rollout_engine")
    p.add_argument("--eos", action="store_true", help="eos left on (random weights seldom emit it)")
    add_engine_options(p)
    p.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps (micro-batches a step)")
    p.add_argument("--micro-batch", type=int, help="completions a process a micro-batch at every GPU count "
                                                   "(sets the accumulation per count; overrides --accum)")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--sharding", default="ddp")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--G", type=int, default=8)
    p.add_argument("--completion-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--timeout", type=int, default=900, help="seconds per process count")
    p.add_argument("--cpu", action="store_true", help="gloo processes on the CPU (a dry run of this script)")
    p.add_argument("--logs", help="keep each count's log in this folder (default: a temporary one)")
    args = p.parse_args()
    counts = [int(n) for n in args.gpus.split(",")]
    print(f"{args.model or args.shape}, engine {args.engine}: global batch {args.prompts} prompts x G={args.G} = "
          f"{args.prompts * args.G} completions of up to {args.completion_len} tokens "
          f"(eos {'on' if args.eos else 'suppressed'}), {args.steps - args.warmup} timed steps, "
          f"sharding {args.sharding}", flush=True)
    print("gpus  step_s  speedup  goal            tokens/s  generate_s  sync_s  check_s  score_s  fwd_bwd_s  optimizer_s"
          "  peak_GiB  mean_len  logp_diff  accum  device", flush=True)
    base, steps = None, {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(args.logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for n in counts:
            r = run(n, args, Path(tmp) / f"{n}.json", logs)
            if r is None:
                continue
            if r.get("status") != "ok":  # out of memory, reported by the worker
                print(f"{n:>4}  {r.get('status')}", flush=True)
                continue
            base = base or (r["step_s"] if n == 1 else None)
            steps[n] = r["step_s"]
            speedup = base / r["step_s"] if base else float("nan")
            goal = GOALS.get(n)
            verdict = "" if goal is None else f">={goal} {'met' if speedup >= goal else 'MISSED'}"
            diff = r.get("engine_logp_mean_abs_diff") or []
            length = r.get("completion_len_mean")
            print(f"{n:>4}  {r['step_s']:6.3f}  {speedup:7.2f}  {verdict:<14}  {r['tokens_per_s']:8.0f}  "
                  f"{r['generate_s']:10.3f}  {r['sync_s']:6.3f}  {r['check_s']:7.3f}  {r['score_s']:7.3f}  {r['fwd_bwd_s']:9.3f}  "
                  f"{r['optimizer_s']:11.3f}  {max(r['peak_alloc_gib_per_gpu']):8.2f}  "
                  f"{'-' if length is None else f'{length:.0f}':>8}  {max(diff) if diff else '-':>9}  {r.get('accum', '-'):>5}  {r['device']}",
                  flush=True)
    if 1 in steps and counts[0] != 1:  # counts measured before the 1-GPU row: their speedup now
        print("speedup over 1 GPU: " + ", ".join(f"{n} GPUs {steps[1] / steps[n]:.2f}x" for n in steps if n != 1),
              flush=True)


if __name__ == "__main__":
    main()
