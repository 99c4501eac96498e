"""PBAConfig: TRL's GRPOConfig plus the per-prompt action knobs of PBA, its controls and the
field's methods; and `make_config`, the one translation of a run's complete settings (the
train section plus one method entry, resolved by core/settings.py) into it.

In TRL's shape (trl/experimental/gmpo/gmpo_config.py): the config is its own module beside the
trainer. Every default and every allowed value comes from the schema through the settings
layer, so a method trains the same through the pipeline and through `boundary train`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
from trl import GRPOConfig

from boundary.core import settings as stage_settings
from boundary.core.errors import BoundaryError
from boundary.training import objectives
from boundary.training.rollout_engine import engine_args
from boundary.training.sharding import config_args

# Defaults of a PBAConfig built by hand (make_config sets every field from the settings).
TRAIN = stage_settings.defaults("train")
METHOD = stage_settings.defaults("methods")
GATE = stage_settings.defaults("gate")


@dataclass
class PBAConfig(GRPOConfig):
    """GRPOConfig plus the per-prompt action knobs of PBA and its controls."""

    anchor: str | None = field(default=METHOD["anchor"], metadata={"help": "see the schema's methods.anchor"})
    kl_estimator: str = field(default=METHOD["kl_estimator"], metadata={"help": "policy anchor and global KL's estimator"})
    beta_a: float = field(default=METHOD["beta_a"], metadata={"help": "anchor weight beta_a"})
    support_floor: float = field(default=METHOD["support_floor"], metadata={
        "help": "support anchor: a base token is held at min(pi_base, support_floor)"})
    beta_kl: float = field(default=METHOD["beta_kl"], metadata={"help": "global KL(pi || pi_base) weight"})
    kl_value_every: int = field(default=METHOD["kl_value_every"], metadata={
        "help": "k1 terms: the base scored for their value on steps N, 2N, ... (their gradient does not read it)"})
    masked_action: str = field(default=METHOD["masked_action"], metadata={"help": "what masked prompts get"})
    refresh_steps: int = field(default=GATE["refresh_steps"], metadata={"help": "gate refresh period (steps)"})
    base_generation_batch_size: int | None = field(default=None, metadata={
        "help": "base-anchor rollouts per block: one sampling call, seeded by (seed, epoch, block) "
                "(None: generation_batch_size)"})
    # The field's methods (objectives.py): the group advantage, the reward, covariance selection.
    advantage: str = field(default=METHOD["advantage"], metadata={"help": "the group advantage"})
    passk_k: int = field(default=METHOD["passk_k"], metadata={"help": "passk advantage: k <= num_generations"})
    positive_weight: float = field(default=METHOD["positive_weight"], metadata={
        "help": "reinforce advantage: a correct rollout's weight lambda (0: negatives only, NSR)"})
    negative_weight: float = field(default=METHOD["negative_weight"], metadata={
        "help": "reinforce advantage: a wrong rollout's weight (0 with positive_weight 1: PSR)"})
    unlikeliness: float = field(default=METHOD["unlikeliness"], metadata={"help": "unlikeliness reward beta_rank (0: off)"})
    cov_select: str | None = field(default=METHOD["cov_select"], metadata={"help": "Clip-Cov or KL-Cov selection"})
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
    vllm_cudagraph_capture_size: int | None = field(default=None, metadata={
        "help": "the widest decode step the engine runs as a CUDA graph (None: vLLM's default)"})
    lora: dict | None = field(default=None, metadata={
        "help": "complete train.lora settings (training/lora.py); None or enabled false: full fine-tuning"})
    log_base_kl: bool = field(default=TRAIN["log_base_kl"], metadata={
        "help": "log KL(pi || pi_base) (k1, k3) on every policy rollout (kl_base_k1, kl_base_k3)"})
    log_base_kl_every: int = field(default=TRAIN["log_base_kl_every"], metadata={
        "help": "log_base_kl: on steps N, 2N, ..."})
    vllm_load_format: str = field(default="dummy", metadata={
        "help": "how the colocated engine starts: dummy (random weights; the first sync fills them)"})

    def __post_init__(self):
        # Allowed values and ranges are the schema's, checked by the settings layer; here only
        # what ties fields together.
        super().__post_init__()
        if self.beta != 0.0:
            raise BoundaryError("beta: use beta_kl (TRL's beta is k3-only and loads its own reference)")
        if self.advantage == "reinforce" and self.positive_weight == 0 and self.negative_weight == 0:
            raise BoundaryError("positive_weight, negative_weight: both 0 gives every rollout a zero "
                                "advantage (nothing to learn)")
        if self.regrouped and self.scale_rewards == "batch":
            raise BoundaryError("scale_rewards: batch is not supported with advantage, unlikeliness or "
                                "cov_select (they recompute the group advantage per process)")
        # Only a k1 term's gradient leaves the base out: any other would train on a stand-in.
        if self.kl_value_every > 1 and (self.kl_estimator != "k1" or self.anchor not in ("policy", "base", None)):
            raise BoundaryError(f"kl_value_every: {self.kl_value_every} needs kl_estimator k1 and anchor policy, "
                                f"base or none (the gradient of {self.anchor or self.kl_estimator} reads the base)")
        # One generation batch per optimizer step, so a batch's refresh epoch is its step's.
        if self.num_iterations != 1 or self.steps_per_generation != self.gradient_accumulation_steps:
            raise BoundaryError("num_iterations must be 1 and steps_per_generation = gradient_accumulation_steps")

    @property
    def regrouped(self) -> bool:
        """Whether the group advantage is recomputed after TRL's (a method of objectives.py)."""
        return self.advantage != "grpo" or self.unlikeliness > 0 or self.cov_select is not None



def check_micro_batch(cfg, vocab: int, gpu_bytes: int) -> None:
    """Refuse, before anything is built, a micro-batch whose logits cannot fit: its completions'
    logits and their gradient (both held for the backward) over the vocabulary, more than the
    GPU's whole memory. That run would end out of memory in its first step. The suggestion keeps
    them to a quarter of the GPU, room for the weights, the optimizer and a colocated engine."""
    rows, tokens = cfg.per_device_train_batch_size, cfg.max_completion_length
    element = 2 if cfg.bf16 else 4

    def need(n: int) -> int:
        return 2 * element * n * tokens * vocab

    if need(rows) <= gpu_bytes:
        return
    per_process = rows * cfg.gradient_accumulation_steps
    fits = [a for a in range(1, per_process + 1) if per_process % a == 0 and need(per_process // a) <= gpu_bytes // 4]
    hint = f"set it to {fits[0]}" if fits else "cut max_completion_length"
    raise BoundaryError(f"train.gradient_accumulation_steps: {cfg.gradient_accumulation_steps}: a micro-batch of {rows} "
                        f"completions of up to {tokens} tokens needs {need(rows) / 2**30:.0f} GiB for its logits and "
                        f"their gradient alone (vocabulary {vocab}), more than the GPU's {gpu_bytes / 2**30:.0f} GiB; {hint}")


def make_config(s: dict, seed: int, checkpoint_dir: str) -> PBAConfig:
    """A run's PBAConfig from its complete settings (`core.settings.resolve("train", ...)`)."""
    bf16 = s["bf16"]
    if bf16 == "auto":  # GRPOConfig turns bf16 on by default, which a CPU cannot run
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    # TRL checkpoints activations by default: a memory saver for large models on a GPU, pure
    # recomputation for a CPU-sized model.
    checkpointing = s["gradient_checkpointing"]
    if checkpointing == "auto":
        checkpointing = torch.cuda.is_available()
    G, P = int(s["num_generations"]), int(s["prompts_per_step"])
    accum = int(s["gradient_accumulation_steps"])
    world = int(os.environ.get("WORLD_SIZE", 1))  # processes under accelerate/torchrun
    stage_settings.check_batch_split(s, world)
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
        beta_a=float(s["beta_a"]), beta_kl=float(s["beta_kl"]), kl_value_every=int(s["kl_value_every"]),
        support_floor=float(s["support_floor"]),
        masked_action=s["masked_action"], refresh_steps=int(s["refresh_steps"]),
        base_generation_batch_size=s.get("base_generation_batch_size"),  # unset: one generation batch
        **{k: tuple(v) if isinstance(v, list) else v for k, v in s.items() if k in objectives.METHOD_SETTINGS},
        save_strategy="steps", save_steps=int(s.get("save_steps", max(1, min(50, steps // 4)))),
        save_total_limit=2, logging_steps=1, report_to="none", disable_tqdm=True,
        remove_unused_columns=False, dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),  # several CPU processes then meet over gloo
        sharding=s["sharding"],
        rollout_engine=s["rollout_engine"],
        lora=s["lora"] if s["lora"]["enabled"] else None,
        log_base_kl=bool(s["log_base_kl"]), log_base_kl_every=int(s["log_base_kl_every"]),
        **(engine_args(s) if s["rollout_engine"] == "vllm" else {}),
    )

