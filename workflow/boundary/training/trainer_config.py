"""PBAConfig: TRL's GRPOConfig plus the per-prompt action knobs of PBA, its controls and the
field's methods; and `make_config`, the one translation of a run's settings (the train
section plus one method entry, as the train rule passes them) into it.

In TRL's shape (trl/experimental/gmpo/gmpo_config.py): the config is its own module beside the
trainer. Every default comes from the schema (workflow/schemas/config.schema.yaml), so a
method trains the same through the pipeline and through `boundary train`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig

from boundary.core.config import REPLACED_TRAIN_KEYS, batch_split_error, schema_defaults, schema_keys
from boundary.core.errors import BoundaryError
from boundary.training import objectives
from boundary.training.anchors import ANCHORS, ESTIMATORS
from boundary.training.rollout_engine import ENGINES, engine_args
from boundary.training.sharding import SHARDINGS, config_args

MASKED_ACTIONS = ("anchor", "drop")
TRAIN = schema_defaults("train")
METHOD = schema_defaults("methods")
GATE = schema_defaults("gate")
VERIFY = schema_defaults("verify")


@dataclass
class PBAConfig(GRPOConfig):
    """GRPOConfig plus the per-prompt action knobs of PBA and its controls."""

    anchor: str | None = field(default=None, metadata={"help": "policy | base | support | None"})
    kl_estimator: str = field(default=METHOD["kl_estimator"], metadata={"help": "k1 | k2 | k3 (policy anchor, global KL)"})
    beta_a: float = field(default=METHOD["beta_a"], metadata={"help": "anchor weight beta_a"})
    support_floor: float = field(default=METHOD["support_floor"], metadata={
        "help": "support anchor: a base token is held at min(pi_base, support_floor)"})
    beta_kl: float = field(default=METHOD["beta_kl"], metadata={"help": "global KL(pi || pi_base) weight"})
    masked_action: str = field(default=METHOD["masked_action"], metadata={"help": "anchor | drop for masked prompts"})
    refresh_steps: int = field(default=GATE["refresh_steps"], metadata={"help": "gate refresh period (steps)"})
    base_generation_batch_size: int | None = field(default=None, metadata={
        "help": "base-anchor rollouts per block: one sampling call, seeded by (seed, epoch, block) "
                "(None: generation_batch_size)"})
    # The field's methods (objectives.py): the group advantage, the reward, covariance selection.
    advantage: str = field(default=METHOD["advantage"], metadata={"help": "grpo | passk | reinforce"})
    passk_k: int = field(default=METHOD["passk_k"], metadata={"help": "passk advantage: k <= num_generations"})
    positive_weight: float = field(default=METHOD["positive_weight"], metadata={
        "help": "reinforce advantage: a correct rollout's weight lambda (0: negatives only, NSR)"})
    negative_weight: float = field(default=METHOD["negative_weight"], metadata={
        "help": "reinforce advantage: a wrong rollout's weight (0 with positive_weight 1: PSR)"})
    unlikeliness: float = field(default=METHOD["unlikeliness"], metadata={"help": "unlikeliness reward beta_rank (0: off)"})
    cov_select: str | None = field(default=None, metadata={"help": "clip (Clip-Cov) | kl (KL-Cov) | None"})
    cov_fraction: float = field(default=METHOD["cov_fraction"], metadata={"help": "fraction of tokens Clip-Cov / KL-Cov select"})
    cov_bounds: tuple = field(default=tuple(METHOD["cov_bounds"]), metadata={"help": "Clip-Cov covariance band (lb, ub)"})
    cov_kl_coef: float = field(default=METHOD["cov_kl_coef"], metadata={"help": "KL-Cov penalty coefficient"})
    sharding: str = field(default=TRAIN["sharding"], metadata={"help": "ddp | fsdp (training/sharding.py)"})
    # The rollout engine (rollout_engine.py); TRL's own vllm_* fields carry the rest.
    rollout_engine: str = field(default=TRAIN["rollout_engine"], metadata={"help": "generate | vllm"})
    vllm_max_num_batched_tokens: int = field(default=TRAIN["vllm_max_num_batched_tokens"], metadata={
        "help": "tokens in one engine forward (TRL 1.16.0 fixes 4096)"})
    vllm_sync_bucket_mib: int = field(default=TRAIN["vllm_sync_bucket_mib"], metadata={
        "help": "weights move to the engine in buckets of this many MiB"})
    vllm_check_every: int = field(default=TRAIN["vllm_check_every"], metadata={
        "help": "every N weight syncs, compare the engine's log-probs with the policy's (0: never)"})
    vllm_load_format: str = field(default="dummy", metadata={
        "help": "how the colocated engine starts: dummy (random weights; the first sync fills them)"})

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
        if self.advantage == "reinforce" and self.positive_weight == 0 and self.negative_weight == 0:
            raise BoundaryError("positive_weight, negative_weight: both 0 gives every rollout a zero "
                                "advantage (nothing to learn)")
        if self.cov_select not in (None, *objectives.COV_SELECTIONS):
            raise BoundaryError(f"cov_select: {self.cov_select!r} is not one of {objectives.COV_SELECTIONS} or null")
        if self.regrouped and self.scale_rewards == "batch":
            raise BoundaryError("scale_rewards: batch is not supported with advantage, unlikeliness or "
                                "cov_select (they recompute the group advantage per process)")
        # One generation batch per optimizer step, so a batch's refresh epoch is its step's.
        if self.num_iterations != 1 or self.steps_per_generation != self.gradient_accumulation_steps:
            raise BoundaryError("num_iterations must be 1 and steps_per_generation = gradient_accumulation_steps")
        if self.rollout_engine not in ENGINES:
            raise BoundaryError(f"rollout_engine: {self.rollout_engine!r} is not one of {', '.join(ENGINES)}")
        if self.sharding not in SHARDINGS:
            raise BoundaryError(f"sharding: {self.sharding!r} is not one of {', '.join(SHARDINGS)}")

    @property
    def regrouped(self) -> bool:
        """Whether the group advantage is recomputed after TRL's (a method of objectives.py)."""
        return self.advantage != "grpo" or self.unlikeliness > 0 or self.cov_select is not None



# Settings the pipeline derives for training from other sections (gate, verify).
DERIVED_KEYS = {"refresh_steps", "extractor", "verify_timeout"}
# The vllm engine's settings (rollout_engine.py reads them; TRL's under their GRPOConfig names).
VLLM_KEYS = {k for k in schema_keys("train") if k.startswith("vllm_")}
# Settings that schedule or launch runs rather than shape one (training ignores them).
PIPELINE_KEYS = {"seeds", "gpus", "label"}
KEYS = schema_keys("train") | schema_keys("methods") | DERIVED_KEYS
REQUIRED = ("steps", "lr", "num_generations", "prompts_per_step")



def make_config(settings: dict, seed: int, checkpoint_dir: str) -> PBAConfig:
    """A run's PBAConfig from its settings; an unset key takes the schema's default."""
    for key in set(settings) & set(REPLACED_TRAIN_KEYS):
        raise BoundaryError(f"train settings: {key}: {REPLACED_TRAIN_KEYS[key]}")
    unknown = set(settings) - KEYS - PIPELINE_KEYS
    if unknown:
        raise BoundaryError(f"train settings: unknown key(s) {', '.join(sorted(unknown))}")
    missing = [k for k in REQUIRED if k not in settings]
    if missing:
        raise BoundaryError(f"train settings: missing {', '.join(missing)}")
    s = {**filled(settings)}
    bf16 = s["bf16"]
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
    accum = int(s["gradient_accumulation_steps"])
    world = int(os.environ.get("WORLD_SIZE", 1))  # processes under accelerate/torchrun
    why = batch_split_error(P * G, accum, world)
    if why:
        raise BoundaryError(why)
    steps = int(s["steps"])
    # FSDP is set up only where it shards: several GPU processes (accelerate drops it on a CPU).
    sharded = s["sharding"] if world > 1 and torch.cuda.is_available() else "ddp"
    return PBAConfig(
        output_dir=checkpoint_dir, seed=seed, max_steps=steps, learning_rate=float(s["lr"]),
        lr_scheduler_type="cosine", warmup_steps=float(s["warmup_ratio"]),
        optim="adamw_torch", weight_decay=float(s["weight_decay"]),
        max_grad_norm=float(s["max_grad_norm"]), bf16=bool(bf16),
        **config_args(sharded, bool(checkpointing)),
        # per_device_train_batch_size counts completions: prompts x G per optimizer step.
        num_generations=G, per_device_train_batch_size=P * G // (accum * world),
        gradient_accumulation_steps=accum, steps_per_generation=accum,
        temperature=float(s["temperature"]), top_p=float(s["top_p"]),
        max_completion_length=int(s["max_completion_length"]),
        loss_type=s["loss_type"], scale_rewards=s["scale_rewards"],
        epsilon=float(s["epsilon"]), beta=0.0,
        entropy_coef=float(s["entropy_coef"]),
        anchor=s["anchor"], kl_estimator=s["kl_estimator"],
        beta_a=float(s["beta_a"]), beta_kl=float(s["beta_kl"]),
        support_floor=float(s["support_floor"]),
        masked_action=s["masked_action"], refresh_steps=int(s["refresh_steps"]),
        base_generation_batch_size=s.get("base_generation_batch_size"),
        **{k: tuple(v) if isinstance(v, list) else v for k, v in s.items() if k in objectives.METHOD_SETTINGS},
        save_strategy="steps", save_steps=int(s.get("save_steps", max(1, min(50, steps // 4)))),
        save_total_limit=2, logging_steps=1, report_to="none", disable_tqdm=True,
        remove_unused_columns=False, dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),  # several CPU processes then meet over gloo
        sharding=s["sharding"],
        rollout_engine=s["rollout_engine"],
        **(engine_args(s) if s["rollout_engine"] == "vllm" else {}),
    )


def filled(settings: dict) -> dict:
    """Settings with every unset key at the schema's default (train, method, derived keys)."""
    derived = {"refresh_steps": GATE["refresh_steps"], "extractor": VERIFY["extractor"],
               "verify_timeout": VERIFY["timeout"]}
    return {**TRAIN, **METHOD, **derived, **settings}
