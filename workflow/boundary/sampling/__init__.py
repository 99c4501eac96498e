"""Sampling n completions per prompt: one interface, one module per backend (`hf`, `vllm`).

Every backend returns the same samples frame: prompt_id, sample_idx, completion, n_tokens
(generated tokens, the stop token included), finish_reason (`stop`: a stop id of the model's
generation config; `length`: max_new_tokens reached) and entropy: the mean over the
completion's tokens of the entropy (nats) of softmax(logits / temperature) at that step,
before top-p truncation. `hf` accumulates it while decoding; `vllm` exposes only top-k
log-probs, so its entropy comes from one teacher-forced pass of the same model over the
drawn tokens (`hf.teacher_forced`). `hf` draws each completion from its own random stream,
keyed by (seed, prompt, sample index): the same samples at any batch size (`streams`).

Every backend logs one throughput line per call (`throughput`): tok/s, completions/s, the
batch it chose and peak memory; the stages that sample add one end-to-end line (`end_to_end`).

The package also holds base-model import and loading (models) and sample-and-verify
(scoring: the one path of calibration, gate draws and evaluation).

May import: core, tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd

from boundary.core import settings

BACKENDS = settings.allowed("sampling", "backend")
SAMPLING = settings.defaults("sampling")
COMPLETION_COLUMNS = ["prompt_id", "sample_idx", "completion", "n_tokens", "finish_reason", "entropy"]


class Completion(NamedTuple):
    tokens: list[int]  # generated ids, the stop id included
    finish_reason: str  # "stop" or "length"
    entropy: float  # mean over its tokens of the entropy of softmax(logits / T)
    logps: list[float]  # each token's log-probability under softmax(logits / T)


@dataclass(frozen=True)
class SamplingParams:
    """One sampling call: a stage's n, temperature, top_p and seed, and the config's `sampling:`
    section (unset: the schema's defaults)."""

    n: int
    temperature: float
    top_p: float
    seed: int
    max_new_tokens: int = SAMPLING["max_new_tokens"]
    batch_size: int | str = SAMPLING["batch_size"]  # completions in flight (hf); "auto": what fits the device
    vllm_max_num_seqs: int = SAMPLING["vllm_max_num_seqs"]  # sequences in flight on one GPU (vllm)
    backend: str = SAMPLING["backend"]


def peak_memory_gib() -> tuple[float, str]:
    """Peak memory of this process: the GPU's allocations when CUDA is up, else the RSS."""
    import resource

    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**30, "GPU"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "host"


def throughput(backend: str, tokens: int, completions: int, seconds: float, batch: str,
               memory: str | None = None) -> str:
    """The sampling log line every stage prints. `memory`: what to say about memory when this
    process's own peak is not the sampler's (a vLLM engine in a process of its own)."""
    if memory is None:
        peak, where = peak_memory_gib()
        memory = f"peak {where} memory {peak:.1f} GiB"
    return (f"sampling ({backend}): {completions:,} completions, {tokens:,} tokens in {seconds:.1f} s: "
            f"{tokens / seconds:,.0f} tok/s, {completions / seconds:,.1f} completions/s, batch {batch}, "
            f"{memory}")


def process_seconds() -> float | None:
    """Seconds since this process started (Linux: /proc), interpreter start and imports included;
    None where /proc is absent."""
    import os

    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            return float(uptime.read().split()[0]) - started
    except (OSError, ValueError, IndexError):
        return None


def end_to_end(stage: str, samples: pd.DataFrame) -> str:
    """The line a sampling stage prints once its output is written: its tokens over the seconds
    since the process started (imports, model load, sampling, verification and the write)."""
    seconds = process_seconds()
    tokens = int(samples["n_tokens"].sum())
    if not seconds:
        return f"{stage}: {tokens:,} tokens; end to end time unknown (no /proc)"
    return (f"{stage}: end to end {seconds:.1f} s from process start to output written: "
            f"{tokens / seconds:,.0f} tok/s, {len(samples) / seconds:,.1f} completions/s")


def sample(model_path: str, prompt_ids: list[str], prompts: list[str],
           params: SamplingParams, log=None, adaptive=None) -> pd.DataFrame:
    """params.n completions per prompt; with `adaptive` (`rounds.Adaptive`), each prompt's first
    draws, in rounds until it is settled: `hf` refills its seats from every prompt still running
    (sample k is the full run's sample k); other backends draw each round as one call
    (`rounds_by_calls`)."""
    if params.backend == "hf":
        from boundary.sampling import hf as backend
    elif params.backend == "vllm":
        from boundary.sampling import vllm as backend
    else:
        raise ValueError(f"unknown sampling backend {params.backend!r} (one of {BACKENDS})")
    if adaptive is None:
        return backend.sample(model_path, prompt_ids, prompts, params, log)
    if params.backend == "hf":
        return backend.sample(model_path, prompt_ids, prompts, params, log, adaptive=adaptive)
    return rounds_by_calls(backend.sample, model_path, prompt_ids, prompts, params, log, adaptive)


def rounds_by_calls(backend_sample, model_path, prompt_ids, prompts, params, log, adaptive) -> pd.DataFrame:
    """Adaptive rounds as one backend call per round, over the prompts still running (every one
    has the same draws after a round). Round r's call takes seed + r: vLLM's draws follow its
    engine seed, not (seed, prompt, sample index), so they are valid draws but not the full
    run's, and each call starts its engine again."""
    from dataclasses import replace

    text_of = dict(zip(prompt_ids, prompts))
    running, have, frames = list(prompt_ids), 0, []
    for upto in adaptive.rounds:
        drawn = backend_sample(model_path, running, [text_of[p] for p in running],
                               replace(params, n=upto - have, seed=params.seed + have), log)
        frames.append(drawn.assign(sample_idx=drawn["sample_idx"] + have))
        have = upto
        if upto == adaptive.rounds[-1]:
            break
        done = pd.concat(frames, ignore_index=True)
        done = done[done["prompt_id"].isin(running)].sort_values("sample_idx", kind="stable")
        stop = adaptive.settled(done.groupby("prompt_id", sort=False)["completion"].agg(list).to_dict())
        running = [p for p in running if p not in stop]
        if not running:
            break
    out = pd.concat(frames, ignore_index=True)
    order = {p: i for i, p in enumerate(prompt_ids)}
    return out.sort_values(["prompt_id", "sample_idx"], key=lambda c: c.map(order) if c.name == "prompt_id" else c,
                           kind="stable", ignore_index=True)[COMPLETION_COLUMNS]
