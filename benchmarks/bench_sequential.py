"""Sequential evaluation against full evaluation: draws and wall time, and exact coverage.

Real draws (a model folder and a split parquet, as the workflow writes them), both ways in one
process through the evaluate stage's own sample-and-verify path:

    PYTHONPATH=workflow python benchmarks/bench_sequential.py \
        --model results/testbed/models/base --split results/testbed/splits/diagnostic.parquet
    # one GPU: the same with a real model, --config config/smollm2.yaml --device cuda [--batch-size auto]

prints the draws kept and drawn (drawn: with the look-ahead beyond a prompt's stop, cancelled or
dropped), tokens, wall time (model load, sampling, verification) and their ratios, whether
coverage at n and every prompt's solved flag are the full run's, pass@k of both at the ks, and
how many prompts' sequential samples are exactly the first draws of the full run's (all of
them on a CPU; on a GPU as far as the logits agree across batch shapes).

Replayed on full runs' per-sample verdicts, in sample order (prompt_id, sample_idx, correct;
optional pool, run: only run == full is read):

    PYTHONPATH=workflow python benchmarks/bench_sequential.py \
        --replay outcomes.parquet

prints per pool the share of the full run's draws a sequential run keeps (block and round size
from the config, and a sweep of block sizes), and checks that coverage at n is the full run's.

Expected from per-prompt counts (prompt_id, n, c of full runs: the order of a prompt's draws is
exchangeable, so its first success lies at each place with the hypergeometric chance):

    PYTHONPATH=workflow python benchmarks/bench_sequential.py --counts eval/*/counts.parquet
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
SWEEP = (4, 8, 16, 32, 64)


def _settings(config_path: str | None, overrides: dict) -> dict:
    """The evaluate stage's complete settings of the diagnostic split with sequential on."""
    from boundary.core import settings
    from boundary.core.config import load_config

    config = load_config(config_path or ROOT / "config" / "config.yaml")
    config["evaluate"].update({k: v for k, v in overrides.items() if v is not None}, sequential=True)
    return settings.resolve("evaluate", settings.evaluate_key(config, "diagnostic", "base", 0))


def _rule(ev: dict, block: int | None = None):
    from boundary.core.sequential import SequentialRule

    return SequentialRule(block or int(ev["block"]), int(ev["round_size"]), int(ev["n"]))


def expected_draws(n: int, c: int, rule) -> float:
    """E[draws] of a sequential run on a prompt whose full run has c successes in n draws, their
    places uniformly random: P(first success > t) = C(n - t, c) / C(n, c)."""
    from math import comb

    if c == 0:
        return float(rule.cap)
    beyond = lambda t: comb(n - t, c) / comb(n, c)  # noqa: E731
    total, last = 0.0, 0
    for r in rule.rounds:
        total += r * (beyond(last) - beyond(r))
        last = r
    return total


def replay(args) -> None:
    import numpy as np
    import pandas as pd

    from boundary.core.passk import counts_of, estimate
    from boundary.core.sequential import replay as replay_rows
    from boundary.core.sequential import sequential_counts

    ev = _settings(args.config, {"block": args.block, "round_size": args.round_size})["evaluate"]
    table = pd.read_parquet(args.replay)
    if "run" in table:
        table = table[table["run"] == "full"]
    if "pool" not in table:
        table = table.assign(pool=Path(args.replay).stem)
    for pool, rows in table.groupby("pool", sort=False):
        n = int(rows.groupby("prompt_id").size().min())
        rule = _rule({**ev, "n": n})
        full = counts_of(rows)
        seq = sequential_counts(replay_rows(rows, rule), rule.block, rule.cap)
        same = np.array_equal(estimate(seq, [n])[:, 0], estimate(full, [n])[:, 0])
        print(f"== {pool}: {len(full)} prompts, n = {n}, solved {int((full['c'] > 0).sum())}, "
              f"mean p {float((full['c'] / full['n']).mean()):.3f}")
        print(f"{rule.describe()}: {int(seq['n'].sum()):,} of {len(rows):,} draws = "
              f"{seq['n'].sum() / len(rows):.1%}; coverage at n the full run's: {same}")
        sweep = []
        for block in SWEEP:
            r = _rule({**ev, "n": n}, block)
            sweep.append(f"block {block}: {sum(r.draws(g['correct'].to_numpy()) for _, g in rows.groupby('prompt_id')) / len(rows):.1%}")
        print(f"draws by block size (round {rule.round_size}): " + ", ".join(sweep))
        unsolved = int((full["c"] == 0).sum())
        print(f"of which the {unsolved} unsolved prompts' {unsolved * n:,} draws: "
              f"{unsolved * n / len(rows):.1%} of the full run (no rule can stop them before n)")
        # Coverage at n is exact only if each prompt is drawn to its first success (or n): these
        # draws, one at a time with nothing drawn ahead, are the least any exact rule makes.
        least = sum(int(np.argmax(c)) + 1 if c.any() else n
                    for c in (g.sort_values("sample_idx")["correct"].to_numpy().astype(bool)
                              for _, g in rows.groupby("prompt_id")))
        print(f"the least any exact rule draws (each prompt to its first success): {least:,} = "
              f"{least / len(rows):.1%} of the full run")


def from_counts(args) -> None:
    from boundary.core.artifacts import read_table

    ev = _settings(args.config, {"block": args.block, "round_size": args.round_size})["evaluate"]
    for path in args.counts:
        counts = read_table(path, ["prompt_id", "n", "c"])
        n = int(counts["n"].min())
        rule = _rule({**ev, "n": n})
        draws = sum(expected_draws(int(a), int(b), rule) for a, b in zip(counts["n"], counts["c"]))
        print(f"{path}: {len(counts)} prompts, n = {n}, solved {int((counts['c'] > 0).sum())}: expected draws "
              f"{draws / counts['n'].sum():.1%} of the full run's (block {rule.block}, round {rule.round_size})")


def real(args) -> None:
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import numpy as np

    from boundary.core.artifacts import read_table
    from boundary.core.passk import usable_ks
    from boundary.sampling.scoring import sampling_params, scored_samples
    from boundary.stages.evaluate import counts_from_samples
    from boundary.tasks.verify import Verifier

    ev_settings = _settings(args.config, {"block": args.block, "round_size": args.round_size})
    ev, sampling = ev_settings["evaluate"], dict(ev_settings["sampling"])
    if args.batch_size:
        sampling["batch_size"] = args.batch_size if args.batch_size == "auto" else int(args.batch_size)
    split = read_table(args.split, ["prompt_id", "answer"])
    split = split.iloc[:args.prompts] if args.prompts else split
    rule = _rule(ev)
    print(rule.describe())
    params = sampling_params(ev, sampling, ev["seed"], ev["n"])
    extractor = ev_settings["verify"]["extractor"]
    results = {}
    for name, r in (("full", None), ("sequential", rule)):
        verifier = Verifier(timeout=ev_settings["verify"]["timeout"], workers=ev_settings["verify"]["workers"])
        lines = []
        start = time.perf_counter()
        try:
            samples = scored_samples(args.model, split, params, extractor, verifier, log=lines.append, rule=r)
            counts = counts_from_samples(samples, ev["ks"], r)
        finally:
            verifier.close()
        results[name] = (samples, counts, time.perf_counter() - start)
        if args.device == "cuda":  # the next run sizes its seats on free memory, as a fresh stage does
            import gc

            import torch

            gc.collect()
            torch.cuda.empty_cache()
        for line in lines:
            if line.startswith("sampling (") and "model loaded" not in line:
                print(f"{name}: {line}")
    (full, full_counts, t_full), (seq, seq_counts, t_seq) = results["full"], results["sequential"]
    drawn = seq.attrs.get("drawn_completions", len(seq))
    tokens_full, tokens_seq = int(full["n_tokens"].sum()), int(seq["n_tokens"].sum())
    drawn_tokens = seq.attrs.get("drawn_tokens", tokens_seq)
    print(f"prompts: {len(split)} of {args.split}; n = {ev['n']}, seed {ev['seed']}, device {args.device}")
    print(f"draws: sequential {len(seq):,} of {len(full):,} = {len(seq) / len(full):.1%} kept; {drawn:,} drawn = "
          f"{drawn / len(full):.1%} (look-ahead beyond stops included)")
    print(f"tokens: sequential {tokens_seq:,} of {tokens_full:,} = {tokens_seq / tokens_full:.1%} kept; "
          f"{drawn_tokens:,} drawn = {drawn_tokens / tokens_full:.1%}")
    print(f"wall time (load, sampling, verification): full {t_full:.1f} s, sequential {t_seq:.1f} s = "
          f"{t_seq / t_full:.1%}")
    solved_same = bool(((seq_counts["c"] > 0).to_numpy() == (full_counts["c"] > 0).to_numpy()).all())
    print(f"coverage at n: full {float((full_counts['c'] > 0).mean()):.4f}, sequential "
          f"{float((seq_counts['c'] > 0).mean()):.4f}; every prompt's solved flag the same: {solved_same}")
    for k in usable_ks([ev["n"]], ev["ks"]):
        col = f"pass_at_{k}"
        print(f"pass@{k}: full {full_counts[col].mean():.4f}, sequential {seq_counts[col].mean():.4f}")
    prefix = 0
    for pid, rows in seq.groupby("prompt_id", sort=False):
        first = full[full["prompt_id"] == pid].head(len(rows))
        prefix += rows["completion"].tolist() == first["completion"].tolist()
    print(f"exact prefix of the full run's samples: {prefix} of {seq['prompt_id'].nunique()} prompts")
    print(f"ratio: draws {len(seq) / len(full):.3f}, wall time {t_seq / t_full:.3f}; "
          f"mean draws a prompt {np.mean(seq_counts['n']):.1f} of {ev['n']}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="a workflow config (default config/config.yaml): evaluate, sampling, verify")
    ap.add_argument("--model", help="model folder (results/{run}/models/base)")
    ap.add_argument("--split", help="split parquet (results/{run}/splits/diagnostic.parquet)")
    ap.add_argument("--prompts", type=int, help="the split's first K prompts only")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--batch-size", help="sampling.batch_size override (an integer or auto)")
    ap.add_argument("--block", type=int, help="evaluate.block override")
    ap.add_argument("--round-size", type=int, help="evaluate.round_size override")
    ap.add_argument("--replay", help="full runs' per-sample verdicts (prompt_id, sample_idx, correct [, pool, run])")
    ap.add_argument("--counts", nargs="+", help="full runs' per-prompt counts (prompt_id, n, c)")
    args = ap.parse_args(argv)
    if args.replay:
        replay(args)
    elif args.counts:
        from_counts(args)
    elif args.model and args.split:
        real(args)
    else:
        ap.error("give --model and --split, --replay or --counts")


if __name__ == "__main__":
    main()
