"""The test suite's time, file by file, and the wall time of test.sh's two workers.

Runs each test file in its own pytest process, one after another (no xdist), and prints per
file: its wall time, the CPU seconds of the process and all it started (Snakemake jobs,
torchrun), and its slowest tests. CPU seconds are the figure to compare on a shared machine:
wall time there counts the other users' load. Then it replays test.sh's schedule (--dist
loadfile, files in conftest.LONGEST_FIRST order, each to the first free worker) on the CPU
seconds, for 2 workers: about the wall time of `bash workflow/scripts/test.sh` on an otherwise
idle 2-core machine.

    python benchmarks/bench_tests.py                      # every file under tests/
    python benchmarks/bench_tests.py tests/test_report.py tests/test_workflow.py
    OPENBLAS_CORETYPE=Sandybridge python benchmarks/bench_tests.py tests/test_report.py
"""

from __future__ import annotations

import argparse
import heapq
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DURATION = re.compile(r"^\s*([\d.]+)s (call|setup|teardown)\s+(\S+)$", re.M)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_file(path: Path, extra: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "workflow"), "OMP_NUM_THREADS": "1"}  # a worker's one thread
    cpu, start = children_cpu(), time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
                          "--durations-min=1", str(path), *extra], cwd=ROOT, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    tests = sorted(((float(s), f"{kind} {name.split('::', 1)[-1]}") for s, kind, name in DURATION.findall(out.stdout)),
                   reverse=True)
    tail = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    return {"file": path.name, "wall": wall, "cpu": cpu, "tests": tests, "result": tail, "rc": out.returncode}


def two_workers(rows: list[dict], order: list[str], workers: int = 2) -> float:
    """Makespan of files handed, in collection order, each to the first free worker."""
    rank = {name: i for i, name in enumerate(order)}
    queue = sorted(rows, key=lambda r: rank.get(r["file"], len(rank)))  # stable, as conftest sorts
    free = [0.0] * workers
    for r in queue:
        heapq.heappush(free, heapq.heappop(free) + r["cpu"])
    return max(free)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="test files (default: tests/test_*.py)")
    ap.add_argument("--top", type=int, default=3, help="slowest tests shown per file")
    args, extra = ap.parse_known_args()
    files = [Path(f) for f in args.files] or sorted((ROOT / "tests").glob("test_*.py"))
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import LONGEST_FIRST

    rows = []
    for f in files:
        r = run_file(f, extra)
        rows.append(r)
        print(f"{r['file']:<34} wall {r['wall']:7.1f} s  cpu {r['cpu']:7.1f} s  {r['result']}", flush=True)
        for seconds, name in r["tests"][:args.top]:
            print(f"    {seconds:7.1f} s  {name}")
    total = sum(r["cpu"] for r in rows)
    print(f"total cpu {total:.0f} s; test.sh's 2 workers (loadfile, LONGEST_FIRST order), from cpu seconds: "
          f"{two_workers(rows, LONGEST_FIRST):.0f} s")


if __name__ == "__main__":
    main()
