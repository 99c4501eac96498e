"""Time reading 1,000,000 sample rows from JSONL into per-prompt counts (target: under 30 s).

    PYTHONPATH=workflow python benchmarks/bench_readers.py [--rows 1000000] [--prompts 4000]
                                                            [--repeat 2]

Two files of the same samples are written to a temp folder: plain samples (prompt_id,
completion, correct) and a verl validation dump (input, output, gts, score, step, reward,
acc, pred: every sample keyed by its prompt text). Completions are 150-250 characters. Each is
read with `boundary.readers.read` (detection, parsing, verdicts, grouping into n and c,
validation), best of --repeat, wall and CPU time. Last, pairing by problem: --prompts problems
under two templates in another order, matched with `boundary.readers.pair`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from boundary import readers  # noqa: E402


def write_files(folder: Path, rows: int, prompts: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    pid = rng.integers(0, prompts, rows)
    p = rng.beta(0.4, 1.0, prompts)
    ok = rng.random(rows) < p[pid]
    filler = "Let us reason step by step about the quantities given in the problem statement. " * 4
    lengths = rng.integers(150, 250, rows)
    answers = rng.integers(0, 1000, rows)
    plain, verl = folder / "samples.jsonl", folder / "123.jsonl"
    with open(plain, "w") as f, open(verl, "w") as g:
        for i in range(rows):
            text = filler[: lengths[i] - 20] + f" \\boxed{{{answers[i]}}}"
            f.write(json.dumps({"prompt_id": f"p{pid[i]}", "completion": text, "correct": bool(ok[i])}) + "\n")
            g.write(json.dumps({"input": f"user\nProblem number {pid[i]}: compute the value.\nassistant\n",
                                "output": text, "gts": str(answers[i]), "score": 1.0 if ok[i] else 0.0,
                                "step": 123, "reward": 1.0 if ok[i] else 0.0, "acc": bool(ok[i]),
                                "pred": str(answers[i])}, ensure_ascii=False) + "\n")
    return {"plain samples": plain, "verl dump": verl}


def best_of(repeat: int, fn):
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--prompts", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = write_files(Path(tmp), args.rows, args.prompts)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"readers: {args.rows:,} sample rows, {args.prompts} prompts, {cores} cores, best of {args.repeat} "
              f"(1-min load average {load:.1f})")
        print(f"{'':22}{'MB':>8}{'wall':>8}{'cpu':>8}{'rows/s':>12}")
        for label, path in files.items():
            wall, cpu, run = best_of(args.repeat, lambda: readers.read(path))
            assert int(run.counts["n"].sum()) == args.rows
            mb = path.stat().st_size / 2**20
            print(f"  {label:<20}{mb:8.0f}{wall:7.2f}s{cpu:7.2f}s{args.rows / wall:12,.0f}")
        base, other, truth = two_templates(args.prompts)
        wall, cpu, paired = best_of(args.repeat, lambda: readers.pair([base, other], ["base", "other"]))
        assert list(paired[1].counts["prompt_id"]) == [truth[p] for p in other.counts["prompt_id"]]
        print(f"  {'pair by problem':<20}{'':>8}{wall:7.2f}s{cpu:7.2f}s   ({args.prompts} prompts, two templates)")


def two_templates(prompts: int, seed: int = 0):
    """The same problems (40 random words each) under a lighteval-style and a verl-style
    template, in another order: (base run, other run, other id -> base id)."""
    rng = np.random.default_rng(seed)
    words = np.array("the sum of a and b is prime find all real x such that its square exceeds ten".split())
    problems = [" ".join(rng.choice(words, 40)) + f" ({i})?" for i in range(prompts)]
    order = rng.permutation(prompts)
    base = {f"b{i}": f"Solve the following problem.\n\n{q}" for i, q in enumerate(problems)}
    other = {f"o{j}": f"{problems[i]} Let's think step by step." for j, i in enumerate(order)}
    run = lambda texts: readers.RunData(pd.DataFrame({"prompt_id": list(texts), "n": 4, "c": 1}), "samples", None,
                                        texts, "text")
    return run(base), run(other), {f"o{j}": f"b{i}" for j, i in enumerate(order)}


if __name__ == "__main__":
    main()
