"""The `base-rollouts` stage: the frozen-base rollouts of a run's base-sampled anchors, drawn before training."""

from __future__ import annotations

import numpy as np
import pandas as pd

from boundary.core import schema
from boundary.core import settings as stage_settings
from boundary.core.errors import BoundaryError
from boundary.core.options import ArgumentParser, description
from boundary.training.anchors import BASE_SAMPLED
from boundary.training.base_rollouts import (
    COLUMNS,
    draw_block,
    hf_sampler,
    plan_blocks,
    prompt_hash,
    tokenize,
    vllm_sampler,
)


def make_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="boundary base-rollouts", description=description(__doc__))
    parser.add_argument("--model", required=True, help="base model folder (save_pretrained)")
    parser.add_argument("--train-split", required=True, help="splits/train.parquet")
    parser.add_argument("--mask", required=True, help="masks/{mask}.parquet of the method")
    parser.add_argument("--settings", required=True, help="JSON string or file: train + method, as `train` takes")
    parser.add_argument("--seed", type=int, required=True, help="the training run's seed")
    parser.add_argument("--backend", default=stage_settings.defaults("sampling")["backend"],
                        choices=schema.allowed("sampling", "backend"), help="sampling backend")
    parser.add_argument("--shard", help="I/K: draw only blocks I, I+K, ... (cluster scatter; default: all)")
    parser.add_argument("--out", required=True, help="base_rollouts/{method}/seed{S}/{I}.parquet")
    return parser


def main(argv=None):
    args = make_parser().parse_args(argv)  # first: --help and a bad option import nothing of torch or TRL
    from boundary.core.artifacts import read_table, write_table
    from boundary.sampling.scoring import parse_shard
    from boundary.training.gate import read_mask
    from boundary.training.schedule import action_sampler, anchor_weights_for
    from boundary.training.trainer_config import make_config

    index, count = parse_shard(args.shard)
    cfg = make_config(stage_settings.load("base-rollouts", args.settings), args.seed, "unused")  # as training reads them
    if cfg.anchor not in BASE_SAMPLED or not stage_settings.anchoring(True, cfg.masked_action):  # --mask: required
        raise BoundaryError(f"--settings: anchor {cfg.anchor!r} with masked_action {cfg.masked_action!r} "
                            f"draws no base rollouts (needs an anchor of {BASE_SAMPLED}, masked_action anchor)")
    split = read_table(args.train_split, ["prompt_id"], nonempty=True)
    texts = (split["prompt"] if "prompt" in split else split["problem"]).tolist()
    names = split["prompt_id"].tolist()
    epochs = stage_settings.refresh_epochs(cfg.max_steps, cfg.refresh_steps)
    weights = anchor_weights_for(read_mask(args.mask), names, epochs, args.mask)
    batches = action_sampler(cfg, weights).schedule
    size = cfg.base_generation_batch_size or cfg.generation_batch_size
    blocks = plan_blocks(batches, weights, cfg.num_generations, cfg.refresh_steps, args.seed, size)[index::count]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompt_ids = tokenize(tokenizer, texts)
    if args.backend == "vllm":
        draw = vllm_sampler(args.model, cfg.temperature, cfg.top_p, cfg.max_completion_length)
    else:
        from boundary.sampling.models import load_model

        model, _ = load_model(args.model)
        draw = hf_sampler(model, tokenizer, cfg.temperature, cfg.top_p, cfg.max_completion_length)
    hashes = [prompt_hash(ids) for ids in prompt_ids]
    records = []
    for n, block in enumerate(blocks, 1):
        drawn = draw_block(block, draw, prompt_ids, batches, cfg.num_generations, args.seed)
        records += [(block.epoch, block.index, step, pos, names[row], hashes[row],
                     np.asarray(c.tokens, dtype=np.int32), np.asarray(c.logps, dtype=np.float32),
                     c.finish_reason) for (step, pos), (row, c) in drawn.items()]
        print(f"base-rollouts: block {n}/{len(blocks)} (epoch {block.epoch}): {len(block.keys)} rollouts", flush=True)
    table = pd.DataFrame(records, columns=COLUMNS).sort_values(["step", "position"], ignore_index=True)
    write_table(table, args.out)
