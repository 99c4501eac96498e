"""Evaluate a stopped training run's step snapshot exactly as the pipeline's checkpoint evaluation
would, and keep the run's training log (the bridge, README.md here).

A run stopped at a step (`lease.sh --stop-train-at-step 30`) ends its Snakemake job with exit 75:
it writes no outputs (final policy, log.parquet, step folders), so the `checkpoint_of` method that
evaluates its step-30 snapshot (`grpo_full_step30` in grpo_full.yaml) never runs. This script
runs that job's own command, as Snakemake's dry run prints it (`snakemake -n -p`: the evaluate
rule's settings JSON, threads, GPU claim, log and outputs), with one change: `--model` names the
snapshot the trainer saved in its checkpoint folder
(checkpoints/RUN/M/seedS/<run key>/snapshots/stepN, a save_pretrained folder) instead of
results/RUN/train/M/seedS/stepN, which only a finished run writes. The counts land where the
pipeline would write them (results/RUN/eval/diagnostic/METHOD/seedS/counts.parquet).

Before that, the run's training log: its newest checkpoint's trainer_state.json (the trainer's
log history: reward, entropy and the KL to the base of every logged step) is copied to
results/RUN/bridge/M/seedS/ and tabled as log.parquet by the train stage's own `log_table`, the
columns a finished run's log.parquet has. Full weights stay where they are (lease_pack.py never
packs them); these small files come back with the lease's pack. evaluate_stepN.json beside them
records the command run, the snapshot, the step the run stopped after and the seconds taken.

    python lab/studies/2026-11-29-qwen15b-phase1/bridge/evaluate_snapshot.py \\
        --configfile CFG [--override FILE]... --method grpo_full_step30 [--seed 0] [--dry-run]

Run from the checkout's root, with the package and `boundary` on the paths (lease.sh's
--after-run gives both). --dry-run prints the command and runs nothing. One line and exit 1 on a
missing snapshot or a plan without the evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml


def fail(line: str) -> None:
    sys.exit(f"evaluate_snapshot: {line}")


def planned_command(target: str, configfiles: list[str]) -> str:
    """The evaluate job's shell command for `target`, from Snakemake's own dry run (targets
    before --configfile, which takes every word after it)."""
    plan = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-p", target, "--cores", "all",
                           "--resources", "gpu=1", "--scheduler", "greedy", "--configfile", *configfiles],
                          capture_output=True, text=True)
    counts = f"--counts {target} "
    found = [line.split(":", 1)[1].strip() for line in plan.stdout.splitlines()
             if line.startswith("Shell command:") and " evaluate --model " in line and counts in line]
    if len(found) != 1:
        tail = " | ".join((plan.stdout + plan.stderr).strip().splitlines()[-3:])
        fail(f"{target}: Snakemake's dry run plans {len(found)} evaluation commands for it, not 1 ({tail})")
    return found[0]


def newest_run_folder(checkpoints: Path, step: int) -> Path:
    """The run folder (checkpoints/RUN/M/seedS/<key>) holding a complete step-`step` snapshot;
    of several keys, the newest."""
    found = [p.parents[1] for p in checkpoints.glob(f"*/snapshots/step{step}") if (p / "config.json").is_file()]
    if not found:
        fail(f"{checkpoints}: no complete snapshots/step{step} (did the run reach step {step}?)")
    return max(found, key=lambda p: p.stat().st_mtime)


def training_log(run_folder: Path, keep: Path) -> int:
    """The newest checkpoint's trainer state, copied, and its log history as log.parquet; the
    step it was saved at."""
    sys.path.insert(0, str(Path.cwd() / "workflow"))
    from boundary.core.artifacts import write_table
    from boundary.stages.train import last_checkpoint, log_table

    newest = last_checkpoint(run_folder)
    if newest is None:
        fail(f"{run_folder}: no complete checkpoint-N (its trainer_state.json holds the run's log)")
    state = json.loads((Path(newest) / "trainer_state.json").read_text())
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(newest) / "trainer_state.json", keep / "trainer_state.json.partial")
    os.replace(keep / "trainer_state.json.partial", keep / "trainer_state.json")
    write_table(log_table(state["log_history"]), keep / "log.parquet")
    return int(state["global_step"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configfile", required=True)
    ap.add_argument("--override", action="append", default=[])
    ap.add_argument("--method", required=True, help="the checkpoint_of method whose evaluation is run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the command, run nothing")
    args = ap.parse_args(argv)
    run = yaml.safe_load(Path(args.configfile).read_text())["run"]
    target = f"results/{run}/eval/diagnostic/{args.method}/seed{args.seed}/counts.parquet"
    command = planned_command(target, [args.configfile, *args.override])
    model = re.search(r"--model (\S+) ", command).group(1)
    m = re.fullmatch(rf"results/{re.escape(run)}/train/(\w+)/seed(\d+)/step(\d+)", model)
    if m is None:
        fail(f"{args.method}: its evaluation reads {model}, not a step snapshot of a run (train/M/seedS/stepN)")
    method, seed, step = m.group(1), int(m.group(2)), int(m.group(3))
    run_folder = newest_run_folder(Path("checkpoints", run, method, f"seed{seed}"), step)
    snapshot = run_folder / "snapshots" / f"step{step}"
    command = command.replace(f"--model {model} ", f"--model {shlex.quote(str(snapshot))} ", 1)
    print(f"evaluate_snapshot: {snapshot} in place of {model}:\n  {command}", flush=True)
    if args.dry_run:
        return
    keep = Path("results", run, "bridge", method, f"seed{seed}")
    stopped = training_log(run_folder, keep)
    print(f"evaluate_snapshot: the run's log to step {stopped} in {keep}/log.parquet", flush=True)
    log = re.search(r"> (\S+) 2>&1$", command)
    for path in [Path(target), *([Path(log.group(1))] if log else [])]:
        path.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    rc = subprocess.run(["bash", "-c", command]).returncode
    seconds = round(time.time() - start, 1)
    record = {"command": command, "snapshot": str(snapshot), "stopped_after_step": stopped, "seconds": seconds,
              "exit": rc}
    (keep / f"evaluate_step{step}.json").write_text(json.dumps(record, indent=1) + "\n")
    if rc:
        tail = Path(log.group(1)).read_text(errors="replace").strip().splitlines()[-5:] if log else []
        fail(f"the evaluation exited {rc} after {seconds} s: " + " | ".join(tail))
    print(f"evaluate_snapshot: {target} in {seconds} s", flush=True)


if __name__ == "__main__":
    main()
