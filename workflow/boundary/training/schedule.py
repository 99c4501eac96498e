"""The training schedule, known before training starts: every step's prompts and every
prompt's action.

Both are pure functions of the seed, the mask and the train settings, so the trainer, a
resumed job, every trainer process and the `base_rollouts` stage all compute the same ones.
A step's prompts come from `ActionSampler`; a prompt's anchor weight in a step from
`step_weights` (the mask's weight in the step's refresh epoch; a soft weight is realised as a
Bernoulli(w) hard action when rollouts come from one model per prompt).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from torch.utils.data import Sampler

from boundary.core.errors import BoundaryError


def anchor_weights_for(mask: pd.DataFrame, prompt_ids: list[str], epochs: int, path) -> np.ndarray:
    """[epochs, n_prompts] anchor weights from a mask table; every cell must be present."""
    table = mask.pivot_table(index="epoch", columns="prompt_id", values="weight", aggfunc="first")
    missing = [p for p in prompt_ids if p not in table.columns]
    if missing:
        raise BoundaryError(f"{path}: no mask rows for train prompt {missing[0]}")
    if len(table) < epochs or list(table.index[:epochs]) != list(range(epochs)):
        raise BoundaryError(f"{path}: mask has epochs {list(table.index)}, training needs 0..{epochs - 1}")
    weights = table.loc[list(range(epochs)), prompt_ids].to_numpy(dtype=float)
    if np.isnan(weights).any():
        raise BoundaryError(f"{path}: missing weight for some (prompt, epoch)")
    return weights


class ActionSampler(Sampler):
    """Prompt indices for each step's generation batch, each repeated G times, as TRL's
    RepeatSampler lays them out, drawing only prompts that the step's epoch does not drop.

    Batch b is a pure function of (seed, b): passes over the eligible prompts in fresh random
    orders, so a resumed run (which skips the first batches) sees the batches it would have.
    """

    def __init__(self, eligible: np.ndarray, prompts_per_step: int, num_generations: int,
                 repeat_count: int, steps: int, refresh_steps: int, seed: int):
        self.eligible = eligible  # bool [epochs, n_prompts]
        self.P, self.G, self.repeat, self.steps = prompts_per_step, num_generations, repeat_count, steps
        self.refresh_steps, self.seed = refresh_steps, seed
        short = np.flatnonzero(eligible.sum(1) < prompts_per_step)
        if len(short):
            raise BoundaryError(f"mask epoch {short[0]}: fewer than prompts_per_step = "
                                f"{prompts_per_step} prompts left to sample")
        self.schedule = list(self._draw_batches())  # every step's prompts, drawn once

    def batches(self):
        return iter(self.schedule)

    def _draw_batches(self):
        rng = np.random.default_rng(self.seed)
        queue: list[int] = []
        for step in range(self.steps):
            pool = self.eligible[min(step // self.refresh_steps, len(self.eligible) - 1)]
            queue = [i for i in queue if pool[i]]  # a refresh removes newly dropped prompts
            chosen: list[int] = []
            while len(chosen) < self.P:
                if not queue:
                    queue = [i for i in rng.permutation(len(pool)).tolist() if pool[i]]
                i = queue.pop(0)
                if i in chosen:  # a pass boundary may repeat a prompt: keep it for later
                    queue.append(i)
                    continue
                chosen.append(i)
            yield chosen

    def __iter__(self):
        for chosen in self.batches():
            for _ in range(self.repeat):
                for i in chosen:
                    yield from [i] * self.G

    def __len__(self):
        return self.steps * self.repeat * self.P * self.G


def eligible_prompts(anchor_weights: np.ndarray, masked_action: str) -> np.ndarray:
    """[epochs, n_prompts] bool: the prompts the sampler may draw (drop removes anchored ones)."""
    if masked_action == "drop":
        return anchor_weights < 0.5  # the mask's action column: anchor -> drop
    return np.ones_like(anchor_weights, dtype=bool)


def action_sampler(cfg, anchor_weights: np.ndarray) -> ActionSampler:
    """The run's sampler from its settings (a PBAConfig): every step's prompts, as the trainer
    and the `base_rollouts` stage both draw them."""
    return ActionSampler(eligible_prompts(anchor_weights, cfg.masked_action),
                         cfg.generation_batch_size // cfg.num_generations, cfg.num_generations,
                         cfg.num_iterations * cfg.steps_per_generation, cfg.max_steps,
                         cfg.refresh_steps, cfg.seed)


def step_weights(anchor_weights: np.ndarray, step: int, rows, refresh_steps: int, seed: int,
                 base_sampled: bool) -> np.ndarray:
    """Anchor weight of each prompt row in `step`: the mask's weight in the step's refresh
    epoch. With a base-sampled anchor a prompt's rollouts come from one model, so a soft weight
    is realised as Bernoulli(w), keyed by (seed, step, row) so every process agrees."""
    epoch = min(step // refresh_steps, len(anchor_weights) - 1)
    w = anchor_weights[epoch, rows]
    if base_sampled:
        u = [np.random.default_rng([seed, step, r]).random() for r in rows]
        w = (np.asarray(u) < w).astype(float)
    return w
