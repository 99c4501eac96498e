"""A LoRA policy's evaluation on vLLM: the merged folder the vllm backend samples against vLLM's own
LoRA serving (enable_lora and a LoRARequest), in one process, with the same prompts and settings.

    PYTHONPATH=workflow python benchmarks/bench_lora_eval.py [--shape qwen2.5-7b] [--rank 16] \
        [--prompts 64 --n 8 --max-new 512] [--no-engine]

The base is the shape's config (multi_gpu_steps.SHAPES) with random bf16 weights, saved as a
model folder beside the testbed's tokenizer, so nothing is downloaded. The adapter has rank
--rank on every linear layer and a random B. EOS is ignored, so every completion is full
length and the work depends on the shape alone.

Prints:
- the merge, as the backend does it (`models.merged_folder`: fp32, cast once, written);
- each engine's start;
- each engine's generation rate in tok/s, and the ratio merged / LoRA.

With --no-engine it times only the merge: a dry run on a CPU (--shape tiny-qwen2).
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import torch

from boundary.sampling import models
from boundary.sampling import vllm as backend


def make_base(shape: str, folder: Path) -> None:
    from multi_gpu_steps import SHAPES
    from transformers import AutoConfig, AutoModelForCausalLM

    from boundary.tasks.testbed import build_tokenizer

    family, values = SHAPES[shape]
    config = AutoConfig.for_model(family.lower(), **values)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    del model
    release_memory()


def make_adapter(base: Path, folder: Path, rank: int) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16).to(device)
    policy = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear",
                                              task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, weight in policy.named_parameters():
            if "lora_B" in name:
                weight.normal_(std=0.01)
    policy.save_pretrained(folder)
    del model, policy
    release_memory()


def engine(model: str, args, **extra):
    from vllm import LLM

    backend.without_flashinfer_sampler()
    return LLM(model=model, seed=0, max_model_len=args.prompt_len + args.max_new, dtype="bfloat16",
               disable_log_stats=True, gpu_memory_utilization=backend.GPU_SHARE,
               max_num_seqs=backend.max_num_seqs(args.prompts * args.n), **extra)


def timed_generate(llm, prompts, args, **extra) -> float:
    from vllm import SamplingParams

    # Random weights draw ids beyond the testbed tokenizer's vocabulary: nothing is detokenized.
    params = SamplingParams(n=args.n, temperature=1.0, top_p=1.0, max_tokens=args.max_new, ignore_eos=True,
                            detokenize=False)
    start = time.perf_counter()
    llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False, **extra)
    return time.perf_counter() - start


def release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def release(llm) -> None:
    backend._shut_down(llm)
    del llm
    release_memory()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen2.5-7b", help="a multi_gpu_steps.SHAPES name (tiny-qwen2: a CPU dry run)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-new", type=int, default=512)
    ap.add_argument("--no-engine", action="store_true", help="time the merge only (no vLLM)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-lora-eval-") as tmp:
        base, adapter = Path(tmp) / "base", Path(tmp) / "adapter"
        start = time.perf_counter()
        make_base(args.shape, base)
        make_adapter(base, adapter, args.rank)
        size = sum(p.stat().st_size for p in base.iterdir()) / 2**30
        print(f"{args.shape}: base {size:.1f} GiB, adapter rank {args.rank} "
              f"({(adapter / models.ADAPTER_WEIGHTS).stat().st_size / 2**20:.1f} MiB), made in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
        start = time.perf_counter()
        with models.merged_folder(adapter, base) as merged:
            merge = time.perf_counter() - start
            print(f"merged folder (fp32 merge, cast once, written): {merge:.1f} s", flush=True)
            if args.no_engine:
                return
            generator = torch.Generator().manual_seed(0)
            prompts = torch.randint(10, 40, (args.prompts, args.prompt_len), generator=generator).tolist()
            tokens = args.prompts * args.n * args.max_new
            start = time.perf_counter()
            llm = engine(merged, args)
            merged_start = time.perf_counter() - start
            merged_gen = timed_generate(llm, prompts, args)
            release(llm)
        from vllm.lora.request import LoRARequest

        start = time.perf_counter()
        llm = engine(str(base), args, enable_lora=True, max_lora_rank=args.rank, max_loras=1)
        lora_start = time.perf_counter() - start
        lora_gen = timed_generate(llm, prompts, args, lora_request=LoRARequest("policy", 1, str(adapter)))
        release(llm)
    print(f"merged folder: merge {merge:.1f} s + engine start {merged_start:.1f} s, generate "
          f"{tokens / merged_gen:,.0f} tok/s ({merged_gen:.1f} s)")
    print(f"vLLM LoRA:     engine start {lora_start:.1f} s, generate {tokens / lora_gen:,.0f} tok/s ({lora_gen:.1f} s)")
    print(f"generation: merged / LoRA = {lora_gen / merged_gen:.2f}x the rate; whole call (merge + start + "
          f"generate): {(lora_start + lora_gen) / (merge + merged_start + merged_gen):.2f}x")


if __name__ == "__main__":
    main()
