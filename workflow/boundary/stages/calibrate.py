"""Frozen-base calibration samples and gate draws.

Calibration: n samples per diagnostic prompt (n = 256 in the paper) with their own seed, so
regime labels never share samples with the evaluation that measures base pass@k. With
calibration.adaptive, each prompt draws a prefix of those n in rounds until its label is settled
(analysis/adaptive.py), and the artifact holds only the drawn samples (a prompt's n is its rows).
With calibration.shards = K > 1 the diagnostic split is scattered over K jobs (prompts I, I+K, ...,
each shard's streams offset as evaluation's are, so K shards draw other, equally valid samples
than one job) and `--gather` joins them in split order: K GPUs at once, or shards made in
different GPU sessions.
Gate draws: G0max frozen-base samples per train prompt for each refresh epoch. The base is
frozen, so every epoch's fresh draw can be cached up front; a mask with a smaller G0 reads
the first G0 draws of each epoch, so one cache serves every gate ablation.
"""

from __future__ import annotations

import pandas as pd

from boundary.core import settings as stage_settings
from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import BoundaryError
from boundary.core.options import ArgumentParser
from boundary.sampling import end_to_end
from boundary.sampling.scoring import gather_shards, sampling_params, scored_samples, shard_of, verifier_for


def _parser(command: str, what: str, out: str, gathers: bool = False) -> ArgumentParser:
    parser = ArgumentParser(prog=f"boundary {command}", description=what)
    parser.add_argument("--model", required=not gathers,
                        help="frozen base model folder" + (" (not with --gather)" if gathers else ""))
    parser.add_argument("--split", required=True, help="split parquet")
    parser.add_argument("--settings", required=True, help="JSON string or file: the stage's settings")
    parser.add_argument("--out", required=True, help=out)
    return parser


def make_parser_calibrate() -> ArgumentParser:
    parser = _parser("calibrate", "Frozen-base calibration samples: n per diagnostic prompt, with their own "
                                  "seed, so regime labels never share samples with the evaluation.",
                     "rollouts/base_calibration.parquet (or with --shard, the shard's file) to write",
                     gathers=True)
    parser.add_argument("--shard", help="I/K: sample only prompts I, I+K, ... (calibration.shards; default: all)")
    parser.add_argument("--gather", nargs="+", metavar="SHARD",
                        help="instead of sampling, join these shard files (every prompt of --split once)")
    return parser


def make_parser_gate_draws() -> ArgumentParser:
    return _parser("gate-draws", "Frozen-base gate draws: G0max samples per train prompt for each refresh "
                                 "epoch; a mask with a smaller G0 reads the first G0 of each epoch.",
                   "rollouts/base_gate.parquet to write")


def main_calibrate(argv=None):
    args = make_parser_calibrate().parse_args(argv)
    s = stage_settings.load("calibrate", args.settings)
    cal = s["calibration"]
    split = read_table(args.split, ["prompt_id", "answer"])
    if args.gather:
        samples = gather_shards(args.gather, ["prompt_id", "sample_idx", "correct"], list(split["prompt_id"]))
        write_table(samples, args.out)
        print(f"calibration: {len(args.gather)} shards joined, {len(split)} prompts, {len(samples):,} samples, "
              f"mean p_base {samples.groupby('prompt_id')['correct'].mean().mean():.3f}")
        return
    if not args.model:
        raise BoundaryError("--model is required unless --gather is given")
    split, offset = shard_of(split, args.shard)
    rule = None
    if cal["adaptive"]:
        from boundary.analysis.adaptive import StoppingRule

        rule = StoppingRule.from_settings(cal, s["regimes"])
        print(rule.describe())
    params = sampling_params(cal, s["sampling"], cal["seed"] + offset, cal["n"])
    with verifier_for(s) as verifier:
        samples = scored_samples(args.model, split, params, s["verify"]["extractor"], verifier,
                                 label=args.split + (f" (shard {args.shard})" if args.shard else ""), rule=rule)
    write_table(samples, args.out)
    per_prompt = samples.groupby("prompt_id")["correct"].agg(["mean", "size"])
    drawn = (f"{len(samples):,} samples ({len(samples) / (len(split) * cal['n']):.1%} of {cal['n']} a prompt; "
             f"{per_prompt['size'].min()}-{per_prompt['size'].max()} a prompt)" if rule else f"{cal['n']} samples")
    print(f"calibration: {len(split)} prompts x {drawn}, mean p_base {per_prompt['mean'].mean():.3f}")
    print(end_to_end("calibration", samples))


def main_gate_draws(argv=None):
    args = make_parser_gate_draws().parse_args(argv)
    s = stage_settings.load("gate-draws", args.settings)
    gate = s["gate"]
    split = read_table(args.split, ["prompt_id", "answer"])
    epochs = []
    with verifier_for(s) as verifier:  # one pool (and its parse cache) for every epoch
        for epoch in range(gate["epochs"]):
            params = sampling_params(gate, s["sampling"], gate["seed"] + epoch, gate["G0"])
            draws = scored_samples(args.model, split, params, s["verify"]["extractor"], verifier,
                                   label=args.split)
            epochs.append(draws.rename(columns={"sample_idx": "draw_idx"}).assign(epoch=epoch))
    draws = pd.concat(epochs, ignore_index=True)
    cols = ["prompt_id", "epoch", "draw_idx", "completion", "answer", "correct", "verified", "n_tokens",
            "finish_reason", "entropy"]
    write_table(draws[cols], args.out)
    print(f"gate draws: {len(split)} prompts x {gate['G0']} draws x {gate['epochs']} epochs")
    print(end_to_end("gate draws", draws))


main, make_parser = main_calibrate, make_parser_calibrate
