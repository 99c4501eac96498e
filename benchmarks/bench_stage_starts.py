"""What each `boundary <stage>` job pays to start: the CPU seconds of the imports its process
makes before and while it works, beside the job's whole CPU seconds.

Runs the jobs of a finished Snakemake run again, one after another, from their own shell
commands (`snakemake -n -p --forceall`), with this checkout's package (PYTHONPATH), its
`boundary` process recording every module it imports (an audit hook: the process's own, not
its children's). Then a fresh interpreter imports the same modules in the same order (the best
of --repeat): that is the stage's start, in CPU seconds, which hold up on a shared machine where
import times by the clock do not. A job's own helpers (the verifier's worker, a training run's
processes) are in its CPU seconds, not in its start.

    snakemake --cores 2 --configfile smoke.yaml             # once, in a copy of the workflow
    python benchmarks/bench_stage_starts.py --workdir DIR --configfile DIR/smoke.yaml
    python benchmarks/bench_stage_starts.py --workdir DIR --configfile DIR/smoke.yaml --rules regimes mask
    python benchmarks/bench_stage_starts.py --workdir DIR --configfile DIR/smoke.yaml --jobs testbed/grpo report

The jobs rewrite their outputs in DIR (a scratch copy: the same commands as the run's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "peft", "vllm", "accelerate", "datasets", "scipy", "torch._dynamo",
         "sympy", "math_verify", "matplotlib")
COMMAND = re.compile(r"(^|\s)boundary\s")  # the rule's `boundary <stage>` (after any VAR=value, exec)
RECORD = """
import sys
out = open(sys.argv.pop(1), "w", buffering=1)
sys.addaudithook(lambda event, args: event == "import" and out.write(args[0] + "\\n"))
from boundary.cli import main
sys.argv[0] = "boundary"
sys.exit(main())
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def jobs(workdir: Path, configfile: str, env: dict) -> list[tuple[str, str, str]]:
    """(rule, log file, shell command) of every job a forced dry run lists, in its order. Kept in
    the workdir: once jobs ran outside Snakemake, its check of what it wrote refuses a dry run."""
    cache = workdir / ".stage_jobs.json"
    if cache.exists():
        return [tuple(job) for job in json.loads(cache.read_text())]
    out = subprocess.run(["snakemake", "-n", "-p", "--forceall", "--cores", "1", "--configfile", configfile],
                         cwd=workdir, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if out.returncode:
        sys.exit(f"snakemake -n failed:\n{out.stdout[-3000:]}")
    found = parse_jobs(out.stdout)
    cache.write_text(json.dumps(found))
    return found


def parse_jobs(text: str) -> list[tuple[str, str, str]]:
    found, rule, log = [], None, None
    for line in text.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):", line):
            rule, log = m[1], None
        elif line.strip().startswith("log:"):
            log = line.split(":", 1)[1].split(",")[0].strip()
        elif line.startswith("Shell command:") and rule and log:
            found.append((rule, log, line.split(":", 1)[1].strip()))
    return found


def recorded(command: str, record: Path) -> str:
    """The job's command with its `boundary` process recording its imports into `record`."""
    if not COMMAND.search(command):
        sys.exit(f"no `boundary` command in {command[:200]}")
    recorder = f"{shlex.quote(sys.executable)} -c {shlex.quote(RECORD)} {shlex.quote(str(record))} "
    return COMMAND.sub(lambda m: m[1] + recorder, command, count=1)


REPLAY = """
import importlib, resource, sys
if "vllm" not in sys.argv and "boundary.training.trl_pin" in sys.argv:  # as `boundary train` has TRL skip it
    importlib.import_module("boundary.training.trl_pin").without_vllm()
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
u = resource.getrusage(resource.RUSAGE_SELF)
print(u.ru_utime + u.ru_stime, " ".join(m for m in {heavy!r} if m in sys.modules))
"""


def start_cpu(modules: list[str], env: dict, repeat: int) -> tuple[float, str]:
    """CPU seconds of a fresh interpreter importing `modules` in order (the best of `repeat`)."""
    best, heavy = float("inf"), ""
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", REPLAY.format(heavy=HEAVY), *modules], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout.split(maxsplit=1)
        if float(out[0]) < best:
            best, heavy = float(out[0]), out[1].strip() if len(out) > 1 else ""
    return best, heavy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", required=True, type=Path, help="a finished run's working directory (a scratch copy)")
    ap.add_argument("--configfile", required=True, help="its config file")
    ap.add_argument("--rules", nargs="*", help="only these rules (default: every job)")
    ap.add_argument("--jobs", nargs="*", help="only the jobs whose log path holds one of these")
    ap.add_argument("--first", action="store_true", help="one job a rule (the first the dry run lists)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh interpreters a start is measured in (the best)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "workflow"), os.environ.get("PYTHONPATH", "")])}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    seen, rows = set(), []
    for rule, log, command in jobs(args.workdir, args.configfile, env):
        if ((args.rules and rule not in args.rules) or (args.first and rule in seen)
                or (args.jobs and not any(j in log for j in args.jobs))):
            continue
        seen.add(rule)
        cpu, wall = children_cpu(), time.perf_counter()
        record = (args.workdir / log).with_suffix(".imports")  # beside the log: what the process imported
        run = subprocess.run(["bash", "-c", recorded(command, record)], cwd=args.workdir, env=env)
        cpu, wall = children_cpu() - cpu, time.perf_counter() - wall
        if run.returncode:
            sys.exit(f"{rule}: exit {run.returncode} (see {args.workdir / log})")
        start, heavy = start_cpu(list(dict.fromkeys(record.read_text().split())), env, args.repeat)
        rows.append((rule, cpu, start))
        name = Path(log).relative_to(Path(log).parts[0], Path(log).parts[1], "logs").with_suffix("")
        print(f"{str(name):<44} job cpu {cpu:6.1f} s  start {start:5.2f} s ({start / cpu:4.0%})  wall {wall:6.1f} s  "
              f"{heavy}", flush=True)
    if rows:
        jobs_cpu, starts = sum(r[1] for r in rows), sum(r[2] for r in rows)
        print(f"{len(rows)} jobs: cpu {jobs_cpu:.0f} s, of it starts {starts:.0f} s ({starts / jobs_cpu:.0%})")


if __name__ == "__main__":
    main()
