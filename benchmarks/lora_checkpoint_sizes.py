"""What a resumable checkpoint holds at a model's shape: full fine-tuning against LoRA
(train.lora), from the model's config alone (built on the meta device: no weights, no download).

    PYTHONPATH=workflow python benchmarks/lora_checkpoint_sizes.py [--rank 16] [--alpha 32]

For each shape (benchmarks/multi_gpu_steps.py's configs of Qwen2.5-1.5B, the study's
Qwen2.5-Coder-1.5B as its GGUF loads, and Qwen2.5-7B) prints the parameter count, the LoRA
adapter's (peft's get_peft_model on every linear layer but the output head, the schema's
default target_modules), and the checkpoint's bytes: full fine-tuning writes fp32 weights and
AdamW's two fp32 moments (12 bytes a parameter); a LoRA run writes the adapter (fp32: peft
keeps adapters in fp32) and its two moments (12 bytes an adapter parameter), plus the
scheduler, random and trainer state (kilobytes). The final output of a LoRA run is the
adapter alone (4 bytes an adapter parameter).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from multi_gpu_steps import SHAPES  # noqa: E402

from boundary.core.settings import defaults  # noqa: E402
from boundary.training.lora import parameter_counts, peft_config  # noqa: E402

BYTES_TRAINED = 4 + 8  # an fp32 parameter and AdamW's exp_avg and exp_avg_sq


def counts(shape: str, lora: dict) -> tuple[int, int]:
    """(all parameters, adapter parameters) of `shape` with `lora`, built on the meta device."""
    import transformers
    from peft import get_peft_model

    family, values = SHAPES[shape]
    config = getattr(transformers, f"{family}Config")(**values)
    with torch.device("meta"):
        model = getattr(transformers, f"{family}ForCausalLM")(config)
    total = sum(p.numel() for p in model.parameters())
    adapter, _ = parameter_counts(get_peft_model(model, peft_config(lora)))
    return total, adapter


def main():
    lora = {**defaults("train.lora"), "enabled": True}
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, default=lora["rank"])
    p.add_argument("--alpha", type=float, default=lora["alpha"])
    p.add_argument("--shapes", default="qwen2.5-1.5b,qwen2.5-coder-1.5b-gguf,qwen2.5-7b")
    args = p.parse_args()
    lora.update(rank=args.rank, alpha=args.alpha)
    print(f"LoRA rank {args.rank}, alpha {args.alpha:g}, target_modules {lora['target_modules']}; "
          "checkpoint = trained parameters + AdamW moments, fp32")
    print(f"{'shape':26} {'parameters':>14} {'adapter':>12} {'share':>7} {'full FT ckpt':>13} "
          f"{'LoRA ckpt':>10} {'LoRA output':>12}")
    for shape in args.shapes.split(","):
        total, adapter = counts(shape, lora)
        print(f"{shape:26} {total:>14,} {adapter:>12,} {adapter / total:>7.2%} "
              f"{total * BYTES_TRAINED / 1e9:>10.1f} GB {adapter * BYTES_TRAINED / 1e6:>7.0f} MB "
              f"{adapter * 4 / 1e6:>9.0f} MB")


if __name__ == "__main__":
    main()
