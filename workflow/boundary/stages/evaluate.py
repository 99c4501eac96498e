"""n-sample evaluation of a policy on a split -> per-completion samples + per-prompt counts.

counts.parquet, one row per prompt: n, c (verifier-positive samples), pass_at_{k} for each
configured k <= n (unbiased estimator), unique_positives (distinct normalized answers among
the positives), answers (that set, sorted), entropy (mean over samples of each completion's
mean token entropy), modal_answer and modal_share (the most common non-empty extracted answer
over all n samples and the share of the n that give it; "" and 0 when none has an answer).
"""

from __future__ import annotations

import pandas as pd

from boundary.core.artifacts import read_table, write_table
from boundary.core.errors import BoundaryError
from boundary.core.options import ArgumentParser, description
from boundary.core.passk import add_pass_at_k, counts_of
from boundary.sampling import end_to_end
from boundary.sampling.scoring import gather_shards, sampling_params, scored_samples, shard_of, verifier_for

# The samples artifact: one row per scored completion.
SCORED_COLUMNS = ["prompt_id", "sample_idx", "completion", "answer", "correct", "entropy"]


def counts_from_samples(samples: pd.DataFrame, ks) -> pd.DataFrame:
    """The counts artifact: per prompt n, c, mean entropy, its positives' distinct answers and
    their number, its modal answer and share, and pass@k for every k the smallest n allows."""
    counts = counts_of(samples)[["prompt_id", "n", "c", "entropy", "answers", "unique_positives", "modal_answer", "modal_share"]]
    return add_pass_at_k(counts, [k for k in ks if k <= counts["n"].min()])


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary evaluate", description=description(__doc__))
    parser.add_argument("--model", help="policy folder (save_pretrained: a model, or a LoRA adapter; not with --gather)")
    parser.add_argument("--base", help="the base model folder a LoRA adapter policy is merged into (read only "
                                       "when --model is an adapter folder)")
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
    if args.gather:
        samples = gather_shards(args.gather, SCORED_COLUMNS)
    else:
        if not (args.model and args.split):
            raise BoundaryError("--model and --split are required unless --gather is given")
        split, offset = shard_of(read_table(args.split, ["prompt_id", "answer"]), args.shard)
        params = sampling_params(ev, s["sampling"], ev["seed"] + offset, ev["n"])
        with verifier_for(s) as verifier:
            samples = scored_samples(args.model, split, params, s["verify"]["extractor"], verifier,
                                     label=args.split, base=args.base)
    write_table(samples, args.samples)
    if args.counts:
        counts = counts_from_samples(samples, ev["ks"])
        write_table(counts, args.counts)
        print(f"evaluate: {len(counts)} prompts, pass@1 {counts['pass_at_1'].mean():.3f}, "
              f"pass@{ev['n']} {(counts['c'] > 0).mean():.3f}")
    if not args.gather:
        print(end_to_end("evaluate", samples))
