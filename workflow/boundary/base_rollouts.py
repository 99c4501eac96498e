"""The `base_rollouts` stage: every frozen-base rollout that a training run's base-sampled
anchors (`anchors.BASE_SAMPLED`: base, support) will train on, drawn before training starts.

The base is frozen, and the trainer's schedule (every step's prompts, every prompt's action)
is a function of the seed, the mask and the settings (schedule.py), so the rollouts that
anchored prompts take from the base are known in advance: G per anchored (step, prompt),
keyed by (step, position in the step's batch). Each refresh epoch's keys, in that order, are
cut into blocks of `base_generation_batch_size`; a block is drawn in one call of the sampling
backend, seeded by (seed, epoch, block). A block's draws are therefore the same whoever draws
it: the K shard jobs of this stage take every K-th block, and a trainer given no pre-drawn
file draws, in place, the blocks that hold its own rows with the same function (hf backend).

Each rollout keeps its token ids and the base's log-probability of every token under
softmax(logits / T): the support anchor reads it, and with vLLM rollouts in training it is the
sampling log-prob TRL's importance correction expects. The prompt's token ids are the ones
TRL's trainer builds (`tokenizer(text=prompts)`); a hash of them travels with each rollout so
the trainer refuses rollouts drawn for other prompt tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.anchors import BASE_SAMPLED
from boundary.errors import BoundaryError
from boundary.schedule import step_weights

COLUMNS = ["epoch", "block", "step", "position", "prompt_id", "prompt_hash", "completion_ids",
           "base_logps", "finish_reason"]


@dataclass(frozen=True)
class Block:
    epoch: int
    index: int
    keys: list  # [(step, position)], position = prompt's place in the batch x G + rollout


def plan(batches: list[list[int]], anchor_weights: np.ndarray, num_generations: int,
         refresh_steps: int, seed: int, block_size: int) -> list[Block]:
    """Every base rollout of a run's schedule, in blocks: refresh epoch by epoch, keys in
    (step, position) order, `block_size` at a time."""
    G, blocks = num_generations, []
    for epoch in range(math.ceil(len(batches) / refresh_steps)):
        keys = []
        for step in range(epoch * refresh_steps, min((epoch + 1) * refresh_steps, len(batches))):
            w = step_weights(anchor_weights, step, batches[step], refresh_steps, seed, base_sampled=True)
            keys += [(step, p * G + j) for p, wi in enumerate(w) if wi > 0 for j in range(G)]
        blocks += [Block(epoch, i // block_size, keys[i:i + block_size])
                   for i in range(0, len(keys), block_size)]
    return blocks


def block_seed(seed: int, *key: int) -> int:
    """The sampling seed of a block, keyed by (seed, epoch, block)."""
    return int(np.random.SeedSequence([seed, *key]).generate_state(1)[0])


def prompt_hash(ids) -> int:
    digest = hashlib.blake2b(np.asarray(ids, dtype=np.int64).tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def tokenize(tokenizer, texts: list[str]) -> list[list[int]]:
    """Prompt token ids exactly as TRL's GRPOTrainer makes them for text prompts."""
    return tokenizer(text=list(texts))["input_ids"]


def hf_sampler(model, tokenizer, temperature: float, top_p: float, max_new: int):
    """`draw(prompts, seed) -> [Completion]` on a loaded model: one block, all rows in flight."""
    from boundary.sampling.hf import generate, stop_and_pad

    stop, pad = stop_and_pad(model, tokenizer)
    return lambda prompts, seed: generate(model, prompts, stop, pad, max_new=max_new, temperature=temperature,
                                          top_p=top_p, batch_size=len(prompts), seed=seed)


def vllm_sampler(model_path, temperature: float, top_p: float, max_new: int):
    from boundary.sampling import vllm

    def draw(prompts, seed):
        out = vllm.generate(model_path, prompts, n=1, max_new=max_new, temperature=temperature,
                            top_p=top_p, seed=seed)
        return [c for (c,) in out]
    return draw


def draw_block(block: Block, draw, prompt_ids: list[list[int]], batches, num_generations: int,
               seed: int) -> dict:
    """{(step, position): (train row, Completion)} for one block; `prompt_ids[row]` are a train
    row's tokens."""
    rows = [batches[s][p // num_generations] for s, p in block.keys]
    completions = draw([prompt_ids[r] for r in rows], block_seed(seed, block.epoch, block.index))
    return dict(zip(block.keys, zip(rows, completions)))


def read_epoch(paths: list, epoch: int) -> pd.DataFrame:
    """The pre-drawn rollouts of one refresh epoch from every shard file."""
    import pyarrow.parquet as pq

    parts = []
    for path in map(Path, paths):
        if not path.is_file():
            raise BoundaryError(f"{path}: base rollouts file not found")
        try:
            missing = set(COLUMNS) - set(pq.read_schema(path).names)
            if missing:
                raise BoundaryError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
            parts.append(pd.read_parquet(path, filters=[("epoch", "==", epoch)]))
        except BoundaryError:
            raise
        except Exception as err:
            raise BoundaryError(f"{path}: cannot be read ({type(err).__name__}: {' '.join(str(err).split())})") from None
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)


def main(argv=None):
    from boundary.artifacts import read_table, write_table
    from boundary.config import load_stage_settings
    from boundary.gate import read_mask
    from boundary.rollouts import parse_shard
    from boundary.schedule import anchor_weights_for
    from boundary.train import action_sampler, make_config

    parser = argparse.ArgumentParser(prog="boundary base-rollouts", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="base model folder (save_pretrained)")
    parser.add_argument("--train-split", required=True, help="splits/train.parquet")
    parser.add_argument("--mask", required=True, help="masks/{mask}.parquet of the method")
    parser.add_argument("--settings", required=True, help="JSON string or file: train + method, as `train` takes")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--backend", default="hf", choices=("hf", "vllm"), help="sampling backend")
    parser.add_argument("--shard", help="I/K: draw only blocks I, I+K, ... (cluster scatter)")
    parser.add_argument("--out", required=True, help="base_rollouts/{method}/seed{S}/{I}.parquet")
    args = parser.parse_args(argv)
    index, count = parse_shard(args.shard)
    settings = load_stage_settings(args.settings)
    cfg = make_config(settings, args.seed, "unused")  # validated exactly as training reads them
    if cfg.anchor not in BASE_SAMPLED or cfg.masked_action != "anchor":
        raise BoundaryError(f"--settings: anchor {cfg.anchor!r} with masked_action {cfg.masked_action!r} "
                            f"draws no base rollouts (needs an anchor of {BASE_SAMPLED}, masked_action anchor)")
    split = read_table(args.train_split, ["prompt_id"], nonempty=True)
    texts = (split["prompt"] if "prompt" in split else split["problem"]).tolist()
    names = split["prompt_id"].tolist()
    epochs = math.ceil(cfg.max_steps / cfg.refresh_steps)
    weights = anchor_weights_for(read_mask(args.mask), names, epochs, args.mask)
    batches = action_sampler(cfg, weights).schedule
    size = cfg.base_generation_batch_size or cfg.generation_batch_size
    blocks = plan(batches, weights, cfg.num_generations, cfg.refresh_steps, args.seed, size)[index::count]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    prompt_ids = tokenize(tokenizer, texts)
    if args.backend == "vllm":
        draw = vllm_sampler(args.model, cfg.temperature, cfg.top_p, cfg.max_completion_length)
    else:
        from boundary.models import load_model

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
