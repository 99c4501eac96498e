"""The colocated rollout engine alone: vLLM's decoding step at a training step's shape, built as
TRL 1.16.0 builds its colocate engine (in this process, external launcher, sleep mode off here),
with the trainer's overrides (rollout_engine.engine_overrides' arguments), dummy weights from a
model's config (no download). What a trainer adds around it is measured by multi_gpu_steps.py's
`engine` phase; this gives the engine's own rate to set it against.

    PYTHONPATH=workflow HF_HUB_OFFLINE=1 python benchmarks/bench_engine_decode.py \
        [--shape qwen2.5-coder-1.5b-gguf] [--rows 256] [--prompt-len 128] [--tokens 1024] \
        [--mem 0.35] [--temperature 0.6] [--top-p 0.95] [--no-prefix-caching]

Prints, for each variant of the sampling parameters (TRL's request with each token's log-prob,
without it, and without it at top-p 1), the seconds of one generate call over all rows (EOS
ignored: every row runs the full length) and that over the tokens: the milliseconds a decoding
step costs, the prefill included (about 1% here). Each is the best of --repeats calls, after one
warm-up call.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="qwen2.5-coder-1.5b-gguf")
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--mem", type=float, default=0.35, help="gpu_memory_utilization (the schema's default)")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--batched-tokens", type=int, help="max_num_batched_tokens (default: the schema's)")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    for key, value in {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)
    from boundary.core.settings import defaults
    from boundary.sampling.vllm import without_flashinfer_sampler
    from boundary.training.rollout_engine import own_master_port

    own_master_port()
    without_flashinfer_sampler()  # as the train stage does
    import numpy as np
    import torch
    from gpu_step_time import build_tokenizer
    from multi_gpu_steps import SHAPES
    from vllm import LLM, SamplingParams

    train = defaults("train")
    family, values = SHAPES[args.shape]
    import transformers

    tok = build_tokenizer(values["vocab_size"])
    with tempfile.TemporaryDirectory() as tmp:
        config = getattr(transformers, f"{family}Config")(**values, max_position_embeddings=args.prompt_len + args.tokens + 8,
                                                          torch_dtype="bfloat16")
        config.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        started = time.perf_counter()
        llm = LLM(model=tmp, gpu_memory_utilization=args.mem, max_model_len=args.prompt_len + args.tokens + 8,
                  max_num_seqs=args.rows, enable_sleep_mode=False, distributed_executor_backend="external_launcher",
                  seed=0, logprobs_mode="processed_logprobs", load_format="dummy",
                  max_num_batched_tokens=args.batched_tokens or train["vllm_max_num_batched_tokens"],
                  enable_prefix_caching=not args.no_prefix_caching)
        print(f"card {torch.cuda.get_device_name()}; shape {args.shape}; {args.rows} rows of {args.prompt_len} + "
              f"{args.tokens} tokens; memory share {args.mem}; prefix caching {not args.no_prefix_caching}; "
              f"engine built in {time.perf_counter() - started:.0f} s", flush=True)
        rng = np.random.default_rng(0)
        prompts = [{"prompt_token_ids": rng.integers(10, values["vocab_size"] - 10, args.prompt_len).tolist()}
                   for _ in range(args.rows // 8) for _ in range(8)]  # G = 8 copies of each prompt, as a step has
        variants = {"TRL's request (logprobs=0)": dict(logprobs=0),
                    "no log-probs": dict(logprobs=None),
                    "no log-probs, top-p 1": dict(logprobs=None, top_p=1.0)}
        for name, extra in variants.items():
            params = SamplingParams(**{"n": 1, "temperature": args.temperature, "top_p": args.top_p, "top_k": 0,
                                       "min_p": 0.0, "repetition_penalty": 1.0, "max_tokens": args.tokens,
                                       "ignore_eos": True, "detokenize": False, **extra})
            times = []
            for _ in range(args.repeats + 1):
                llm.reset_prefix_cache()
                torch.cuda.synchronize()
                t = time.perf_counter()
                llm.generate(prompts, params, use_tqdm=False)
                times.append(time.perf_counter() - t)
            best = min(times[1:])
            print(f"{name}: {best:.2f} s a call, {1000 * best / args.tokens:.2f} ms a decoding step "
                  f"(calls {', '.join(f'{x:.2f}' for x in times)})", flush=True)


if __name__ == "__main__":
    main()
