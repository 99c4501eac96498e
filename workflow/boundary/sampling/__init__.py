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

from boundary.core import schema, settings

BACKENDS = schema.allowed("sampling", "backend")
SAMPLING = settings.defaults("sampling")
ADAPTIVE_BACKEND = ("draws in rounds (calibration.adaptive, evaluate.sequential): each needs sampling.backend: "
                    "hf (vllm would start its engine once per round, about 80-90 s each on a GPU)")
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
    draws, in rounds until it is settled: `hf` keeps its seats full from every prompt still
    running (sample k is the full run's sample k). vllm has no adaptive path yet: a round per
    engine start (about 80-90 s each on a GPU) would cost more than the draws it saves."""
    if params.backend == "hf":
        from boundary.sampling import hf as backend
    elif params.backend == "vllm":
        from boundary.sampling import vllm as backend
    else:
        raise ValueError(f"unknown sampling backend {params.backend!r} (one of {BACKENDS})")
    if adaptive is None:
        return backend.sample(model_path, prompt_ids, prompts, params, log)
    if params.backend != "hf":
        from boundary.core.errors import BoundaryError

        raise BoundaryError(ADAPTIVE_BACKEND)
    return backend.sample(model_path, prompt_ids, prompts, params, log, adaptive=adaptive)
