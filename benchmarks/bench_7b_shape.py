"""The paper's model shape on several GPUs: Qwen2.5-7B (7.6B parameters, built from its config
with random weights, no download), bf16 mixed precision, GRPO and PBA (the paper's policy
anchor, k1) steps under train.sharding fsdp, and DDP at the same shape (expected: out of
memory, as every process would hold 16 bytes a parameter, 120 GB, before activations).

    PYTHONPATH=workflow python benchmarks/bench_7b_shape.py [--gpus 4] [--prompts 8 --G 8 \
        --completion-len 256]

The paper's per-step shape (256 prompts x G=8 completions of up to 8,192 tokens) is scaled to
fit a lease: --prompts x --G completions of --completion-len tokens after --prompt-len-token
prompts, EOS suppressed (every completion full length). Prints, per run: mean step time (the
slowest process's, after --warmup steps), tokens per second (prompt + completion tokens of
the step over its time), peak memory on each GPU, and where the step's time goes
(multi_gpu_steps.py), as each run finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

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
    args = p.parse_args()
    print(f"Qwen2.5-7B shape, random weights, bf16; {args.gpus} processes; {args.prompts} prompts x "
          f"G={args.G} = {args.prompts * args.G} completions of {args.completion_len} tokens after "
          f"{args.prompt_len}-token prompts (eos suppressed); {args.steps - args.warmup} timed steps", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 4) // args.gpus)),
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    with tempfile.TemporaryDirectory() as tmp:
        for run in args.runs.split(","):
            sharding, method = run.split(":")
            out = Path(tmp) / f"{sharding}_{method}.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={args.gpus}", str(WORKER), "--method", method, "--sharding", sharding,
                   "--prompts", str(args.prompts), "--G", str(args.G), "--prompt-len", str(args.prompt_len),
                   "--completion-len", str(args.completion_len), "--steps", str(args.steps),
                   "--warmup", str(args.warmup), "--out", str(out)]
            log = Path(tmp) / f"{sharding}_{method}.log"
            # A file, not a pipe, and a process group of its own: on a timeout every worker is
            # stopped and what they printed is still there to show.
            with open(log, "w") as f:
                job = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    code = job.wait(timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    os.killpg(job.pid, signal.SIGKILL)
                    code = f"timeout after {args.timeout} s"
            text = log.read_text(errors="replace")
            if out.exists():
                r = json.loads(out.read_text().splitlines()[-1])
            elif "OutOfMemoryError" in text or "CUDA out of memory" in text:
                r = {"status": "out of memory (a process died before reporting)"}
            else:
                print(f"{sharding} {method}: failed (exit {code})\n{text[-4000:]}", flush=True)
                continue
            print(f"{sharding} {method}: " + json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
