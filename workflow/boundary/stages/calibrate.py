"""Frozen-base calibration samples and gate draws.

Calibration: n samples per diagnostic prompt (n = 256 in the paper) with their own seed, so
regime labels never share samples with the evaluation that measures base pass@k. With
calibration.adaptive, each prompt draws a prefix of those n in rounds until its label is settled
(analysis/adaptive.py), and the artifact holds only the drawn samples (a prompt's n is its rows).
With calibration.extend, a prompt with at most calibration.extend_fragile successes in its n
draws is drawn on to extend_to (analysis/adaptive.py's `Extension`), so its label reads
p_base from all of them: hf in the same decode loop (a second round, sample k the unextended
run's sample k), vllm in one more engine call on those prompts at its own seed.
With calibration.shards = K > 1 the diagnostic split is scattered over K jobs (prompts I, I+K, ...,
each shard's streams offset as evaluation's are, so K shards draw other, equally valid samples
than one job) and `--gather` joins them in split order: K GPUs at once, or shards made in
different GPU sessions.
Gate draws: G0max frozen-base samples per train prompt for each refresh epoch. The base is
frozen, so every epoch's fresh draw can be cached up front; a mask with a smaller G0 reads
the first G0 draws of each epoch, so one cache serves every gate ablation.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from boundary.core import settings as stage_settings
from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import BoundaryError
from boundary.core.options import ArgumentParser
from boundary.sampling import end_to_end
from boundary.sampling.scoring import gather_shards, sampling_params, scored_samples, shard_of, verifier_for

# The extension's second call (vllm) samples at the calibration's seed plus this prime: draws of
# their own, apart from the first n (and from shard offsets, multiples of 7919).
EXTEND_SEED_STRIDE = 130363


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
    rule = extension = None
    if cal["extend"]:
        from boundary.analysis.adaptive import Extension

        extension = Extension(cal["n"], cal["extend_to"], cal["extend_fragile"])
        print(extension.describe())
        if s["sampling"]["backend"] == "hf":
            rule = extension
    if cal["adaptive"]:
        from boundary.analysis.adaptive import StoppingRule

        rule = StoppingRule.from_settings(cal, s["regimes"])
        print(rule.describe())
    params = sampling_params(cal, s["sampling"], cal["seed"] + offset, cal["n"])
    with verifier_for(s) as verifier:
        where = args.split + (f" (shard {args.shard})" if args.shard else "")
        samples = scored_samples(args.model, split, params if rule is None else replace(params, n=rule.rounds[-1]),
                                 s["verify"]["extractor"], verifier, label=where, rule=rule)
        if extension is not None and rule is None:
            samples = _extend_apart(samples, split, extension, cal, s, args.model, where, offset, verifier)
    write_table(samples, args.out)
    per_prompt = samples.groupby("prompt_id")["correct"].agg(["mean", "size"])
    drawn = (f"{len(samples):,} samples ({len(samples) / (len(split) * cal['n']):.1%} of {cal['n']} a prompt; "
             f"{per_prompt['size'].min()}-{per_prompt['size'].max()} a prompt)" if rule or extension
             else f"{cal['n']} samples")
    print(f"calibration: {len(split)} prompts x {drawn}, mean p_base {per_prompt['mean'].mean():.3f}")
    print(end_to_end("calibration", samples))


def _extend_apart(samples, split, extension, cal, s, model, where, offset, verifier):
    """The extension as one more sampling call (vllm: one engine start, not a round per prompt):
    the fragile prompts' draws n..extend_to-1 at their own seed, after the first n."""
    successes = samples.groupby("prompt_id")["correct"].sum()
    fragile = split[split["prompt_id"].map(successes).le(extension.fragile).to_numpy()]
    if not len(fragile):
        return samples
    params = sampling_params(cal, s["sampling"], cal["seed"] + offset + EXTEND_SEED_STRIDE, extension.to - extension.n)
    more = scored_samples(model, fragile, params, s["verify"]["extractor"], verifier, label=f"{where} (extension)")
    more["sample_idx"] += extension.n
    order = {pid: i for i, pid in enumerate(split["prompt_id"])}
    out = pd.concat([samples, more], ignore_index=True)
    return out.iloc[np.lexsort((out["sample_idx"], out["prompt_id"].map(order)))].reset_index(drop=True)


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
