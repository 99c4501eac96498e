"""n-sample evaluation of a policy on a split -> per-completion samples + per-prompt counts.

counts.parquet, one row per prompt: n, c (verifier-positive samples), pass_at_{k} for each
configured k <= n (unbiased estimator), unique_positives (distinct normalized answers among
the positives), answers (that set, sorted), entropy (mean over samples of each completion's
mean token entropy), modal_answer and modal_share (the most common non-empty extracted answer
over all n samples and the share of the n that give it; "" and 0 when none has an answer).

With evaluate.sequential, each prompt draws a block, then rounds until its first success, at
most n (core/sequential.py); samples.parquet holds the draws made (column in_block: the
sample is in the block) and counts.parquet adds block_n, block_c, first_success and cap, with
n and c the draws made and their successes and the readouts of every sample (entropy, answers,
modal) the block's. pass_at_{k} is `passk.estimate` of each row at every configured k <= n.
"""

from __future__ import annotations

import pandas as pd

from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import BoundaryError
from boundary.core.options import ArgumentParser, description
from boundary.core.passk import SEQUENTIAL_COLUMNS, add_pass_at_k, counts_of
from boundary.core.sequential import SEQUENTIAL_MARK, SequentialRule, sequential_counts
from boundary.sampling import end_to_end
from boundary.sampling.scoring import gather_shards, sampling_params, scored_samples, shard_of, verifier_for

# The samples artifact: one row per scored completion.
SCORED_COLUMNS = ["prompt_id", "sample_idx", "completion", "answer", "correct", "entropy"]


READOUTS = ["entropy", "answers", "unique_positives", "modal_answer", "modal_share"]


def counts_from_samples(samples: pd.DataFrame, ks, rule: SequentialRule | None = None) -> pd.DataFrame:
    """The counts artifact: per prompt n, c, mean entropy, its positives' distinct answers and
    their number, its modal answer and share, and pass@k for every k the rows allow; with a
    sequential `rule`, the sequential columns too (the readouts then the block's)."""
    if rule is None:
        counts = counts_of(samples)[["prompt_id", "n", "c"] + READOUTS]
    else:
        counts = sequential_counts(samples, rule.block, rule.cap)[["prompt_id", "n", "c", *READOUTS,
                                                                    *SEQUENTIAL_COLUMNS]]
    return add_pass_at_k(counts, ks)


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary evaluate", description=description(__doc__))
    parser.add_argument("--model", help="policy folder (save_pretrained; not with --gather)")
    parser.add_argument("--split", help="split parquet (not with --gather)")
    parser.add_argument("--settings", required=True, help="JSON string or file: the stage's settings")
    parser.add_argument("--shard", help="I/K: sample only rows I, I+K, ... (cluster scatter; default: all)")
    parser.add_argument("--gather", nargs="+", metavar="SHARD",
                        help="instead of sampling, merge these shard sample files")
    parser.add_argument("--samples", required=True, help="samples.parquet to write")
    parser.add_argument("--counts", help="counts.parquet to write (not with --shard)")
    return parser


def main(argv=None):
    from boundary.core import settings as stage_settings

    args = make_parser().parse_args(argv)
    s = stage_settings.load("evaluate", args.settings)
    ev = s["evaluate"]
    rule = SequentialRule.from_settings(ev) if ev["sequential"] else None
    columns = SCORED_COLUMNS + ([SEQUENTIAL_MARK] if rule else [])
    if args.gather:
        samples = gather_shards(args.gather, columns)
    else:
        if not (args.model and args.split):
            raise BoundaryError("--model and --split are required unless --gather is given")
        split, offset = shard_of(read_table(args.split, ["prompt_id", "answer"]), args.shard)
        params = sampling_params(ev, s["sampling"], ev["seed"] + offset, ev["n"])
        if rule:
            print(rule.describe())
        with verifier_for(s) as verifier:
            samples = scored_samples(args.model, split, params, s["verify"]["extractor"], verifier,
                                     label=args.split, rule=rule)
        if rule:
            drawn = samples.attrs.get("drawn_completions", len(samples))
            samples = samples.assign(**{SEQUENTIAL_MARK: samples["sample_idx"] < rule.block})
            print(f"evaluate (sequential): {len(samples):,} draws kept of {len(split) * ev['n']:,} a full run "
                  f"makes ({len(samples) / (len(split) * ev['n']):.1%}); {drawn:,} drawn with look-ahead")
    write_table(samples, args.samples)
    if args.counts:
        counts = counts_from_samples(samples, ev["ks"], rule)
        write_table(counts, args.counts)
        print(f"evaluate: {len(counts)} prompts, pass@1 {counts['pass_at_1'].mean():.3f}, "
              f"pass@{ev['n']} {(counts['c'] > 0).mean():.3f}" + (f", {counts['n'].sum():,} draws" if rule else ""))
    if not args.gather:
        print(end_to_end("evaluate", samples))
