"""`train.lora`: LoRA adapters (peft) on a frozen base, for every method.

The policy is peft's model over the base: only the adapters train, and the frozen base the
anchors and the KL controls score with is the same model with its adapter switched off
(`base_of`), as TRL does for its reference model under peft. No second copy of the model is
held, and base rollouts drawn in place come from the same switched-off policy.

The colocated engine takes merged weights W + (alpha / r) B A, computed here into new tensors
one weight at a time (`merged_weights`): TRL 1.16.0 merges the adapter into the base weights,
pushes them and unmerges (trl/generation/vllm_generation.py, `_iter_named_params`), a round
trip that rounds a bf16 base a little further from itself at every sync (huggingface/trl#6688). Here
the base parameters are only read, so they stay bit for bit what was loaded: PBA's anchor is
that base.

Outputs and checkpoints hold the adapter only (peft's save_pretrained: adapter_config.json and
adapter_model.safetensors; transformers' Trainer does the same for its checkpoints, and AdamW's
state covers the trainable parameters alone); the base is the run's models/base/.
"""

from __future__ import annotations

import contextlib

# torch and peft are imported where they are used: trainer_config (and `boundary train --help`)
# reads this module's names without them.


def peft_config(lora: dict | None):
    """peft's LoraConfig of complete `lora` settings (core/settings.py), or None where off."""
    if not lora or not lora["enabled"]:
        return None
    from peft import LoraConfig

    targets = lora["target_modules"]
    return LoraConfig(r=int(lora["rank"]), lora_alpha=float(lora["alpha"]), lora_dropout=float(lora["dropout"]),
                      target_modules=targets if isinstance(targets, str) else list(targets),
                      bias="none", task_type="CAUSAL_LM")


def is_lora(model) -> bool:
    """Whether `model` (unwrapped) is a peft model."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


@contextlib.contextmanager
def base_of(model):
    """`model` (a peft model, unwrapped) as its frozen base while the block runs: the adapter
    switched off and the model in eval mode (dropout off), then both put back."""
    training = model.training
    model.eval()
    try:
        with model.disable_adapter():
            yield model
    finally:
        model.train(training)


def base_sampler(model, sampler):
    """A `draw(prompts, seed)` on the frozen base of a peft model from `sampler(model)`, the
    hf draw function of base_rollouts.py."""
    draw = sampler(model)

    def draw_from_base(prompts, seed):
        with base_of(model):
            return draw(prompts, seed)
    return draw_from_base


def _full(tensor):
    """A parameter's whole value: gathered under FSDP2 (a DTensor), as is otherwise."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def engine_name(name: str) -> str:
    """A peft parameter's name as the base model (and vLLM) names it."""
    name = name.removeprefix("base_model.model.").replace(".base_layer", "")
    for prefix in ("modules_to_save.default.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module."):
        name = name.replace(prefix, "")
    return name


def merged_weights(model, device=None):
    """(name, tensor) of every base weight with the active adapters merged in: W + scale B A,
    computed in fp32 into a new tensor and cast to W's dtype, W never written. A collective under
    FSDP2 (each tensor gathered whole), so every process iterates. `model`: the peft model."""
    from peft.tuners.lora import LoraLayer

    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    for name, param in model.named_parameters():
        if "lora_" in name or "original_module" in name:
            continue  # the adapters themselves, and a saved module's frozen original
        tensor = param.detach()
        if device is not None and tensor.device != device:
            tensor = tensor.to(device)
        tensor = _full(tensor)
        owner, _, leaf = name.rpartition(".")
        layer = layers.get(owner.removesuffix(".base_layer")) if owner.endswith(".base_layer") else None
        if layer is not None and leaf == "weight" and not layer.disable_adapters:
            tensor = merged(layer, tensor)
        yield engine_name(name), tensor


def merged(layer, weight):
    """`weight` (the LoRA layer's base weight, whole) plus each active adapter's delta, as a new
    tensor of the weight's dtype."""
    import torch

    out = weight.float()  # a copy unless the weight is fp32; then `out +` below makes one
    for adapter in layer.active_adapters:
        if adapter not in layer.lora_A:
            continue
        a = _full(layer.lora_A[adapter].weight.detach()).to(weight.device, torch.float32)
        b = _full(layer.lora_B[adapter].weight.detach()).to(weight.device, torch.float32)
        delta = (b @ a) * layer.scaling[adapter]
        if getattr(layer, "fan_in_fan_out", False):  # GPT-2's Conv1D stores W transposed
            delta = delta.T
        out = out + delta
    return out.to(weight.dtype)


def parameter_counts(model) -> tuple[int, int]:
    """(trainable parameters, all parameters) of a model."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total
