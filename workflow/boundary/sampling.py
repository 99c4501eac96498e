"""Sampling n completions per prompt: one interface, `hf` (transformers) and `vllm` backends.

Both return a samples frame: prompt_id, sample_idx, completion, n_tokens, entropy, where
entropy is the mean over generated tokens of the entropy of the sampling distribution
softmax(logits / temperature) before top-p truncation (vLLM exposes only the top logprobs, so
its entropy is over those and is a lower bound). Same seed -> same samples on one backend.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pandas as pd
from tqdm import tqdm

BACKENDS = ("hf", "vllm")


@dataclass(frozen=True)
class SamplingParams:
    n: int
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int = 0
    batch_size: int = 4096  # completions per generate() call (hf)
    backend: str = "hf"


def sample(model_path: str, prompt_ids: list[str], prompts: list[str],
           params: SamplingParams, log=None) -> pd.DataFrame:
    if params.backend == "hf":
        return _sample_hf(model_path, prompt_ids, prompts, params, log)
    if params.backend == "vllm":
        return _sample_vllm(model_path, prompt_ids, prompts, params)
    raise ValueError(f"unknown sampling backend {params.backend!r} (one of {BACKENDS})")


@functools.lru_cache(maxsize=1)
def load_policy(model_path: str):
    """Model and tokenizer from a save_pretrained folder, on GPU in bf16 when one exists.

    Cached: a stage that samples one model several times (gate draws, once per refresh
    epoch) loads its weights once."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cuda = torch.cuda.is_available()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=torch.bfloat16 if cuda else torch.float32)
    return model.to("cuda" if cuda else "cpu").eval(), tokenizer


def _sample_hf(model_path, prompt_ids, prompts, params, log) -> pd.DataFrame:
    import torch

    model, tokenizer = load_policy(model_path)
    # Each prompt repeated n times, generated in chunks of batch_size rows.
    rows = [(pid, i) for pid in prompt_ids for i in range(params.n)]
    text_of = dict(zip(prompt_ids, prompts))
    out = []
    chunks = range(0, len(rows), params.batch_size)
    for chunk_idx, start in enumerate(tqdm(chunks, desc="sampling", disable=log is None)):
        chunk = rows[start:start + params.batch_size]
        enc = tokenizer([text_of[pid] for pid, _ in chunk], return_tensors="pt",
                        padding=True, add_special_tokens=False).to(model.device)
        torch.manual_seed(params.seed * 1_000_003 + chunk_idx)
        with torch.inference_mode():
            gen = model.generate(
                **enc, do_sample=True, temperature=params.temperature, top_p=params.top_p,
                top_k=0, max_new_tokens=params.max_new_tokens, output_logits=True,
                return_dict_in_generate=True, pad_token_id=tokenizer.pad_token_id)
        new = gen.sequences[:, enc["input_ids"].shape[1]:]
        logits = torch.stack(gen.logits, dim=1).float() / params.temperature  # [B, T, V]
        logp = torch.log_softmax(logits, dim=-1)
        token_entropy = -(logp.exp() * logp).sum(-1)  # [B, T]
        # Tokens up to and including the first EOS count; padding after it does not.
        is_eos = new == tokenizer.eos_token_id
        after_eos = (is_eos.cumsum(1) - is_eos.long()) > 0
        valid = ~after_eos & (new != tokenizer.pad_token_id) | is_eos & ~after_eos
        n_tokens = valid.sum(1)
        mean_entropy = (token_entropy * valid).sum(1) / n_tokens.clamp(min=1)
        texts = tokenizer.batch_decode(new, skip_special_tokens=True)
        for (pid, i), text, nt, ent in zip(chunk, texts, n_tokens.tolist(), mean_entropy.tolist()):
            out.append((pid, i, text, nt, ent))
    return pd.DataFrame(out, columns=["prompt_id", "sample_idx", "completion", "n_tokens", "entropy"])


def _sample_vllm(model_path, prompt_ids, prompts, params) -> pd.DataFrame:
    import math

    from vllm import LLM
    from vllm import SamplingParams as VllmParams

    llm = LLM(model=model_path, seed=params.seed)
    sp = VllmParams(n=params.n, temperature=params.temperature, top_p=params.top_p,
                    max_tokens=params.max_new_tokens, seed=params.seed, logprobs=20)
    out = []
    for pid, result in zip(prompt_ids, llm.generate(prompts, sp)):
        for i, comp in enumerate(result.outputs):
            ents = []
            for top in comp.logprobs or []:
                ps = [math.exp(lp.logprob) for lp in top.values()]
                ents.append(-sum(p * math.log(p) for p in ps if p > 0))
            out.append((pid, i, comp.text, len(comp.token_ids),
                        sum(ents) / max(len(ents), 1)))
    return pd.DataFrame(out, columns=["prompt_id", "sample_idx", "completion", "n_tokens", "entropy"])
