"""Sample-and-verify: the one path from a model and a split to scored completions.

Calibration, gate draws and evaluation all go through `scored_samples`, so the frozen-base
cache and the evaluation counts are produced by identical sampling and verification code.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np
import pandas as pd

from boundary.core.errors import BoundaryError
from boundary.sampling import SamplingParams, sample
from boundary.sampling.rounds import Adaptive
from boundary.tasks.verify import Verifier, score_samples, unextracted_warning


def parse_shard(shard: str | None) -> tuple[int, int]:
    """(I, K) from a shard "I/K"; no shard is (0, 1)."""
    if not shard:
        return 0, 1
    try:
        index, count = (int(x) for x in shard.split("/"))
        assert 0 <= index < count
    except (ValueError, AssertionError):
        raise BoundaryError(f"--shard: {shard!r} is not I/K with 0 <= I < K") from None
    return index, count


def shard_of(split: pd.DataFrame, shard: str | None) -> tuple[pd.DataFrame, int]:
    """Rows I, I+K, ... of the split for shard "I/K", and a seed offset that keeps the shards'
    random streams apart (so K shards give other, equally valid samples than one job)."""
    if not shard:
        return split, 0
    index, count = parse_shard(shard)
    return split.iloc[index::count], 7919 * (index + 1)


def gather_shards(paths: list[str], columns: list[str], prompt_order: list[str] | None = None) -> pd.DataFrame:
    """The samples of shard files as one table. With `prompt_order` (the split's prompt ids), every
    prompt must come from exactly one shard, and rows follow the split, then sample index."""
    from boundary.core.artifacts import read_table

    samples = pd.concat([read_table(p, columns).assign(_shard=i) for i, p in enumerate(paths)], ignore_index=True)
    if prompt_order is not None:
        shards = samples.groupby("prompt_id")["_shard"].nunique()
        missing = [pid for pid in prompt_order if pid not in shards.index]
        extra = sorted(set(shards.index) - set(prompt_order))
        twice = list(shards.index[shards > 1])
        if missing or extra or twice:
            what = (f"{len(missing)} of the split's prompts in no shard (first {missing[0]!r})" if missing else
                    f"{len(extra)} prompts not in the split (first {extra[0]!r})" if extra else
                    f"prompt {twice[0]!r} in more than one shard")
            raise BoundaryError(f"--gather: {what}: the shards are not one scatter of this split")
        split_index = samples["prompt_id"].map({pid: i for i, pid in enumerate(prompt_order)})
        samples = samples.iloc[np.lexsort((samples["sample_idx"], split_index))]
    return samples.drop(columns="_shard").reset_index(drop=True)


def scored_samples(model_path: str, split: pd.DataFrame, params: SamplingParams,
                   extractor: str, verifier: Verifier, log=print, label: str = "split",
                   rule=None, base: str | None = None) -> pd.DataFrame:
    """n samples per prompt of the split, with extracted answer and math-verify verdict; a
    warning naming the split (`label`) when most completions have no extractable answer.
    `rule` (adaptive calibration: `rounds` and `next_round(r, c)`, e.g. analysis.adaptive's
    StoppingRule): each prompt's first draws in rounds, verified as each round's prefix
    completes, until rule.next_round says its label is settled (None). `base`: the base model
    folder of a LoRA adapter folder `model_path`."""
    prompts = split["prompt"] if "prompt" in split else split["problem"]
    golds = dict(zip(split["prompt_id"], split["answer"]))
    adaptive = None if rule is None else Adaptive(rule.rounds, _settled(rule, golds, extractor, verifier))
    samples = sample(model_path, split["prompt_id"].tolist(), prompts.tolist(), params, log=log,
                     adaptive=adaptive, base=base)
    start = time.perf_counter()
    drawn = dict(samples.attrs)  # what the sampler drew, look-ahead included (hf)
    samples = score_samples(samples, golds, extractor, verifier)
    samples.attrs.update(drawn)
    log(f"verify: {len(samples):,} completions in {time.perf_counter() - start:.1f} s")
    message = unextracted_warning(samples["answer"], extractor, label)
    if message:
        log(f"warning: {message}")
    return samples


def _settled(rule, golds: dict, extractor: str, verifier: Verifier):
    """`Adaptive.settled` for `rule`: score the prompts' new completions (each once, all in one
    call), then ask the rule whether c correct of its first r settles each prompt."""
    correct: dict[str, list[bool]] = {}

    def settled(prefixes: dict[str, list[str]]) -> set[str]:
        new = [(p, t) for p, texts in prefixes.items() for t in texts[len(correct.setdefault(p, [])):]]
        if new:
            frame = pd.DataFrame(new, columns=["prompt_id", "completion"])
            scored = score_samples(frame, golds, extractor, verifier, log=lambda *_: None)
            for p, ok in zip(scored["prompt_id"], scored["correct"]):
                correct[p].append(bool(ok))
        return {p for p, texts in prefixes.items() if rule.next_round(len(texts), sum(correct[p])) is None}

    return settled


@contextmanager
def verifier_for(settings: dict):
    """One math-verify worker pool for a whole stage, closed when the stage ends."""
    verifier = Verifier(timeout=settings["verify"]["timeout"], workers=settings["verify"]["workers"])
    try:
        yield verifier
    finally:
        verifier.close()


def sampling_params(stage: dict, sampling: dict, seed: int, n: int) -> SamplingParams:
    """SamplingParams from a stage's settings (temperature, top_p) and the sampling section."""
    return SamplingParams(n=n, temperature=stage["temperature"], top_p=stage["top_p"],
                          max_new_tokens=sampling["max_new_tokens"], seed=seed,
                          batch_size=sampling["batch_size"], backend=sampling["backend"],
                          vllm_max_num_seqs=sampling["vllm_max_num_seqs"])
