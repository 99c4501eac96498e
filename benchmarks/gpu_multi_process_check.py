"""Multi-GPU training checked against one GPU, through the train rule's own launch: a real model
trains GRPO, PBA with the support anchor (base rollouts pre-drawn by the base_rollouts stage)
and PBA with the policy anchor, in 1 process and in each of --gpus processes (one per GPU,
`boundary --gpus N train` with train.gpus N), and a run killed mid-way resumes.

    PYTHONPATH=workflow python benchmarks/gpu_multi_process_check.py --model M --split S \
        [--gpus 2,4] [--sharding ddp] [--work DIR]

The mask anchors every third prompt of --split in every refresh epoch (a fixed mask: what is
checked is that the processes take the same actions, not the gate). All runs start together;
GPU slots are claimed by the project's allocator ($BOUNDARY_JOBS_PER_GPU jobs per device).

What must agree with the 1-process run, and how:
- exactly: actions.parquet (every step's prompts, anchor weights, rollout sources: functions
  of (seed, step, prompt)), and the log's step, learning_rate and protected_fraction;
- in distribution: every value computed from sampled rollouts. Each process draws its slice
  of the batch from its own stream (TRL seeds process r with seed + r), so the runs see
  different rollouts. At lr 1e-6 over a few steps the policy hardly moves, so a run's per-step
  values are close to independent draws of one distribution, and the two runs' means over
  steps may differ by sampling noise alone: the tolerance is 3 standard errors of the
  difference, sqrt(var_1 / T_1 + var_N / T_N) from the runs' own step-to-step spread (and at
  least 1e-3, for columns that are near-constant);
- near 0 at step 1 in every run: the policy is the base, so the logged KL (policy anchor) and
  the support hinge on base rollouts are rounding only (|value| <= 0.02: bf16 log-probs);
- the resumed run: "resuming from checkpoint-K" in its output, actions equal, and the log
  after K against the uninterrupted run (reported: exact, or the largest difference).
Resuming with another process count is not done: the process count is part of a run's key,
so a job with another count starts afresh rather than resume a run whose random streams were
laid out for another number of processes (docs/how-to/gpus_and_sharding.md says what transformers would do).

Each job's exit is timed from the moment its outputs appear (log.parquet, written last by its
main process): "exited N s after its outputs", or, at the deadline, "killed ... N s after
writing its outputs" (an exit that hangs). A job stopped at the deadline first has its
training processes print their Python stacks into its log (SIGUSR1), so a run that waited on a
collective says which.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from launched import stop_launch

METHODS = {
    "grpo": {},
    "pba_support": {"mask": "pba", "anchor": "support", "support_floor": 0.02, "beta_a": 1.0},
    "pba_policy": {"mask": "pba", "anchor": "policy", "kl_estimator": "k2", "beta_a": 1.0},
}
EXACT = ("step", "learning_rate", "protected_fraction")
SAMPLED = ("reward", "reward_policy", "loss", "anchor_loss", "kl", "entropy", "completions_mean_length")
ZERO_AT_START = ("kl", "anchor_loss")


def boundary(*args) -> list[str]:
    return [sys.executable, "-m", "boundary.cli", *args]


def settings_for(method: str, n: int, a) -> dict:
    return {"steps": a.steps, "lr": 1e-6, "num_generations": a.G, "prompts_per_step": a.prompts,
            "max_completion_length": a.completion_len, "temperature": 1.0, "top_p": 1.0,
            "checkpoints": [], "refresh_steps": a.refresh, "save_steps": a.save_steps,
            "extractor": "last_number", "gpus": 0 if a.cpu else n, "sharding": a.sharding, **METHODS[method]}


def train_cmd(method: str, n: int, a, work: Path, out: str) -> list[str]:
    extra = ["--mask", str(work / "mask.parquet")] if METHODS[method] else []
    if METHODS[method].get("anchor") == "support":
        extra += ["--base-rollouts", *map(str, sorted((work / "base_rollouts").glob("*.parquet")))]
    where = ["train", "--processes", str(n)] if a.cpu else ["--gpus", str(n), "train"]
    return boundary(*where, "--model", a.model, "--train-split", a.split,
                    "--settings", json.dumps(settings_for(method, n, a)), "--seed", "0",
                    "--out", str(work / out), "--checkpoint-dir", str(work / (out + "_ck")), *extra)


def start(cmd, log: Path) -> subprocess.Popen:
    # a process group of its own: the kill below reaches torchrun and its workers
    return subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def within_3se(one, other, floor: float = 1e-3) -> dict:
    """The rule for values computed from sampled rollouts (the module's docstring says why):
    two runs' per-step values of one column agree when their means over steps differ by at
    most 3 standard errors of the difference, sqrt(var_1 / T_1 + var_2 / T_2) from each run's
    own step-to-step spread, and at least `floor` (a near-constant column). NaN steps are left
    out; fewer than 2 steps in a run: SE is infinite (nothing can be told apart)."""
    x, y = (np.asarray(v, dtype=float) for v in (one, other))
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    se = (float(np.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))) if min(len(x), len(y)) > 1
          else float("inf"))
    m1, m2 = (float(v.mean()) if len(v) else float("nan") for v in (x, y))
    tol = max(3 * se, floor)
    return {"mean_1": m1, "mean_2": m2, "difference": m2 - m1, "se": se, "tolerance": tol,
            "steps": (len(x), len(y)), "ok": bool(abs(m2 - m1) <= tol)}


def compare(one: Path, other: Path) -> list[str]:
    """Lines saying how `other`'s outputs agree with `one`'s; a line starting FAIL is a failure."""
    lines = []
    a1, a2 = pd.read_parquet(one / "actions.parquet"), pd.read_parquet(other / "actions.parquet")
    lines.append(f"ok   actions: {len(a1)} rows equal" if a1.equals(a2)
                 else f"FAIL actions differ ({len(a1)} vs {len(a2)} rows)")
    l1, l2 = pd.read_parquet(one / "log.parquet"), pd.read_parquet(other / "log.parquet")
    for c in EXACT:
        same = c in l1 and c in l2 and np.allclose(l1[c].to_numpy(float), l2[c].to_numpy(float), rtol=0, atol=0,
                                                    equal_nan=True)
        lines.append(f"{'ok  ' if same else 'FAIL'} {c}: {'equal' if same else 'differs'}")
    for c in SAMPLED:
        if c not in l1 or c not in l2 or l1[c].isna().all():
            continue
        r = within_3se(l1[c], l2[c])
        diff, tol = abs(r["difference"]), r["tolerance"]
        lines.append(f"ok   {c}: mean {r['mean_1']:.4g} vs {r['mean_2']:.4g}, |diff| {diff:.3g} <= 3 SE {tol:.3g}"
                     if r["ok"] else
                     f"FAIL {c}: mean {r['mean_1']:.4g} vs {r['mean_2']:.4g}, |diff| {diff:.3g} > 3 SE {tol:.3g}")
    for c in ZERO_AT_START:
        if c in l2 and pd.notna(l2[c].iloc[0]):
            v = float(l2[c].iloc[0])
            lines.append(f"{'ok  ' if abs(v) <= 0.02 else 'FAIL'} {c} at step 1 (policy = base): {v:.2e}")
    finite = np.isfinite(l2[["loss", "grad_norm"]].to_numpy(float)).all()
    # A step whose groups all got the same reward has no advantage, so no GRPO gradient.
    moving = int((l2["grad_norm"] > 0).sum())
    lines.append(f"{'ok  ' if finite else 'FAIL'} loss and grad_norm finite; grad_norm > 0 on {moving} of {len(l2)} steps")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--gpus", default="2,4", help="process counts compared with 1")
    p.add_argument("--sharding", default="ddp")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--refresh", type=int, default=3)
    p.add_argument("--save-steps", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--G", type=int, default=4)
    p.add_argument("--completion-len", type=int, default=256)
    p.add_argument("--resume-gpus", type=int, default=2, help="process count of the killed run (0: none)")
    p.add_argument("--work", default="gpu_check")
    p.add_argument("--deadline", type=float, help="seconds: runs unfinished by then are stopped")
    p.add_argument("--cpu", action="store_true", help="CPU processes over gloo (a dry run of this script)")
    a = p.parse_args()
    work = Path(a.work)
    (work / "logs").mkdir(parents=True, exist_ok=True)
    counts = [1, *[int(n) for n in a.gpus.split(",") if int(n) != 1]]
    methods = a.methods.split(",")
    split = pd.read_parquet(a.split)
    epochs = -(-a.steps // a.refresh)
    pd.DataFrame([{"prompt_id": pid, "epoch": e, "weight": float(i % 3 == 0),
                   "action": "anchor" if i % 3 == 0 else "sharpen"}
                  for i, pid in enumerate(split["prompt_id"]) for e in range(epochs)]).to_parquet(work / "mask.parquet")
    t0 = time.time()
    if "pba_support" in methods:  # the base_rollouts stage, 2 shard jobs on 1 GPU each
        draws = [start(boundary(*([] if a.cpu else ["--gpus", "1"]), "base-rollouts", "--model", a.model,
                                "--train-split", a.split,
                                "--mask", str(work / "mask.parquet"),
                                "--settings", json.dumps(settings_for("pba_support", 1, a)), "--seed", "0",
                                "--shard", f"{i}/2", "--out", str(work / "base_rollouts" / f"{i}.parquet")),
                       work / "logs" / f"base_rollouts_{i}.log") for i in range(2)]
        if any(d.wait() for d in draws):
            sys.exit(f"base-rollouts failed: see {work}/logs")
        print(f"base rollouts drawn ({time.time() - t0:.0f} s)", flush=True)
    jobs = {(m, n): start(train_cmd(m, n, a, work, f"{m}_{n}"), work / "logs" / f"{m}_{n}.log")
            for m in methods for n in counts}
    resume_method = "pba_support" if "pba_support" in methods else methods[0]
    if a.resume_gpus:
        killed = start(train_cmd(resume_method, a.resume_gpus, a, work, "killed"), work / "logs" / "killed.log")
        ck = work / "killed_ck"
        while (killed.poll() is None and not list(ck.glob(f"*/checkpoint-{a.save_steps}/trainer_state.json"))
               and (not a.deadline or time.time() < t0 + a.deadline)):
            time.sleep(0.1)
        # At once (2 steps of the testbed take a second on a CPU), as a node failure would: no
        # clean shutdown; the workers go with their torchrun (die_with_launcher).
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        print(f"killed the {a.resume_gpus}-process {resume_method} run after checkpoint-{a.save_steps} "
              f"(exit {killed.returncode})", flush=True)
        jobs["resumed", a.resume_gpus] = start(train_cmd(resume_method, a.resume_gpus, a, work, "killed"),
                                               work / "logs" / "resumed.log")
    # Every job watched together: when its outputs appeared (log.parquet, written last by its
    # main process) and when it exited, so an exit that lags its outputs is measured.
    outs = {key: work / ("killed" if key[0] == "resumed" else f"{key[0]}_{key[1]}") / "log.parquet" for key in jobs}
    wrote: dict = {key: None for key, out in outs.items() if out.exists()}  # not theirs (a finished killed run)
    running = dict(jobs)
    while running:
        now = time.time()
        for key, job in list(running.items()):
            code = job.poll()
            if key not in wrote and outs[key].exists():  # seen while it runs: its exit can be timed
                wrote[key] = now if code is None else None
            if code is None and a.deadline and now > t0 + a.deadline:  # out of time: compare what finished
                stop_launch(job)
                code = (f"killed at the {a.deadline} s deadline"
                        + (f", {now - wrote[key]:.0f} s after writing its outputs" if wrote.get(key) else ""))
            if code is None:
                continue
            del running[key]
            lag = f"; exited {now - wrote[key]:.1f} s after its outputs" if wrote.get(key) and code == 0 else ""
            print(f"{'FAIL ' if code else 'done '}{key}: exit {code} at {now - t0:.0f} s{lag}; log {work}/logs",
                  flush=True)
        time.sleep(0.5)
    print(f"all runs done ({time.time() - t0:.0f} s)", flush=True)
    for m in methods:
        for n in counts[1:]:
            if (work / f"{m}_{n}" / "log.parquet").exists() and (work / f"{m}_1" / "log.parquet").exists():
                print(f"== {m}: {n} processes vs 1", flush=True)
                print("\n".join("  " + line for line in compare(work / f"{m}_1", work / f"{m}_{n}")), flush=True)
    if a.resume_gpus and (work / "killed" / "log.parquet").exists():
        text = (work / "logs" / "resumed.log").read_text()
        said = [line for line in text.splitlines() if "resuming from" in line]
        print(f"== resumed {resume_method} ({a.resume_gpus} processes): {said[0] if said else 'FAIL: did not resume'}")
        if said and f"checkpoint-{a.steps};" in said[0]:
            print("  FAIL the killed run had already finished: nothing was resumed mid-run")
        full = work / f"{resume_method}_{a.resume_gpus}"
        a1, a2 = pd.read_parquet(full / "actions.parquet"), pd.read_parquet(work / "killed" / "actions.parquet")
        print(f"  {'ok  ' if a1.equals(a2) else 'FAIL'} actions equal to the uninterrupted run")
        l1, l2 = pd.read_parquet(full / "log.parquet"), pd.read_parquet(work / "killed" / "log.parquet")
        for c in SAMPLED:
            if c in l1 and c in l2 and l1[c].notna().any():
                d = np.nanmax(np.abs(l1[c].to_numpy(float) - l2[c].to_numpy(float)))
                print(f"  {c}: {'exactly equal' if d == 0 else f'largest |difference| {d:.3g}'} over {len(l1)} steps")


if __name__ == "__main__":
    main()
