"""The pilot's seed leases against a hold of 2 GPUs, or of 1 (lab/studies/2026-11-28-qwen15b-
preregistration.md, Amendments 8 and 9), from the files of the pilot's lease that made its
calibration at the config's cap. Run from the repository root once that lease's files are merged:

    python lab/studies/2026-11-29-qwen05b-pilot/qwen05b_pilot_plan.py [--configfile lab/studies/2026-11-29-qwen05b-pilot/qwen05b_pilot.yaml]
        [--results results] [--gpus 2]

A lease of 2 GPUs holds either two methods of a seed (`lease.sh --seed S --methods grpo,pba`,
then `random,base`: each method trains and is evaluated on its own GPU) or one (`--methods grpo`,
...: it trains on one GPU while the other draws its anchor's base rollouts or a base draw, then
its evaluation runs in 2 shards over both, `sampling.shards: 2`). On the busiest GPU a lease takes

    fixed + base rollouts + training + evaluation (or half of it, one method a lease)

where, from that lease's files:
- the sampling rate: the calibration's tokens over its shard jobs' wall seconds (Snakemake's
  benchmark files: model load included, as an evaluation job's is), per GPU;
- tokens a completion: the calibration's mean (the diagnostic split at the run's cap; the
  benchmarks' completions are taken at the same length, and a trained policy's at the base's);
- base rollouts: the PBA mask's anchored share of prompt-epochs x steps x prompts a step x G;
- fixed: the machine's start and the carry calls (CALLS_S), the import (its benchmark file), the
  pack and return (PACK_S);
- training: the step measured at the config's cap on the run's GPUs (STEP_S, every completion at
  the cap: an upper bound) x steps x ANCHOR_FACTOR, plus the trainer's start (START_S).

On a hold of 1 GPU only the one-method designs trained on one GPU exist, and their evaluation runs
on that GPU alone.

Amendment 8's rule: the first of these designs whose lease fits HOLD_S less MARGIN_S is the one
the pilot trains (the diagnostic split whole before anything else, then the benchmarks, then the
fewest leases); if none fits, the pilot is blocked on hold length and the page says so. In that
order (Amendment 9 adds 6 and 7, the trainer on both GPUs of the hold, `train.gpus: 2`, whose step
row q measures on 2 GPUs; until it has, they are listed as unmeasured, never chosen, and the
verdict gives the largest step with which each would fit):
1. as configured, two methods a lease;
2. as configured, one method a lease;
3. each benchmark cut to its first BENCH_CUT prompts, two methods a lease;
4. the same, one method a lease;
6. design 4 trained on both GPUs;
5. design 4 with the diagnostic split cut to its first DIAG_CUT prompts (section 4's fallback);
7. design 5 trained on both GPUs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "workflow"))
from boundary.analysis.stage_times import read_benchmarks  # noqa: E402
from boundary.core.artifacts import read_table  # noqa: E402
from boundary.core.config import load_config  # noqa: E402
from boundary.core.errors import BoundaryError  # noqa: E402

HOLD_S, MARGIN_S = 1800, 180  # a lease's 30 minutes, less room for a slow call or pack
CALLS_S, PACK_S = 150, 60  # 13 carry calls and the start (the 1.5B's 22 took 125 s); the last pack
# The pilot's step on H200s by (completion cap, GPUs the run trains on), lab/studies/2026-11-28-engine-rollouts/engine_rollout_steps.sh:
# 512 on one, row p, the larger of its two leases' figures (9.13 s, 11.12 s); 1,024 on one, row q
# (lab/studies/2026-11-29-qwen05b-pilot/README.md). 1,024 on two: row q on a 2-GPU lease, not yet run.
STEP_S = {(512, 1): 11.12, (1024, 1): 16.43}
START_S = 50  # the trainer's start
ANCHOR_FACTOR = 1.1  # section 4's allowance for the anchor's term (not measured)
BENCH_CUT, DIAG_CUT = 32, 128


def measured(results: Path, shards: int) -> dict:
    """The rate (tokens a GPU-second), tokens a completion, import seconds and anchored share,
    from the joined calibration and its `shards` jobs' benchmark files."""
    jobs = read_benchmarks(results).set_index("job")
    names = [f"calibrate_base/shard{k}" for k in range(shards)] if shards > 1 else ["calibrate_base"]
    for job in names + ["import_base"]:
        if job not in jobs.index:
            raise BoundaryError(f"{results}/benchmarks/{job}.tsv: missing (the job's wall time)")
    drawn = read_table(results / "rollouts" / "base_calibration.parquet", ["n_tokens"], nonempty=True)["n_tokens"]
    mask = read_table(results / "masks" / "pba.parquet", ["action"], nonempty=True)
    return {"rate": drawn.sum() / jobs.loc[names, "seconds"].sum(), "tokens": drawn.mean(),
            "import_s": float(jobs.at["import_base", "seconds"]), "anchored": float(mask["action"].eq("anchor").mean())}


def step_seconds(train: dict, train_gpus: int = 1) -> float:
    """The measured step; a run on one GPU must have one, a run on two may not yet (NaN)."""
    cap = train["max_completion_length"]
    if (cap, 1) not in STEP_S:
        raise BoundaryError(f"train.max_completion_length {cap}: no training step measured at this cap "
                            f"(measured: {sorted(c for c, _ in STEP_S)}; row q of lab/studies/2026-11-28-engine-rollouts/engine_rollout_steps.sh "
                            f"measures 1,024)")
    return STEP_S.get((cap, train_gpus), float("nan"))


def training_seconds(train: dict, step: float) -> float:
    """One run: the trainer's start, and its steps with the anchor's allowance."""
    return START_S + train["steps"] * step * ANCHOR_FACTOR


def step_within(train: dict, seconds: float) -> float:
    """The largest step with which a run takes at most `seconds` (training_seconds inverted)."""
    return (seconds - START_S) / (train["steps"] * ANCHOR_FACTOR)


def lease_seconds(config: dict, m: dict, diagnostic: int, benchmark_prompts: int, methods: int,
                  gpus: int = 2, train_gpus: int = 1) -> dict:
    """The seconds of a lease's parts on its busiest GPU, and their sum, with `methods` methods a
    lease of `gpus` GPUs (methods <= gpus), each trained on `train_gpus`."""
    train, n = config["train"], config["evaluate"]["n"]
    per_step = train["prompts_per_step"] * train["num_generations"]
    parts = {
        "fixed": CALLS_S + m["import_s"] + PACK_S,
        "base_rollouts": m["anchored"] * train["steps"] * per_step * m["tokens"] / m["rate"],
        "training": training_seconds(train, step_seconds(train, train_gpus)),
        # one method on 2 GPUs: its evaluation in 2 shards, one a GPU
        "evaluation": (diagnostic + benchmark_prompts) * n * m["tokens"] / m["rate"] / (gpus // methods),
    }
    return {**parts, "total": sum(parts.values())}


def plan(config: dict, results: Path, gpus: int = 2) -> tuple[pd.DataFrame, str, str]:
    m = measured(results, config["calibration"]["shards"])
    diagnostic = len(read_table(results / "regimes" / "regimes.parquet", ["prompt_id"], nonempty=True))
    limits = [spec.get("limit") for spec in config["data"]["benchmarks"].values()]
    if None in limits:
        raise BoundaryError("data.benchmarks: every benchmark needs a `limit` for this arithmetic")
    cut = sum(min(x, BENCH_CUT) for x in limits)
    bench, diag = f"benchmarks cut to {BENCH_CUT} prompts", f"and the diagnostic split to {DIAG_CUT}"
    designs = [  # (number, design, diagnostic prompts, benchmark prompts, methods a lease, GPUs a run trains on)
        (1, "as configured", diagnostic, sum(limits), 2, 1), (2, "as configured", diagnostic, sum(limits), 1, 1),
        (3, bench, diagnostic, cut, 2, 1), (4, bench, diagnostic, cut, 1, 1), (6, bench, diagnostic, cut, 1, 2),
        (5, diag, min(diagnostic, DIAG_CUT), cut, 1, 1), (7, diag, min(diagnostic, DIAG_CUT), cut, 1, 2)]
    rows, step_at_most = [], {}  # an unmeasured design: the largest step with which it would fit
    for number, name, d, b, k, t in designs:
        if k * t <= gpus:
            parts = lease_seconds(config, m, d, b, k, gpus, t)
            if pd.isna(parts["training"]):
                left = HOLD_S - MARGIN_S - parts["fixed"] - parts["base_rollouts"] - parts["evaluation"]
                step_at_most[number] = step_within(config["train"], left)
            rows.append({"number": number, "design": name, "diagnostic": d, "benchmark_prompts": b,
                         "methods_a_lease": k, "trained_on_gpus": t, **{part: round(v / 60, 1) for part, v in parts.items()},
                         "fits": parts["total"] <= HOLD_S - MARGIN_S})  # on the seconds, not the rounded minutes
    table = pd.DataFrame(rows)
    head = (f"the calibration's lease measured: {m['rate']:,.0f} tokens a GPU-second end to end, "
            f"{m['tokens']:.0f} tokens a completion, import {m['import_s']:.0f} s, PBA anchors {m['anchored']:.1%} "
            f"of prompt-epochs (minutes below; a hold allows {(HOLD_S - MARGIN_S) / 60:.0f})")
    fitting = table[table["fits"]]
    verdict = (f"Amendment 8: the pilot trains with design {fitting['number'].iloc[0]}, {fitting['design'].iloc[0]}, "
               f"{fitting['methods_a_lease'].iloc[0]} method(s) a lease of {gpus} GPU(s), "
               f"each trained on {fitting['trained_on_gpus'].iloc[0]}"
               if len(fitting) else
               f"Amendment 8: no design fits a hold of {gpus} GPU(s): the pilot is blocked on hold length")
    if not len(fitting) and step_at_most:
        verdict += (" until row q measures the step on 2 GPUs (design(s) "
                    + ", ".join(f"{n}: fits with a step of at most {s:.2f} s" for n, s in step_at_most.items()) + ")")
    return table, head, verdict


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", default="lab/studies/2026-11-29-qwen05b-pilot/qwen05b_pilot.yaml")
    ap.add_argument("--results", default="results")
    ap.add_argument("--gpus", type=int, choices=(1, 2), default=2, help="the hold's GPUs")
    args = ap.parse_args(argv)
    try:
        config = load_config(args.configfile)
        table, head, verdict = plan(config, Path(args.results) / config["run"], args.gpus)
    except BoundaryError as err:
        sys.exit(f"qwen05b_pilot_plan: {err}")
    print(head)
    print(table.to_string(index=False))
    print(verdict)


if __name__ == "__main__":
    main()
