"""Adaptive calibration against the full run on the same prompts: label agreement and savings.

Real draws (a base model folder and a split parquet, as the workflow writes them):

    PYTHONPATH=workflow python benchmarks/bench_adaptive_calibration.py --config config/config.yaml \
        --model results/testbed/models/base --split results/testbed/splits/diagnostic.parquet
    # one GPU (the lead's run): the same with --device cuda [--batch-size auto] [--prompts K]

runs the config's full calibration (n draws a prompt) and then the adaptive one (calibration.rounds,
calibration.delta; the regimes section's cuts) through the workflow's own sample-and-verify
path, and prints the confusion matrix of regime labels (rows: the full run, columns: the
adaptive run), the agreement, samples and tokens kept and drawn (drawn: with the look-ahead beyond
a prompt's stop, which is cancelled or dropped), the wall time and completions/s of each (model
load, sampling and verification: the stage's work; the rule's design separately), each run's
sampler throughput line, and
how many prompts' adaptive samples are exactly the first n_i of the full run's (all of them on
a CPU; on a GPU as far as the logits agree across batch shapes).

Simulated from per-prompt counts (e.g. a committed regimes.parquet, or any parquet/CSV with
prompt_id, n, c), each prompt's rate taken as p = c / n:

    PYTHONPATH=workflow python benchmarks/bench_adaptive_calibration.py \
        --simulate results/RUN/regimes/regimes.parquet [--replicates 200]

prints the same confusion matrix and ratios over the replicates (Bernoulli draws of the full
run; the adaptive run reads their prefixes), and the exact expected agreement and sample share
(the stopping rule's dynamic program).

Replayed on GPU runs' per-sample verdicts (pool, run, prompt_id, sample_idx, correct; run full
or adaptive, one row a drawn sample):

    PYTHONPATH=workflow python benchmarks/bench_adaptive_calibration.py --config config/smollm2.yaml \
        --replay outcomes.parquet

prints, per pool, the rule applied to the full run's own draws in order (what an adaptive run
keeps where its draws are the full run's: on a CPU always), the real adaptive run's labels
against the full run's, how often the two runs' verdicts agree at the same sample index, and the
agreement with the full run's labels expected of an independent full run and an independent
adaptive run (a GPU's draws move with the batch shape).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))


def _settings(config_path: str | None, overrides: dict) -> dict:
    """The calibrate stage's complete settings of the diagnostic split, as the workflow passes
    them (calibration, regimes, sampling, verify with the split's extractor)."""
    from boundary.core import settings
    from boundary.core.config import load_config

    config = load_config(config_path or ROOT / "config" / "config.yaml")
    config["calibration"].update({k: v for k, v in overrides.items() if v is not None}, adaptive=True)
    return settings.resolve("calibrate", settings.calibrate_key(config, "diagnostic"))


def _rule(config):
    from boundary.analysis.adaptive import StoppingRule

    start = time.perf_counter()
    rule = StoppingRule.from_settings(config["calibration"], config["regimes"])
    rule.design
    print(rule.describe())
    print(f"rule design: {time.perf_counter() - start:.1f} s (once per stage)")
    return rule


def _confusion(full_labels, adaptive_labels) -> None:
    import pandas as pd

    from boundary.analysis.regimes import REGIMES

    table = pd.crosstab(pd.Categorical(full_labels, REGIMES), pd.Categorical(adaptive_labels, REGIMES),
                        rownames=["full"], colnames=["adaptive"], dropna=False)
    print(table.to_string())
    agree = float((pd.Series(full_labels).to_numpy() == pd.Series(adaptive_labels).to_numpy()).mean())
    print(f"agreement: {agree:.2%} of {len(full_labels):,} prompt labels")


def machine() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    return f"{platform.node()}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, commit {commit}"


def _draws(rule, running):
    """Per prompt, the draws the rule makes given each prefix's correct count (`running`:
    [prompts, n] cumulative sums): StoppingRule.draws for many prompts at once."""
    import numpy as np

    draws = np.full(len(running), rule.n)
    for r in reversed(rule.rounds[:-1]):
        draws[rule.table[r][running[:, r - 1]]] = r
    return draws


def simulate(args) -> None:
    import numpy as np

    from boundary.analysis.regimes import label
    from boundary.core.artifacts import read_table

    config = _settings(args.config, {"rounds": args.rounds, "delta": args.delta})
    counts = read_table(args.simulate, ["n", "c"])
    p = (counts["c"] / counts["n"]).to_numpy(float)
    rule = _rule(config)
    n, th, rng = rule.n, rule.thresholds, np.random.default_rng(args.seed)
    full_all, adaptive_all, draws_all = [], [], []
    for _ in range(args.replicates):
        running = np.cumsum(rng.random((len(p), n)) < p[:, None], axis=1)
        draws = _draws(rule, running)
        c = running[np.arange(len(p)), draws - 1]
        full_all.append(label(running[:, -1] / n, th))
        adaptive_all.append(label(c / draws, th))
        draws_all.append(draws)
    full, adaptive, draws = (np.concatenate(x) for x in (full_all, adaptive_all, draws_all))
    print(f"simulated: {len(p)} prompts of {args.simulate} (p = c / n) x {args.replicates} replicates, "
          f"n = {n}, seed {args.seed}")
    _confusion(full, adaptive)
    print(f"samples: adaptive {draws.sum():,} of {len(draws) * n:,} = {draws.sum() / (len(draws) * n):.1%}")
    wrong, expected = rule.error_and_draws(rule.table, p)
    print(f"exact expectation: agreement {1 - wrong.mean():.3%}, samples {expected.mean() / n:.1%} of n; "
          f"worst prompt P(differs) {wrong.max():.4f}")
    by = {name: float(expected[label(p, th) == name].mean() / n) for name in sorted(set(label(p, th)))}
    print("expected share of n by regime of p: " + ", ".join(f"{k} {v:.1%}" for k, v in by.items()))


def _independent(rule, th, c_full, n, rng, replicates: int):
    """Expected agreement with the observed full labels of an independent full run and of an
    independent adaptive run (draws sharing nothing with the observed run, as a GPU's do once a
    batch shape moves a logit): p drawn from each prompt's Jeffreys posterior Beta(c + 1/2,
    n - c + 1/2), then n Bernoulli(p) draws a replicate."""
    import numpy as np

    from boundary.analysis.regimes import label

    observed = label(c_full / n, th)
    same_full = same_adaptive = 0.0
    for _ in range(replicates):
        p = rng.beta(c_full + 0.5, n - c_full + 0.5)
        running = np.cumsum(rng.random((len(p), n)) < p[:, None], axis=1)
        draws = _draws(rule, running)
        same_full += (label(running[:, -1] / n, th) == observed).mean()
        same_adaptive += (label(running[np.arange(len(p)), draws - 1] / draws, th) == observed).mean()
    return same_full / replicates, same_adaptive / replicates


def replay(args) -> None:
    """GPU runs' per-sample outcomes (pool, run, prompt_id, sample_idx, correct; run full or
    adaptive): the rule replayed on the full run's own draws (what an adaptive run keeps where
    its draws are the full run's prefix: on a CPU always), against the real adaptive run."""
    import numpy as np
    import pandas as pd

    from boundary.analysis.regimes import label
    from boundary.core.artifacts import read_table

    config = _settings(args.config, {"rounds": args.rounds, "delta": args.delta})
    rule = _rule(config)
    th, n = rule.thresholds, rule.n
    table = read_table(args.replay, ["pool", "run", "prompt_id", "sample_idx", "correct"])
    rng = np.random.default_rng(args.seed)
    for pool, rows in table.groupby("pool", sort=True):
        full = rows[rows["run"] == "full"].sort_values(["prompt_id", "sample_idx"])
        outcomes = full.groupby("prompt_id", sort=True)["correct"].apply(lambda x: x.to_numpy(int))
        if not outcomes.map(len).eq(n).all():
            raise SystemExit(f"{args.replay}: pool {pool}: a full run's prompt without {n} samples")
        running = np.cumsum(np.stack(outcomes.to_numpy()), axis=1)
        c_full = running[:, -1]
        full_labels = label(c_full / n, th)
        draws = _draws(rule, running)
        c_prefix = running[np.arange(len(draws)), draws - 1]
        print(f"\n== {pool}: {len(outcomes)} prompts, n = {n}")
        print("the rule on the full run's own draws (each prompt's first n_i samples):")
        _confusion(full_labels, label(c_prefix / draws, th))
        print(f"samples: {draws.sum():,} of {len(draws) * n:,} = {draws.sum() / (len(draws) * n):.1%}")
        by = pd.DataFrame({"regime": full_labels, "draws": draws}).groupby("regime")["draws"]
        print("by the full run's regime: " + "; ".join(
            f"{k} {len(v)} prompts, {v.mean() / n:.1%} of n, {v.sum() / draws.sum():.1%} of the samples"
            for k, v in by))
        adaptive = rows[rows["run"] == "adaptive"]
        if adaptive.empty:
            continue
        counts = adaptive.groupby("prompt_id")["correct"].agg(["sum", "size"]).reindex(outcomes.index)
        print("the real adaptive run (its own draws):")
        _confusion(full_labels, label(counts["sum"] / counts["size"], th))
        paired = adaptive.merge(full, on=["prompt_id", "sample_idx"], suffixes=("_a", "_f"))
        p = paired["prompt_id"].map(pd.Series(c_full / n, index=outcomes.index))
        print(f"same sample index, same verdict: {(paired['correct_a'] == paired['correct_f']).mean():.2%} of "
              f"{len(paired):,} pairs; {(p ** 2 + (1 - p) ** 2).mean():.2%} expected if the draws were "
              f"independent, 100% if they were the same draws")
        same_full, same_adaptive = _independent(rule, th, c_full, n, rng, args.replicates)
        print(f"expected agreement with this full run's labels, draws independent of it "
              f"({args.replicates} replicates): another full run {same_full:.2%}, an adaptive run "
              f"{same_adaptive:.2%}")


def real(args) -> None:
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from dataclasses import replace

    import pandas as pd

    from boundary.analysis.regimes import counts_from_calibration, label_counts
    from boundary.core.artifacts import read_table
    from boundary.sampling.scoring import sampling_params, scored_samples
    from boundary.tasks.verify import Verifier

    config = _settings(args.config, {"rounds": args.rounds, "delta": args.delta})
    cal, sampling = config["calibration"], dict(config["sampling"])
    if args.batch_size:
        sampling["batch_size"] = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    split = read_table(args.split, ["prompt_id", "answer"])
    split = split.iloc[args.offset:args.offset + args.prompts if args.prompts else None]
    rule = _rule(config)
    params = replace(sampling_params(cal, sampling, cal["seed"], cal["n"]), backend=args.backend)
    extractor = config["verify"]["extractor"]  # the diagnostic split's
    results = {}
    for name, r in (("full", None), ("adaptive", rule)):
        verifier = Verifier(timeout=config["verify"]["timeout"], workers=config["verify"]["workers"])
        lines = []
        start = time.perf_counter()
        try:
            samples = scored_samples(args.model, split, params, extractor, verifier, log=lines.append, rule=r)
        finally:
            verifier.close()
        results[name] = (samples, time.perf_counter() - start)
        if args.device == "cuda":  # the next run sizes its seats on free memory, as a fresh stage does
            import gc

            import torch

            gc.collect()
            torch.cuda.empty_cache()
        for line in lines:  # the sampler's own lines: its throughput (all it drew), what it kept
            if line.startswith("sampling (") and "model loaded" not in line:
                print(f"{name}: {line}")
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            samples.to_parquet(Path(args.out) / f"{name}.parquet")
    (full, t_full), (adaptive, t_adaptive) = results["full"], results["adaptive"]
    th = rule.thresholds
    counts = {k: counts_from_calibration(v[0]) for k, v in results.items()}
    labels = {k: label_counts(v, th).set_index("prompt_id")["regime"] for k, v in counts.items()}
    print(f"machine: {machine()}; device {args.device}, backend {args.backend}")
    print(f"prompts: {len(split)} of {args.split}; n = {cal['n']}, seed {cal['seed']}")
    _confusion(labels["full"].to_numpy(), labels["adaptive"].reindex(labels["full"].index).to_numpy())
    tokens_full, tokens_adaptive = int(full["n_tokens"].sum()), int(adaptive["n_tokens"].sum())
    drawn = adaptive.attrs.get("drawn_tokens", tokens_adaptive)
    drawn_rows = adaptive.attrs.get("drawn_completions", len(adaptive))
    print(f"samples: adaptive {len(adaptive):,} of {len(full):,} = {len(adaptive) / len(full):.1%} kept; "
          f"{drawn_rows:,} drawn = {drawn_rows / len(full):.1%} (look-ahead beyond stops included)")
    print(f"tokens: adaptive {tokens_adaptive:,} of {tokens_full:,} = {tokens_adaptive / tokens_full:.1%} kept; "
          f"{drawn:,} drawn = {drawn / tokens_full:.1%}")
    print(f"wall time: full {t_full:.1f} s, adaptive {t_adaptive:.1f} s = {t_adaptive / t_full:.1%}")
    print(f"completions/s (stage: load, sampling, verification): full {len(full) / t_full:,.1f}; adaptive "
          f"{len(adaptive) / t_adaptive:,.1f} kept, {drawn_rows / t_adaptive:,.1f} drawn")
    prefix = 0
    for pid, rows in adaptive.groupby("prompt_id", sort=False):
        first = full[full["prompt_id"] == pid].head(len(rows))
        prefix += rows["completion"].tolist() == first["completion"].tolist()
    print(f"exact prefix of the full run's samples: {prefix} of {adaptive['prompt_id'].nunique()} prompts")
    if args.out:  # per prompt, small enough to commit beside the results page
        per_prompt = pd.DataFrame({f"{k}_{col}": v for k in ("full", "adaptive")
                                   for col, v in counts[k].set_index("prompt_id")[["n", "c"]].items()})
        per_prompt = per_prompt.join(pd.DataFrame({f"{k}_regime": v for k, v in labels.items()}))
        per_prompt.reindex(labels["full"].index).to_csv(Path(args.out) / "counts.csv")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="a workflow config (default config/config.yaml): calibration, regimes, "
                                     "sampling, verify")
    ap.add_argument("--model", help="base model folder (results/{run}/models/base)")
    ap.add_argument("--split", help="split parquet (results/{run}/splits/diagnostic.parquet)")
    ap.add_argument("--prompts", type=int, help="K prompts only (from --offset)")
    ap.add_argument("--offset", type=int, default=0, help="skip the split's first J prompts (shards across GPUs)")
    ap.add_argument("--backend", default="hf", choices=["hf", "vllm"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--batch-size", help="sampling.batch_size override (an integer or auto)")
    ap.add_argument("--rounds", type=lambda s: [int(x) for x in s.split(",")], help="e.g. 16,32,64,128")
    ap.add_argument("--delta", type=float)
    ap.add_argument("--out", help="folder for both runs' samples (full.parquet, adaptive.parquet) and "
                                 "per-prompt n, c and regime of each (counts.csv)")
    ap.add_argument("--simulate", help="per-prompt counts (prompt_id, n, c): simulate instead of sampling")
    ap.add_argument("--replay", help="per-sample outcomes of GPU runs (pool, run, prompt_id, sample_idx, "
                                     "correct): the rule replayed on each pool's full run")
    ap.add_argument("--replicates", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.simulate:
        simulate(args)
    elif args.replay:
        replay(args)
    elif args.model and args.split:
        real(args)
    else:
        ap.error("give --model and --split, or --simulate")


if __name__ == "__main__":
    main()
