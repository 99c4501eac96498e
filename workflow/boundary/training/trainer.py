"""PBATrainer: TRL's GRPOTrainer with per-prompt actions (sharpen / anchor / drop).


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
the spot. Policy rollouts come from TRL: transformers `generate`, or vLLM
(`rollout_engine: vllm`, colocated: one engine per process, weights synced in buckets and
checked, rollout_engine.py; or TRL's server mode).

Several processes (one per GPU, see launch.py) each generate a contiguous slice of every
step's batch, as accelerate shards the sampler, and take the base rollouts of their own rows.
Per-prompt actions are a function of (seed, step, prompt), so every process agrees on them;
metrics are sums and counts gathered from every process; one process writes.

TRL's loop is used as is: actions enter through `_generate_and_score_completions` (rollout
source, anchor weights, frozen-base log-probs only for the rows that need them), the loss
through `_compute_loss` (the surrogate with advantages scaled by 1 - w, plus the anchor on the
same forward pass), and drop through the train sampler.

Pinned to TRL 1.16.0 (trl_pin.PINNED; importing this module refuses another release in one
line). Overridden hooks, and why:
- `_get_train_sampler`: the run's schedule (schedule.ActionSampler): dropped prompts are never
  sampled, and every step's prompts are known ahead for the base rollouts;
- `_generate_and_score_completions`: per-row anchor weights and rollout source, frozen-base
  log-probs for the rows whose terms read them (k1 terms: on the steps `kl_value_every` names;
  on a step `log_base_kl` logs, every policy rollout), the field's advantages;
- `_generate_single_turn`: anchored rows of a base-sampled anchor take frozen-base rollouts
  from the supply (base_rollouts.BaseRolloutSupply) instead of the policy's;
- `_calculate_rewards`: each of this process's rows keeps its reward, in its own input row
  (REWARD), for the methods' advantages;
- `_get_per_token_logps_and_entropies`: keeps the surrogate's log-probs for the anchor;
- `_compute_loss`: the surrogate with advantages scaled by 1 - w, plus the anchor and the
  global KL on the same forward pass; with `log_base_kl`, the logged KL to the base from the
  same forward's log-probs (kl_base_k1, kl_base_k3).
Not a hook: the colocated vLLM engine's `sync_weights` is replaced after TRL builds it
(rollout_engine.install: bucketed, with the log-prob check), and `vllm_generation.LLM` is
swapped while TRL builds the engine (rollout_engine.engine_overrides: TRL takes no engine
arguments).
Per-row values ride in the batch dict TRL passes from `_generate_and_score_completions` to
`_compute_loss` (anchor_weight, from_base, base_per_token_logps, reward, ...), and a row's reward
in its input row. Three stay on self within one TRL call, whose inner hook gets no batch:
`_from_base` and `_drawn_logps` into and out of `_generate_single_turn` (token ids only), and
`_surrogate_logps` out of `_get_per_token_logps_and_entropies` inside TRL's `_compute_loss`.
One spans a step's micro-batches: `_base_kl_sums`, log_base_kl's token sums, logged at the last.
The config is trainer_config.PBAConfig; the `boundary train` stage is stages/train.py.
"""

from __future__ import annotations

# Before TRL: another TRL release is refused in one line (the hooks below are 1.16.0's).
from boundary.training import trl_pin  # noqa: F401

# isort: split
import contextlib
import copy
import functools
import time

import numpy as np
import pandas as pd
import torch
from torch.nn.utils.rnn import pad_sequence
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from boundary.core import settings as stage_settings
from boundary.core.errors import BoundaryError
from boundary.training import base_rollouts, lora, objectives, rollout_engine, sharding
from boundary.training.anchors import (
    ANCHORS,
    BASE_SAMPLED,
    BASE_SCORED,
    base_cross_entropy,
    base_forward_kl,
    base_js,
    per_token_kl,
    policy_kl,
    support_floor,
)
from boundary.training.base_rollouts import BaseRolloutSupply, tokenize
from boundary.training.schedule import action_sampler, step_weights
from boundary.training.trainer_config import PBAConfig

# Metrics of a generation batch, as (sum, count) over every process's rows; summed ones are totals.
GENERATION_METRICS = ("protected_fraction", "reward_policy", "base_rollouts_on_demand",
                      "base_draw_seconds", "generate_seconds")
SUMMED = {"base_rollouts_on_demand"}
# log_base_kl: KL(pi || pi_base) on every policy rollout, logged as kl_base_<estimator>.
BASE_KL_ESTIMATORS = ("k1", "k3")
# A row's reward, carried in its input row from `_calculate_rewards` (TRL hands it the rows, and
# returns only the gathered table) back to `_generate_and_score_completions`.
REWARD = "boundary_reward"


def needs_frozen_base(cfg: PBAConfig, anchoring: bool, pre_drawn: bool) -> bool:
    """Whether training runs the frozen base: for the global KL, the logged KL to the base
    (log_base_kl), the policy anchor's scores, and base-sampled anchors' rollouts unless they
    were drawn ahead (with their log-probs)."""
    return (cfg.beta_kl > 0 or cfg.log_base_kl
            or (anchoring and (cfg.anchor not in BASE_SAMPLED or not pre_drawn)))


def length_groups(lengths: list[int], prefix: int, budget: int) -> list[list[int]]:
    """Rows grouped for no-grad forwards cut to each group's longest completion: longest first,
    a group at most `budget` tokens (its rows x (prefix + its longest)). Equal lengths give the
    rows in order, budget // (prefix + length) at a time: the uncut micro-batches."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):  # stable: ties keep their order
        if groups and (len(groups[-1]) + 1) * (prefix + max(1, lengths[groups[-1][0]])) <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


@functools.cache
def restorable_on_cpu_processes() -> None:
    """Let torch restore tensors saved to an indexed CPU device ("cpu:0"). transformers before
    5.19 resumes a run of several CPU processes with map_location = the process's device, which
    torch (2.13 too) cannot restore: the resume would die in loading the optimizer state."""
    def restore(obj, location: str):
        return obj if location.startswith("cpu:") else None
    torch.serialization.register_package(11, lambda obj: None, restore)


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
        anchoring = stage_settings.anchoring(self.anchor_weights.any(), cfg.masked_action)
        if anchoring and cfg.anchor is None:
            raise BoundaryError(f"anchor: required when a mask anchors prompts (one of {ANCHORS})")
        if cfg.use_vllm and anchoring and cfg.anchor in BASE_SAMPLED and not base_rollouts:
            raise BoundaryError(f"rollout_engine: vllm: anchor {cfg.anchor} reads pre-drawn base rollouts "
                                "(the base_rollouts stage; boundary train --base-rollouts)")
        sharding.check_method(cfg.sharding, cfg.anchor, anchoring, bool(base_rollouts), BASE_SAMPLED)
        # The frozen base is loaded only when some term needs it; under LoRA it is the policy
        # with its adapter switched off (lora.base_of), never a copy.
        peft = lora.peft_config(cfg.lora)
        needs_base = needs_frozen_base(cfg, anchoring, bool(base_rollouts)) and peft is None
        if peft is not None:
            if base_model is not None:
                raise ValueError("base_model: under LoRA the base is the policy with its adapter off")
            if cfg.bf16:  # the base is frozen: bf16 as the frozen copy is; the adapters stay fp32
                model.to(torch.bfloat16)
            kwargs["peft_config"] = peft
        if needs_base and base_model is None:
            base_model = copy.deepcopy(model)  # before TRL patches the policy
        if torch.cuda.is_available():
            # cuDNN attention builds a plan for every new (batch, length) shape: ~10 s for one
            # generate call at an unseen batch size on an H200, and the base anchor changes the
            # policy's generate batch every step. Flash / memory-efficient attention do not.
            torch.backends.cuda.enable_cudnn_sdp(False)
        colocated = cfg.use_vllm and cfg.vllm_mode == "colocate"
        with (rollout_engine.engine_overrides(cfg.vllm_max_num_batched_tokens, cfg.vllm_load_format,
                                              cfg.vllm_cudagraph_capture_size)
              if colocated else contextlib.nullcontext()):
            super().__init__(model, *args, **kwargs)
        # The colocated engine's weights move in buckets, with the log-prob check (rollout_engine.py).
        self.engine_sync = rollout_engine.install(self) if colocated else None
        # The engine's log-probs of its rollouts go on to TRL only where it reads them.
        self._engine_logprobs = self.use_vllm and (not colocated or rollout_engine.reads_engine_logprobs(self.args))
        if self.args.world_size > 1 and self.args.device.type == "cpu":
            restorable_on_cpu_processes()
        # Under FSDP every forward of a sharded model is a collective (training/sharding.py).
        self._sharded = sharding.is_fsdp(self.accelerator)
        if self._sharded:
            sharding.synced_generate(self.model)
            sharding.reduce_in_fp32(self.accelerator)
        self._row = {pid: i for i, pid in enumerate(self.train_dataset["prompt_id"])}
        self.anchoring, self.base_model, self.lora = anchoring, None, peft is not None
        if needs_base:
            base_model.requires_grad_(False).eval()
            if cfg.bf16:  # frozen: no fp32 master weights needed, and bf16 decodes far faster
                base_model.to(torch.bfloat16)
            add_fused_lm_head(base_model, temperature=self.temperature,
                              cast_lm_head_to_fp32=cfg.cast_lm_head_to_fp32)
            self.base_model = sharding.prepare_frozen(base_model, self.accelerator)
        self._from_base: list[bool] | None = None  # per row: drawn from the frozen base
        self._drawn_logps: list | None = None  # per row: base log-probs from its draw, if any
        self._batches: list[list[int]] | None = None  # every step's prompt rows (the schedule)
        self._supply = None  # the frozen-base rollouts of anchored rows (base-sampled anchors)
        if anchoring and cfg.anchor in BASE_SAMPLED:
            self._supply = BaseRolloutSupply(
                base_rollouts, self.num_generations, cfg.seed, cfg.refresh_steps, self._base_sampler,
                lambda: tokenize(self.processing_class, self.train_dataset["prompt"]))
        self._surrogate_logps = None
        self._stats: dict[str, list[float]] = {}  # this generation batch's (sum, count) metrics
        self._base_kl_sums: dict[str, list[float]] = {}  # log_base_kl: this step's (sum, count) so far
        self._base_kl_batches = 0  # its micro-batches so far

    # --- sampling: drop removes prompts from the sampler -----------------------------------

    def _get_train_sampler(self, dataset=None):
        sampler = action_sampler(self.args, self.anchor_weights)
        self._batches = sampler.schedule  # every step's prompts, for the base rollouts
        if self._supply is not None:
            size = self.args.base_generation_batch_size or self.args.generation_batch_size
            self._supply.schedule(self._batches, base_rollouts.plan_blocks(
                self._batches, self.anchor_weights, self.num_generations, self.args.refresh_steps,
                self.args.seed, size))
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
        if self.anchoring and self.args.anchor in BASE_SCORED and self._values_kl_terms():
            need |= out["anchor_weight"] > 0
        if self.args.beta_kl > 0 and self._values_kl_terms():
            need |= ~from_base
        # On a step log_base_kl logs, every policy rollout too, for the log only (`base_scored`,
        # and so the `kl` metric, stays the terms' rows).
        scored = need | ~from_base if self._logs_base_kl() else need
        self._base_kl_sums = {f"kl_base_{e}": [0.0, 0.0] for e in BASE_KL_ESTIMATORS}
        self._base_kl_batches = 0
        if self._on_any_process(scored.any()):
            out["base_per_token_logps"] = self._base_logps(out, scored, drawn_logps)
            out["base_scored"] = need
        rewards = torch.tensor([x.pop(REWARD) for x in inputs]) if inputs and REWARD in inputs[0] else None
        if rewards is not None:  # this process's rows' rewards, beside their advantages
            out["reward"] = rewards.to(device)
        if self.args.regrouped and self.model.training:
            self._method_advantages(out, rewards)
        mode = "train" if self.model.training else "eval"
        self._add_stat("protected_fraction", float(np.sum(w > 0)), len(w))
        if rewards is not None:
            policy_rows = ~from_base.cpu()
            self._add_stat("reward_policy", rewards[policy_rows].sum().item(), int(policy_rows.sum()))
        self._log_means(mode, self._stats)
        return out

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                              has_tool_images=False):
        from_base = self._from_base
        # Sharded, processes take one path: each makes the same forward calls.
        if not self._on_any_process(bool(from_base) and any(from_base)):
            ids, logprobs = super()._generate_single_turn(prompt_ids, images, multimodal_fields,
                                                          num_generations, has_tool_images)
            return ids, (logprobs if self._engine_logprobs else None)
        from_base = from_base or [False] * len(prompt_ids)
        if images is not None:
            raise BoundaryError(f"anchor: {self.args.anchor} needs text prompts")
        step, n = self.state.global_step, len(prompt_ids)
        completions, logprobs = [None] * n, [None] * n
        start = time.perf_counter()
        supply = self._supply
        drawn = supply.rollouts(step, self._local_slice()) if self._batches is not None else {}
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
                    raise BoundaryError(f"{supply.source()}: step {step + 1}: base rollouts were "
                                        "drawn for other prompt tokens (another tokenizer or template?)")
                completions[i], logprobs[i], self._drawn_logps[i] = list(ids), list(logps), logps
        # TRL's vLLM path gathers and syncs weights across processes: every process generates
        # every row (anchored rows' policy rollouts are then discarded); transformers generates
        # the policy's rows only.
        policy = list(range(n)) if self.use_vllm else [i for i, b in enumerate(from_base) if not b]
        if self._on_any_process(bool(policy)):
            # Sharded, a process with anchored rows only still steps the others' generate (its
            # forwards are collectives) on one of its prompts, and drops what it drew; its
            # random streams are put back, so that its later draws are those of DDP.
            device = self.accelerator.device
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else [],
                                       enabled=not policy):
                ids, lps = super()._generate_single_turn([prompt_ids[i] for i in policy or [0]], None, {},
                                                         num_generations)
            for j, i in enumerate(policy):
                if not from_base[i]:
                    completions[i], logprobs[i] = ids[j], lps[j] if lps is not None else None
        missing = [i for i, b in enumerate(from_base) if b and completions[i] is None]
        self._add_stat("base_rollouts_on_demand", len(missing))
        if missing:
            on_demand = supply.on_demand([prompt_ids[i] for i in missing], step, self.accelerator.process_index)
            for i, c in zip(missing, on_demand):
                completions[i], logprobs[i] = c.tokens, c.logps
                self._drawn_logps[i] = np.asarray(c.logps, dtype=np.float32)
        self._add_stat("generate_seconds", time.perf_counter() - start)
        return completions, (logprobs if self._engine_logprobs else None)

    def _on_any_process(self, flag: torch.Tensor | bool) -> bool:
        """`flag` here, or on any process under FSDP: a sharded model's forward is a collective,
        so every process makes it or none does."""
        if not self._sharded:
            return bool(flag)
        flag = torch.as_tensor(flag, device=self.accelerator.device)
        return bool(self.accelerator.gather(flag.reshape(1).int()).any())

    def _base_sampler(self):
        """A draw function on the frozen base, or None where no base is loaded (pre-drawn) or
        it is sharded (processes would make different numbers of generate calls)."""
        if (self.base_model is None and not self.lora) or self._sharded:
            return None

        def sampler(model):
            return base_rollouts.hf_sampler(model, self.processing_class, self.temperature, self.args.top_p,
                                            self.max_completion_length)
        if self.lora:
            return lora.base_sampler(self.accelerator.unwrap_model(self.model), sampler)
        return sampler(self.accelerator.unwrap_model(self.base_model))

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
        if self._on_any_process(rest.any()):
            # Sharded, every process scores its whole batch: the same forward calls everywhere.
            scored = torch.ones_like(rest) if self._sharded else rest
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)[scored]
            attn = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)[scored]
            logps = self._score_with_base(ids, attn, T).to(full.dtype)
            full[rest] = logps[rest[scored]]
        return full

    def _score_with_base(self, ids, attn, T: int) -> torch.Tensor:
        # Under LoRA the policy's own forward (a collective under FSDP), its adapter off.
        if self.lora:
            with lora.base_of(self.accelerator.unwrap_model(self.model)):
                return self._logps_no_grad(self.model, ids, attn, T)
        return self._logps_no_grad(self.base_model, ids, attn, T)

    @torch.no_grad()
    def _logps_no_grad(self, model, ids, attn, T: int) -> torch.Tensor:
        """`model`'s log-probs [N, T] of the completions (zeros past a row's end): forwards over
        rows grouped by completion length, each group cut to its longest, at most a training
        micro-batch's tokens each, so that right padding costs nothing. Sharded, the uncut
        micro-batches: every process must make the same forward calls."""
        rows_at_once = self.args.per_device_train_batch_size
        if self._sharded:
            return self._get_per_token_logps_and_entropies(model, ids, attn, T, batch_size=rows_at_once)[0]
        P = ids.size(1) - T
        lengths = attn[:, P:].sum(1).tolist()
        logps = torch.zeros(ids.size(0), T, device=ids.device)
        for rows in length_groups(lengths, P, rows_at_once * (P + T)):
            cut = P + max(1, lengths[rows[0]])  # the group's longest comes first
            at = torch.tensor(rows, device=ids.device)
            scored, _, _ = self._get_per_token_logps_and_entropies(
                model, ids[at, :cut], attn[at, :cut], cut - P, batch_size=len(rows))
            logps[at, :cut - P] = scored.to(logps.dtype)
        return logps

    def _method_advantages(self, out, rewards: torch.Tensor):
        """The field's methods (objectives.py), on this process's rows after TRL's advantage: a
        recomputed group advantage (passk, reinforce, unlikeliness reward), and the tokens that
        Clip-Cov stops (the advantage becomes [B, T]) or KL-Cov penalises. The methods that read
        the policy's log-probs of its rollouts get them from no-grad forwards here (_logps_no_grad)."""
        args, G = self.args, self.num_generations
        rewards = rewards.to(out["advantages"].device)
        mask = out["completion_mask"]
        logps = None
        if args.unlikeliness > 0 or args.cov_select:
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
            attn = torch.cat([out["prompt_mask"], mask], 1)
            logps = self._logps_no_grad(self.model, ids, attn, mask.size(1))
        if args.advantage == "passk":
            adv = objectives.passk_advantages(rewards, G, args.passk_k)
        elif args.advantage == "reinforce":
            adv = objectives.reinforce_advantages(rewards, args.positive_weight, args.negative_weight)
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
        for row, reward in zip(inputs, rewards[start:start + len(prompts)].nansum(1).tolist()):
            row[REWARD] = reward  # read back (and removed) by _generate_and_score_completions
        return rewards

    # --- loss: the surrogate and the anchor on one forward pass ----------------------------

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
        out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        if torch.is_grad_enabled():  # the surrogate's forward: the anchor reuses its logps
            self._surrogate_logps = out[0]
        return out

    def _values_kl_terms(self) -> bool:
        """Whether this step scores the base for its KL terms (kl_value_every; every evaluation
        batch). Only k1 terms skip (trainer_config refuses others): their gradient, grad log pi,
        does not read the base; on the other steps they take the policy's own log-probs, detached,
        as the base's: value 0, the same gradient."""
        return not self.model.training or (self.state.global_step + 1) % self.args.kl_value_every == 0

    def _logs_base_kl(self) -> bool:
        """Whether log_base_kl logs this step (log steps count from 1; every evaluation batch)."""
        return self.args.log_base_kl and (
            not self.model.training or (self.state.global_step + 1) % self.args.log_base_kl_every == 0)

    @torch.no_grad()
    def _add_base_kl(self, logps, inputs, mask, rows, mode: str):
        """log_base_kl: KL(pi || pi_base) per token, k1 and k3 (the global KL's estimators), on
        this process's policy rollouts, summed over the step's micro-batches and logged at its
        last as the mean over the step's completion tokens on every process. The policy's
        log-probs are the training forward's; the base's were scored with the rollouts."""
        sums = self._base_kl_sums
        if "base_per_token_logps" in inputs:
            m = mask[rows].double()
            for e in BASE_KL_ESTIMATORS:
                kl = per_token_kl(logps[rows], inputs["base_per_token_logps"][rows], e).double()
                sums[f"kl_base_{e}"][0] += (kl * m).sum().item()
                sums[f"kl_base_{e}"][1] += m.sum().item()
        self._base_kl_batches += 1
        if mode == "eval" or self._base_kl_batches == self.args.steps_per_generation:
            self._log_means(mode, sums)  # every process at the same micro-batch: one gather

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
        base = inputs.get("base_per_token_logps")
        # A step that skips k1 terms' base (above), or none scored because no row's term reads it
        # (their selections below are then empty): the policy's own, detached.
        if base is None or not self._values_kl_terms():
            base = logps.detach()
        if anchored.any():
            if self.args.anchor == "base":
                a = base_cross_entropy(logps[anchored], mask[anchored])
            elif self.args.anchor == "support":
                a = support_floor(logps[anchored], base[anchored], mask[anchored], self.args.support_floor)
            elif self.args.anchor in ("forward_kl", "js"):
                divergence = base_forward_kl if self.args.anchor == "forward_kl" else base_js
                a = divergence(logps[anchored], base[anchored], mask[anchored])
            else:
                a = policy_kl(logps[anchored], base[anchored], mask[anchored], self.args.kl_estimator)
            extra = extra + self.args.beta_a * (w[anchored] * a).sum() / B
            if self._values_kl_terms():
                stats["anchor_loss"] = [a.sum().item(), int(anchored.sum())]
        if "base_per_token_logps" in inputs:
            # Logged KL(pi || pi_base): the token log-ratio (k1 value) on the scored policy rows.
            rows = inputs["base_scored"] & ~from_base
            if rows.any():
                log_ratio = (logps[rows] - inputs["base_per_token_logps"][rows]).detach()
                stats["kl"] = [(log_ratio * mask[rows]).sum().item(), mask[rows].sum().item()]
        if self.args.beta_kl > 0:
            kl = policy_kl(logps[~from_base], base[~from_base], mask[~from_base], self.args.kl_estimator)
            extra = extra + self.args.beta_kl * kl.sum() / B
        if "cov_selected" in inputs:  # KL-Cov, aggregated like TRL's grpo loss (sequence token means)
            penalty = objectives.kl_cov_penalty(logps, inputs["old_policy_logps"], inputs["cov_selected"],
                                                self.args.cov_kl_coef)
            extra = extra + (penalty * mask).sum(-1).div(mask.sum(-1).clamp(min=1.0)).sum() / B
        self._log_means(mode, stats)
        if self._logs_base_kl():
            self._add_base_kl(logps, inputs, mask, ~from_base, mode)
        if mode == "train":
            extra = extra / self.current_gradient_accumulation_steps
        return loss + extra

