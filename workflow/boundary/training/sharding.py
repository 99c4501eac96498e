"""`train.sharding`: how a training job's processes hold the model.

  ddp   every process holds the whole policy, its gradients and AdamW's moments (fp32: about
        16 bytes a parameter, 120 GB for a 7.6B model); gradients are all-reduced.
  fsdp  FSDP2 through accelerate's FullyShardedDataParallelPlugin (TrainingArguments' `fsdp` /
        `fsdp_config`): parameters, gradients and optimizer state are split across the
        processes, each decoder layer gathered for its forward and backward and freed after.

Under fsdp the frozen base, where a term scores with it, is sharded the same way (TRL's
`prepare_fsdp`, as TRL does for its reference model), and every forward of a sharded model is
a collective: each process must make the same calls in the same order. So

- the policy generates with `synced_gpus` (a process whose rollouts ended keeps stepping until
  every process's have);
- a process scores its whole local batch with the base whenever any process needs base
  log-probs in that step (trainer.py), never only its anchored rows;
- base-sampled anchors must read pre-drawn base rollouts (the base_rollouts stage): drawn in
  place, processes would make different numbers of base generate calls and wait forever.

accelerate runs FSDP on GPUs only: on a CPU it drops the plugin and trains unsharded (DDP over
gloo), so fsdp without GPUs is refused rather than silently run as ddp.
"""

from __future__ import annotations

from boundary.core.errors import BoundaryError


def unsupported(sharding: str) -> str | None:
    """Why the installed accelerate / torch cannot run `sharding`, or None."""
    if sharding == "ddp":
        return None
    import accelerate
    from accelerate.utils import FullyShardedDataParallelPlugin

    if "fsdp_version" not in FullyShardedDataParallelPlugin.__dataclass_fields__:
        return f"needs FSDP2, which the installed accelerate {accelerate.__version__} lacks (>= 1.6 has it)"
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        import torch

        return f"needs torch's fully_shard, which the installed torch {torch.__version__} lacks (>= 2.6 has it)"
    return None


def check_launch(sharding: str, gpus: int, processes: int) -> None:
    """The launcher's checks, before any process starts: one line each (the value itself is
    the settings layer's to check)."""
    why = unsupported(sharding)
    if why:
        raise BoundaryError(f"train.sharding: {sharding} {why}")
    if sharding == "fsdp" and gpus == 0:
        raise BoundaryError("train.sharding: fsdp needs GPUs (accelerate runs FSDP on GPUs only; "
                            f"on the CPU its {processes} process(es) would train unsharded): "
                            "set train.gpus, or sharding: ddp")


def check_method(sharding: str, anchor: str | None, anchoring: bool, pre_drawn: bool,
                 base_sampled: tuple) -> None:
    """Refuse, naming the method by its anchor, what cannot train under `sharding`."""
    if sharding == "fsdp" and anchoring and anchor in base_sampled and not pre_drawn:
        raise BoundaryError(f"method with anchor {anchor}: under train.sharding fsdp its base rollouts "
                            "must be pre-drawn (the base_rollouts stage; boundary train --base-rollouts): "
                            "drawn in place, the sharded base's generate calls would differ between "
                            "processes and wait forever")


def config_args(sharding: str, checkpointing: bool) -> dict:
    """TrainingArguments' settings for `sharding`: under fsdp, FSDP2 with each of the model's
    `_no_split_modules` (its decoder layers) a unit, freed after its forward (ZeRO-3);
    activation checkpointing by FSDP's own wrapper (transformers' gradient checkpointing would
    gather each layer once more in the backward); checkpoints written as one shard per process
    (a full optimizer state on one process would need 8 bytes a parameter of its host memory)."""
    if sharding == "ddp":
        return {"gradient_checkpointing": checkpointing}
    return {"gradient_checkpointing": False, "fsdp": True,
            "fsdp_config": {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                            "reshard_after_forward": True, "activation_checkpointing": checkpointing,
                            "state_dict_type": "SHARDED_STATE_DICT", "cpu_ram_efficient_loading": False}}


def is_fsdp(accelerator) -> bool:
    return getattr(accelerator, "is_fsdp2", False)


def reduce_in_fp32(accelerator) -> None:
    """Gradients reduced in fp32 as DDP's are (accelerate's bf16 policy reduces in bf16, which
    drops precision as the process count grows); parameters still gathered in bf16."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    plugin = accelerator.state.fsdp_plugin
    policy = plugin.mixed_precision_policy
    if isinstance(policy, MixedPrecisionPolicy) and policy.param_dtype is not None:
        plugin.mixed_precision_policy = MixedPrecisionPolicy(
            param_dtype=policy.param_dtype, reduce_dtype=torch.float32, output_dtype=policy.output_dtype)


def synced_generate(model) -> None:
    """transformers' generate steps every process until all are done (`synced_gpus`) for a
    module marked as FSDP-managed. torch's fully_shard sets that mark (for Dynamo) when the
    trainer prepares the model; set here too, so generation never depends on that detail."""
    model._is_fsdp_managed_module = True


def prepare_frozen(model, accelerator):
    """The frozen base, placed as the policy is: sharded under fsdp, a plain copy per process
    otherwise."""
    if is_fsdp(accelerator):
        from trl.models import prepare_fsdp

        return prepare_fsdp(model, accelerator)
    return accelerator.prepare_model(model, evaluation_mode=True)


def full_state_dict(accelerator, model) -> dict:
    """The model's whole state dict, for save_pretrained on the main process. Every process
    must call it: under fsdp it gathers the shards. Gathered, tied weights (SmolLM2's lm_head
    and embeddings) are separate copies that save_pretrained would write twice: the tied
    targets are left out, as save_pretrained leaves them out of an unsharded model."""
    state = accelerator.get_state_dict(model)
    if is_fsdp(accelerator):
        for target in getattr(accelerator.unwrap_model(model), "all_tied_weights_keys", None) or {}:
            state.pop(target, None)
    return state
