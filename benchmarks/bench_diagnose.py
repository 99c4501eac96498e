"""Time `boundary diagnose` on 3000 prompts x 10 trained runs with 10,000 bootstrap resamples,
attribution of Δpass@k included (target: under 5 s on 2 cores).

    PYTHONPATH=workflow python benchmarks/bench_diagnose.py [--prompts 3000] [--runs 10]
                                                            [--resamples 10000] [--repeat 3]

Synthetic two-mode counts (n = 256; base, an independent calibration, 5 methods x 2 seeds)
are written as parquet to a temp folder; the command is then run in-process, end to end
(reading, validation, analysis with the attribution, CSVs, tables, figures and the HTML page),
and timed. The best of --repeat runs is reported, with and without figures, plus the analysis
alone with and without the attribution, as wall time and as CPU time (all threads; BLAS uses
both cores, so CPU time can exceed wall time).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from boundary.analysis import diagnose  # noqa: E402
from boundary.analysis.regimes import label_counts  # noqa: E402
from boundary.readers.counts import load_counts  # noqa: E402


def make_inputs(folder: Path, prompts: int, runs: int, n: int = 256, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    w = rng.beta(0.3, 1.5, prompts)
    w[rng.random(prompts) < 0.1] = 0
    ids = [f"p{i}" for i in range(prompts)]

    def counts(p, entropy):
        c = rng.binomial(n, p)
        return pd.DataFrame({"prompt_id": ids, "n": n, "c": c, "entropy": entropy * rng.uniform(0.5, 1.5, prompts),
                             "unique_positives": np.where(c > 0, rng.integers(1, 4, prompts), 0)})

    counts(w, 1.0)[["prompt_id", "n", "c"]].to_parquet(folder / "calibration.parquet")
    counts(w, 1.0).to_parquet(folder / "base.parquet")
    args = ["--base", str(folder / "base.parquet"), "--calibration", str(folder / "calibration.parquet")]
    methods = ["grpo", "pba", "global_kl", "entropy", "random"]
    for i in range(runs):
        method, s = methods[i % len(methods)], i // len(methods)
        keep = 0.9 if method == "pba" else 0.3
        p = np.where(w < 0.1, w * keep, np.minimum(1.0, w * 1.5))
        path = folder / f"{method}_{s}.parquet"
        counts(p, 0.3 if method == "grpo" else 0.7).to_parquet(path)
        args += ["--trained", f"{method}:{s}={path}"]
    return args + ["--pair", "pba", "grpo"]


def best_of(repeat: int, fn) -> tuple[float, float]:
    """Best wall time and best CPU time (this process, all threads) over `repeat` runs.
    On a shared machine CPU time is the steadier figure: waiting for a core is not counted."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cli = make_inputs(tmp, args.prompts, args.runs) + ["--resamples", str(args.resamples)]
        import matplotlib  # warm imports so the figure is steady-state cost
        matplotlib.use("Agg")
        diagnose.main(cli + ["--out", str(tmp / "warm"), "--resamples", "10"])
        full = best_of(args.repeat, lambda: diagnose.main(cli + ["--out", str(tmp / "out")]))
        nofig = best_of(args.repeat, lambda: diagnose.main(cli + ["--no-figures", "--out", str(tmp / "out2")]))
        base = load_counts(tmp / "base.parquet")
        runs = {}
        for spec in cli:
            if "=" in spec and ":" in spec.split("=")[0]:
                name, seed, path = diagnose.parse_run(spec)
                runs[(name, seed)] = load_counts(path)
        regimes = label_counts(load_counts(tmp / "calibration.parquet"))
        analysis = best_of(args.repeat, lambda: diagnose.analyse(base, runs, regimes, resamples=args.resamples,
                                                                 pairs=[("pba", "grpo")]))
        plain = best_of(args.repeat, lambda: diagnose.analyse(base, runs, regimes, resamples=args.resamples,
                                                              pairs=[("pba", "grpo")], attribution=False))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"diagnose: {args.prompts} prompts x {args.runs} trained runs, {args.resamples} bootstrap resamples, "
          f"{cores} cores (best of {args.repeat})")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{'':32}{'wall':>8}{'cpu':>8}   (1-min load average {load:.1f})")
    for label, (wall, cpu) in (("end to end, figures + page", full), ("end to end, --no-figures", nofig),
                               ("analyse(), with attribution", analysis), ("analyse(), no attribution", plain)):
        print(f"  {label:<30}{wall:7.2f}s{cpu:7.2f}s")


if __name__ == "__main__":
    main()
