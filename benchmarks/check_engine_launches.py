"""Issue 39's check of the engine through the train rule on several GPUs, recomputed from what
the launches brought back (docs/how-to/engine_rollouts.md, "Check the engine through the train
rule on several GPUs"):

    python benchmarks/check_engine_launches.py DIR [--first ddp2]

DIR holds one folder a launch (ddp2, ddp4, fsdp2, fsdp4, ...), each with results/RUN's
`train/{method}/seed0/{log,actions}.parquet`, `logs/train/{method}/seed0.log` and
`benchmarks/train/{method}/seed0.tsv`, and `base_rollouts.md5` (md5sum of its base-rollout shards).
Prints a row per launch and method, then PASS or FAIL: a launch passes when each run logged every
step, its engine's log-prob check ran at every step within LOGP_TOLERANCE nats a token on
average, its log says the processes the launch asked for (its name's digit) and, for an `fsdp`
launch, FSDP's own warnings, and its actions (the prompts of each step, weights, actions and
rollout sources) and base rollouts equal the first launch's.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))
from boundary.training.rollout_engine import LOGP_TOLERANCE  # noqa: E402


def launch_rows(folder: Path, first: Path) -> list[dict]:
    rows = []
    for method_dir in sorted((folder / "train").iterdir()):
        method = method_dir.name
        log = pd.read_parquet(method_dir / "seed0" / "log.parquet")
        actions = pd.read_parquet(method_dir / "seed0" / "actions.parquet")
        same = actions.equals(pd.read_parquet(first / "train" / method / "seed0" / "actions.parquet"))
        text = (folder / "logs" / "train" / method / "seed0.log").read_text(errors="replace")
        found = re.search(r"train: (\d+) processes", text)
        wall = pd.read_csv(folder / "benchmarks" / "train" / method / "seed0.tsv", sep="\t")["s"].iloc[0]
        checks = log["engine_logp_mean_abs_diff"].dropna()
        rows.append({"launch": folder.name, "method": method, "processes": int(found[1]) if found else 1,
                     "fsdp_in_log": "torch/distributed/fsdp" in text, "steps": len(log),
                     "checked_steps": len(checks), "logp_mean_max": round(float(checks.max()), 4),
                     "logp_max_max": round(float(log["engine_logp_max_abs_diff"].max()), 4),
                     "actions_as_first": same, "reward": round(float(log["reward"].mean()), 4),
                     "step_s_after_first": round(float(log["step_time"].iloc[1:].mean()), 2),
                     "job_s": round(float(wall), 1)})
    return rows


def verdict(row: dict, expected_steps: int) -> list[str]:
    asked = int(re.sub(r"\D", "", row["launch"]) or 1)
    wrong = []
    if row["steps"] != expected_steps or row["checked_steps"] != row["steps"]:
        wrong.append(f"{row['steps']} steps, {row['checked_steps']} checked")
    if not row["logp_mean_max"] <= LOGP_TOLERANCE:
        wrong.append(f"engine {row['logp_mean_max']} nats a token")
    if row["processes"] != asked or row["fsdp_in_log"] != row["launch"].startswith("fsdp"):
        wrong.append(f"{row['processes']} processes, fsdp in log {row['fsdp_in_log']}")
    if not row["actions_as_first"]:
        wrong.append("actions differ from the first launch's")
    return wrong


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir")
    p.add_argument("--first", default="ddp2", help="the launch the others are compared with")
    p.add_argument("--steps", type=int, default=8, help="train.steps of the config")
    args = p.parse_args(argv)
    root = Path(args.dir)
    first = root / args.first
    launches = [first] + sorted(f for f in root.iterdir() if f.is_dir() and f != first)
    rows = [row for launch in launches for row in launch_rows(launch, first)]
    print(pd.DataFrame(rows).to_string(index=False))
    failures = [f"{r['launch']} {r['method']}: {'; '.join(w)}" for r in rows if (w := verdict(r, args.steps))]
    checksums = [tuple((f / "base_rollouts.md5").read_text().split()[::2]) for f in launches]
    equal = len(set(checksums)) == 1
    if not equal:
        failures.append("base rollouts differ between launches")
    print(f"base rollouts: {'equal' if equal else 'differ'} at every launch ({len(checksums[0])} shards)")
    print("\n".join(failures) or f"PASS: {len(rows)} runs, the engine within {LOGP_TOLERANCE} nats a token "
          f"at every step, actions equal at every launch")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
