"""SmolLM2 GRPO step time on 1, 2 and 4 GPUs at a fixed global batch: the scaling of the
trainer's multi-process (one process per GPU, NCCL) training.

    PYTHONPATH=workflow python benchmarks/bench_scaling.py [--model results/smollm2/models/base \
        --split results/smollm2/splits/train.parquet] [--gpus 1,2,4] [--sharding ddp]

Each count runs the project's PBATrainer (GRPO) in that many processes (torchrun, one GPU
each) on the same global batch (--prompts x --G completions of --completion-len tokens, EOS
suppressed so every completion has the full length); the first --warmup steps are dropped.
A row is printed as each count finishes: mean step time (the slowest process's), speedup over
one GPU and its goal (1.8x at 2 GPUs, 3.2x at 4), tokens per second, peak memory, and where
the time goes (multi_gpu_steps.py: generate, score = rewards + gathers + base log-probs,
fwd_bwd = the loss's forward and backward with the gradient all-reduce, optimizer).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from launched import run_logged

WORKER = Path(__file__).parent / "multi_gpu_steps.py"
GOALS = {2: 1.8, 4: 3.2}


def run(n: int, args, out: Path, logs: Path) -> dict | None:
    worker = [str(WORKER), "--method", "grpo", "--sharding", args.sharding, "--shape", "smollm2-135m",
              "--prompts", str(args.prompts),
              "--G", str(args.G), "--completion-len", str(args.completion_len), "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--out", str(out),
              *(["--model", args.model] if args.model else []), *(["--split", args.split] if args.split else [])]
    launch = ([sys.executable] if n == 1 else
              [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}"])
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "" if args.cpu else ",".join(map(str, range(n))),
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
    print(f"global batch {args.prompts} prompts x G={args.G} = {args.prompts * args.G} completions of "
          f"{args.completion_len} tokens (eos suppressed), {args.steps - args.warmup} timed steps, "
          f"sharding {args.sharding}", flush=True)
    print("gpus  step_s  speedup  goal    tokens/s  generate_s  score_s  fwd_bwd_s  optimizer_s  peak_GiB  device",
          flush=True)
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(args.logs or tmp)
        logs.mkdir(parents=True, exist_ok=True)
        for n in counts:
            r = run(n, args, Path(tmp) / f"{n}.json", logs)
            if r is None:
                continue
            base = base or (r["step_s"] if n == 1 else None)
            speedup = base / r["step_s"] if base else float("nan")
            goal = GOALS.get(n)
            verdict = "" if goal is None else f">={goal} {'met' if speedup >= goal else 'MISSED'}"
            print(f"{n:>4}  {r['step_s']:6.3f}  {speedup:7.2f}  {verdict:<14}  {r['tokens_per_s']:8.0f}  "
                  f"{r['generate_s']:10.3f}  {r['score_s']:7.3f}  {r['fwd_bwd_s']:9.3f}  {r['optimizer_s']:11.3f}  "
                  f"{max(r['peak_alloc_gib_per_gpu']):8.2f}  {r['device']}", flush=True)


if __name__ == "__main__":
    main()
