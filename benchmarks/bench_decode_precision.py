"""How far a bf16 forward's next-token distribution is from the fp32 one, by attention arithmetic.

Why: on the 1.5B model the pipeline's sampler drew answers slightly less concentrated than stock
`generate` (exploratory, on a 1.5B model). Its default decode
attention (`sampling/hf.py`, "matmul") rounds the attention scores to bf16 before the softmax
and takes the softmax's output in bf16; transformers' sdpa, which stock `generate` uses, keeps
them in float32 inside the kernel. This teacher-forces the same token sequences through the model
in float32 (the reference) and in bf16 with each attention arithmetic, and prints, over the
completion tokens, the KL divergence from the reference at the sampling temperature, the
entropy, and the log-probability of the sequence's own tokens.

Variants (all bf16 but the reference):
- `fp32`: sdpa in float32 (the reference).
- `sdpa`: transformers' sdpa in bf16 (what stock `generate` runs on a GPU).
- `bf16_scores`: the arithmetic of hf.py's "matmul" decode attention applied at every position:
  (q * scale) @ k^T rounded to bf16, softmax of bf16 in and out, @ v.
- `eager`: transformers' eager attention (scores in bf16, softmax in float32).

    PYTHONPATH=workflow python benchmarks/bench_decode_precision.py --model MODEL_DIR \
        --split SPLIT.parquet [--samples SAMPLES.parquet] [--sequences 16] [--max-tokens 256]

--split: prompts as the data stage renders them (prompt_id, prompt). --samples: completions to
teacher-force (prompt_id, completion); without it, one completion a prompt is drawn by the fp32
model with `generate` (T, top-p). A CPU computes bf16 matmuls with float32 accumulation and a
bf16 result, as a GPU's cuBLAS does, so the rounding compared here is the GPU's; the kernels
differ, so the figures are the arithmetic's, not one GPU's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from boundary.core.errors import BoundaryError  # noqa: E402

VARIANTS = ("fp32", "sdpa", "bf16_scores", "eager")


def bf16_scores_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """hf.py's "matmul" decode arithmetic over a whole causal sequence: scores in the cache's
    dtype, softmax of them in that dtype, grouped query heads by repetition (same dot products)."""
    import torch

    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    scores = torch.matmul(query * scaling, key.transpose(-1, -2))
    t, s = scores.shape[-2:]
    causal = torch.ones(t, s, dtype=torch.bool, device=scores.device).tril(s - t)
    scores.masked_fill_(~causal, float("-inf"))
    return torch.matmul(torch.softmax(scores, -1), value).transpose(1, 2), None


def load(path: str, variant: str):
    import torch
    from transformers import AttentionInterface

    from boundary.sampling.models import from_pretrained

    AttentionInterface.register("bf16_scores", bf16_scores_attention)
    dtype = torch.float32 if variant == "fp32" else torch.bfloat16
    model = from_pretrained(path, dtype=dtype).eval().requires_grad_(False)
    model.set_attn_implementation({"fp32": "sdpa", "sdpa": "sdpa"}.get(variant, variant))
    return model


def sequences(args, tokenizer, reference):
    """[(prompt token ids, completion token ids)] for the first --sequences prompts."""
    import pandas as pd
    import torch

    split = pd.read_parquet(args.split).head(args.sequences)
    if args.samples:
        samples = pd.read_parquet(args.samples)
        first = samples.groupby("prompt_id", sort=False)["completion"].first()
        missing = [p for p in split["prompt_id"] if p not in first.index]
        if missing:
            raise BoundaryError(f"{args.samples}: no completion of {missing[0]} ({len(missing)} prompts)")
        pairs = [(p, first[i]) for i, p in zip(split["prompt_id"], split["prompt"])]
        return [(tokenizer(p, add_special_tokens=False)["input_ids"],
                 tokenizer(c, add_special_tokens=False)["input_ids"][:args.max_tokens]) for p, c in pairs]
    out = []
    for i, prompt in enumerate(split["prompt"]):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        torch.manual_seed(args.seed + i)
        with torch.inference_mode():
            gen = reference.generate(input_ids=torch.tensor([ids]), do_sample=True, temperature=args.temperature,
                                     top_p=args.top_p, top_k=0, max_new_tokens=args.max_tokens,
                                     pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        out.append((ids, gen[0, len(ids):].tolist()))
    return out


def completion_logits(model, prompt: list[int], completion: list[int]):
    """float32 logits [len(completion), vocab] predicting each completion token."""
    import torch

    ids = torch.tensor([prompt + completion])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]
    return logits.float()


def measures(logits, reference, tokens, temperature: float) -> dict:
    """Per-token means over one sequence: KL(reference || variant), entropy, token log-prob (at T)."""
    import torch

    lp = torch.log_softmax(logits / temperature, -1)
    ref = torch.log_softmax(reference / temperature, -1)
    kl = (ref.exp() * (ref - lp)).sum(-1)
    entropy = -(lp.exp() * lp).sum(-1)
    token = lp.gather(-1, torch.tensor(tokens)[:, None]).view(-1)
    return {"kl": float(kl.mean()), "entropy": float(entropy.mean()), "token_logp": float(token.mean())}


def main(argv=None) -> None:
    import numpy as np
    import pandas as pd
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="an imported model folder (boundary import-base)")
    ap.add_argument("--split", required=True, help="prompts as the data stage renders them (prompt_id, prompt)")
    ap.add_argument("--samples", help="completions to teacher-force (prompt_id, completion); default: drawn")
    ap.add_argument("--sequences", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, help="torch threads (default torch's)")
    ap.add_argument("--out", help="CSV of every sequence's figures")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    start = time.perf_counter()
    reference = load(args.model, "fp32")
    seqs = sequences(args, tokenizer, reference)
    print(f"{len(seqs)} sequences, {sum(len(c) for _, c in seqs):,} completion tokens "
          f"({time.perf_counter() - start:.0f} s to load and draw); T {args.temperature}")
    ref_logits = [completion_logits(reference, p, c) for p, c in seqs]
    del reference
    rows = []
    for variant in VARIANTS:
        model = load(args.model, variant) if variant != "fp32" else None
        for i, (p, c) in enumerate(seqs):
            logits = ref_logits[i] if model is None else completion_logits(model, p, c)
            rows.append({"variant": variant, "sequence": i, "tokens": len(c),
                         **measures(logits, ref_logits[i], c, args.temperature)})
        del model
        done = pd.DataFrame([r for r in rows if r["variant"] == variant])
        se = lambda x: x.std(ddof=1) / np.sqrt(len(x))  # noqa: E731
        print(f"{variant:12s} KL from fp32 {done.kl.mean():.5f} (SE {se(done.kl):.5f})  entropy "
              f"{done.entropy.mean():.4f}  token log p {done.token_logp.mean():.4f}  "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    table = pd.DataFrame(rows)
    base = table[table.variant == "fp32"].set_index("sequence")
    for variant in VARIANTS[1:]:
        v = table[table.variant == variant].set_index("sequence")
        d = v.entropy - base.entropy
        print(f"{variant:12s} entropy - fp32: {d.mean():+.5f} (SE {d.std(ddof=1) / np.sqrt(len(d)):.5f}, "
              f"higher in {(d > 0).sum()} of {len(d)} sequences)")
    if args.out:
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    try:
        main()
    except BoundaryError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
