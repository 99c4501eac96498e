"""Sample-and-verify: the one path from a model and a split to scored completions.

Calibration, gate draws and evaluation all go through `scored_samples`, so the frozen-base
cache and the evaluation counts are produced by identical sampling and verification code.
"""

from __future__ import annotations

import pandas as pd

from boundary.sampling import SamplingParams, sample
from boundary.verify import Verifier, score_samples


def scored_samples(model_path: str, split: pd.DataFrame, params: SamplingParams,
                   extractor: str, verify_timeout: int, verify_workers: int,
                   log=print) -> pd.DataFrame:
    """n samples per prompt of the split, with extracted answer and math-verify verdict."""
    prompts = split["prompt"] if "prompt" in split else split["problem"]
    samples = sample(model_path, split["prompt_id"].tolist(), prompts.tolist(), params, log=log)
    verifier = Verifier(timeout=verify_timeout, workers=verify_workers)
    try:
        return score_samples(samples, dict(zip(split["prompt_id"], split["answer"])),
                             extractor, verifier)
    finally:
        verifier.close()


def sampling_params(stage: dict, sampling: dict, seed: int, n: int) -> SamplingParams:
    """SamplingParams from a stage's settings (temperature, top_p) and the sampling section."""
    return SamplingParams(n=n, temperature=stage["temperature"], top_p=stage["top_p"],
                          max_new_tokens=sampling["max_new_tokens"], seed=seed,
                          batch_size=sampling["batch_size"], backend=sampling["backend"])
