"""Base rollouts: every frozen-base rollout that a training run's base-sampled anchors
(`anchors.BASE_SAMPLED`: base, support) train on, planned, drawn and read here; the
`base_rollouts` stage (stages/base_rollouts.py) draws them before training starts and the
trainer takes them through one `BaseRolloutSupply`.

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

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from boundary.core.errors import BoundaryError
from boundary.core.settings import refresh_epochs

COLUMNS = ["epoch", "block", "step", "position", "prompt_id", "prompt_hash", "completion_ids",
           "base_logps", "finish_reason"]


@dataclass(frozen=True)
class Block:
    epoch: int
    index: int
    keys: list  # [(step, position)], position = prompt's place in the batch x G + rollout


def plan_blocks(batches: list[list[int]], anchor_weights: np.ndarray, num_generations: int,
         refresh_steps: int, seed: int, block_size: int) -> list[Block]:
    """Every base rollout of a run's schedule, in blocks: refresh epoch by epoch, keys in
    (step, position) order, `block_size` at a time."""
    from boundary.training.schedule import step_weights  # here: schedule.py imports torch, the stage's parser must not

    G, blocks = num_generations, []
    for epoch in range(refresh_epochs(len(batches), refresh_steps)):  # one batch a step
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




class BaseRolloutSupply:
    """The frozen-base rollouts of one training process's anchored rows, a refresh epoch at a
    time: read from the base_rollouts stage's files, or, given none, drawn in place (the blocks
    that hold this process's rows, with the stage's function and seeds); a row off the schedule
    is drawn on the spot. The trainer asks `rollouts(step, positions)` and `on_demand(...)`.

    `sampler()` gives a `draw(prompts, seed)` on the frozen base (None: no base loaded, so
    nothing can be drawn here); `prompt_ids()` every train prompt's token ids.
    """

    def __init__(self, files, num_generations: int, seed: int, refresh_steps: int, sampler, prompt_ids):
        self.files = list(files or [])
        self.blocks: list[Block] = []  # the run's base rollouts, as `plan_blocks` cuts them
        self.batches: list[list[int]] | None = None  # every step's prompt rows
        self.num_generations, self.seed, self.refresh_steps = num_generations, seed, refresh_steps
        self._sampler, self._prompt_ids = sampler, prompt_ids
        self._tokens: tuple | None = None  # (ids, hashes) of every train prompt, drawn in place
        self._epoch: tuple[int, dict] | None = None  # (epoch, {(step, position): rollout})

    def schedule(self, batches: list[list[int]], blocks: list[Block]) -> None:
        """The run's schedule, once the trainer's sampler has made it."""
        self.batches, self.blocks = batches, blocks

    def source(self) -> str:
        return ", ".join(map(str, self.files)) or "base rollouts drawn in place"

    def rollouts(self, step: int, positions: range) -> dict:
        """{(step, position): (ids, base log-probs, prompt hash)} of `positions` in every step
        of `step`'s refresh epoch, read or drawn once per epoch."""
        epoch = step // self.refresh_steps
        if self._epoch is not None and self._epoch[0] == epoch:
            return self._epoch[1]
        drawn: dict = {}
        if self.files:
            for row in read_epoch(self.files, epoch).itertuples(index=False):
                if row.position in positions:
                    drawn[row.step, row.position] = (row.completion_ids, row.base_logps, row.prompt_hash)
        else:
            if self._tokens is None:
                ids = self._prompt_ids()
                self._tokens = (ids, [prompt_hash(p) for p in ids])
            ids, hashes = self._tokens
            draw = self._draw()
            for block in self.blocks:
                if block.epoch != epoch or not any(p in positions for _, p in block.keys):
                    continue
                for (s, p), (row, c) in draw_block(block, draw, ids, self.batches, self.num_generations,
                                                   self.seed).items():
                    if p in positions:
                        drawn[s, p] = (c.tokens, np.asarray(c.logps, dtype=np.float32), hashes[row])
        self._epoch = (epoch, drawn)
        return drawn

    def on_demand(self, prompt_ids: list, step: int, process: int) -> list:
        """Base rollouts for rows off the schedule, seeded by step and process (four entropy
        words: never a block's (seed, epoch, block))."""
        return self._draw(step, process)(prompt_ids, block_seed(self.seed, step, process, 1))

    def _draw(self, step: int | None = None, process: int = 0):
        draw = self._sampler()
        if draw is None:
            where = f"step {step + 1} (process {process})" if step is not None else "this epoch"
            raise BoundaryError(f"{self.source()}: no base rollouts for {where}: drawn for another schedule?")
        return draw
