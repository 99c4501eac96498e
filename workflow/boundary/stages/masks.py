"""The `masks` stage: a per-prompt action mask (PBA gate, its ablations, soft, random, oracle)."""

from __future__ import annotations

from boundary.core.artifacts import read_table, write_table
from boundary.core.options import ArgumentParser, description
from boundary.training.gate import KINDS, build_mask, random_fraction, summary


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary masks", description=description(__doc__))
    parser.add_argument("--kind", required=True, choices=KINDS, help="the mask's kind")
    parser.add_argument("--gate-draws", help="rollouts/base_gate.parquet (gate and soft kinds)")
    parser.add_argument("--train-regimes", help="regimes/train_regimes.parquet (oracle)")
    parser.add_argument("--train-split", required=True, help="splits/train.parquet")
    parser.add_argument("--settings", required=True, help="JSON string or file: the mask's settings")
    parser.add_argument("--out", required=True, help="masks/{mask}.parquet")
    return parser


def main(argv=None):
    from boundary.core import settings as stage_settings
    from boundary.core.errors import BoundaryError

    args = make_parser().parse_args(argv)
    given = stage_settings.read(args.settings)
    if given.get("kind", args.kind) != args.kind:
        raise BoundaryError(f"--settings: kind {given['kind']!r} is not --kind {args.kind!r}")
    settings = stage_settings.resolve("masks", {**given, "kind": args.kind})
    split = read_table(args.train_split, ["prompt_id"])
    draws = (read_table(args.gate_draws, ["prompt_id", "epoch", "draw_idx", "correct"])
             if args.gate_draws else None)
    regimes = (read_table(args.train_regimes, ["prompt_id", "regime"])
               if args.train_regimes else None)
    mask = build_mask(args.kind, settings, draws, split["prompt_id"], regimes)
    write_table(mask, args.out)
    share = (f"; the share {settings['share_of']} anchors, pooled over its epochs: "
             f"{random_fraction(settings, draws, split['prompt_id']):.4f}" if settings.get("share_of") else "")
    print(f"mask {args.kind}: {mask['prompt_id'].nunique()} prompts; {summary(mask)}{share}")
