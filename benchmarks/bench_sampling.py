"""Sampling throughput and peak memory: the hf backend against stock `generate`, one process.

    PYTHONPATH=workflow python benchmarks/bench_sampling.py            # GPU: the issue's sizes
    PYTHONPATH=workflow python benchmarks/bench_sampling.py --cpu      # CPU: small sizes
    ... --real results/smollm2/models/base                             # + real weights, real eos

Shapes (random bf16 weights, no downloads): SmolLM2-135M (vocab 49,152) and Qwen2.5-0.5B
(vocab 151,936). Each draws n completions for each of `--prompts` random prompts of
`--prompt-len` tokens, `--new` tokens each with no stop id (every row runs to the cap, so the
work is equal), at T 0.6. Rows printed per shape: ours (entropy recorded) at top-p 0.95 and
1.0, stock `generate` at the same batch at top-p 0.95 and 1.0; tok/s, completions/s, peak
memory (torch.cuda.max_memory_allocated; ru_maxrss on a CPU), ratio to stock at the same
top-p and, on a GPU, to the KV-read bound: every step reads the weights and each row's KV
cache once, at the device-to-device copy bandwidth measured here. With --real, the imported
model samples real prompts with its real stop ids and a 512-token cap (rows end early: the
case where finished rows freeing their seats pays), ours against stock `generate`; with
--vllm also the vllm backend end to end (engine start and entropy pass included).
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import torch

sys.path.insert(0, "workflow")
from boundary.sampling.hf import generate  # noqa: E402

SHAPES = {
    "smollm2-135m": dict(kind="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3),
    "qwen2.5-0.5b": dict(kind="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2),
}


def build(shape: dict, device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    kw = {k: v for k, v in shape.items() if k != "kind"}
    config, cls = ((LlamaConfig, LlamaForCausalLM) if shape["kind"] == "llama" else (Qwen2Config, Qwen2ForCausalLM))
    torch.manual_seed(0)
    return cls(config(tie_word_embeddings=True, **kw)).to(device=device, dtype=dtype).eval()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def peak_reset(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_ours(model, prompts, stop, new, top_p, batch):
    out = generate(model, prompts, stop, 0, max_new=new, temperature=0.6, top_p=top_p,
                   batch_size=batch, seed=0)
    return sum(len(c.tokens) for c in out)


@torch.inference_mode()
def run_stock(model, prompts, stop, new, top_p, batch, pad=0):
    tokens = 0
    for lo in range(0, len(prompts), batch):
        chunk = prompts[lo:lo + batch]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(chunk):
            ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
        gen = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                             do_sample=True, temperature=0.6, top_p=top_p, top_k=0,
                             max_new_tokens=new, eos_token_id=stop or None, pad_token_id=pad,
                             min_new_tokens=0 if stop else new)
        new_tokens = gen[:, width:]
        if stop:  # tokens up to and including the first stop id
            is_stop = torch.isin(new_tokens, torch.tensor(stop, device=new_tokens.device))
            after = (is_stop.cumsum(1) - is_stop.long()) > 0
            tokens += int((~after).sum())
        else:
            tokens += new_tokens.numel()
    return tokens


def timed(fn, device, *args):
    peak_reset(device)
    sync(device)
    start = time.perf_counter()
    tokens = fn(*args)
    sync(device)
    return tokens, time.perf_counter() - start, peak_gib(device)


def copy_bandwidth(device) -> float:
    """Bytes per second of a large device-to-device copy (read + write counted)."""
    x = torch.empty(1 << 30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    sync(device)
    start = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    sync(device)
    return 2 * 10 * x.numel() / (time.perf_counter() - start)


def kv_bound(model, batch, prompt_len, new, bandwidth) -> float:
    """tok/s if each step only read the weights once and every row's KV cache once."""
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * model.dtype.itemsize
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    seconds = sum((weights + batch * per_token * (prompt_len + t)) / bandwidth for t in range(new))
    return batch * new / seconds


def table(rows):
    print(f"{'shape':<14}{'sampler':<26}{'top_p':>6}{'tok/s':>10}{'compl/s':>9}{'peak GiB':>10}"
          f"{'vs stock':>9}{'vs KV bound':>12}")
    for r in rows:
        print(f"{r['shape']:<14}{r['sampler']:<26}{r['top_p']:>6}{r['tok_s']:>10.0f}{r['compl_s']:>9.1f}"
              f"{r['peak']:>10.2f}{r.get('vs_stock', float('nan')):>9.2f}{r.get('vs_bound', float('nan')):>12.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="small sizes for a CPU")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated; empty: none")
    ap.add_argument("--n", type=int, default=256, help="completions per prompt")
    ap.add_argument("--prompts", type=int)
    ap.add_argument("--prompt-len", type=int)
    ap.add_argument("--new", type=int)
    ap.add_argument("--batch", type=int, help="completions in flight, both samplers")
    ap.add_argument("--real", help="an imported model folder: real weights, prompts and stop ids")
    ap.add_argument("--vllm", action="store_true", help="with --real: the vllm backend too (its "
                    "time includes the engine start and the teacher-forced entropy pass)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    prompts_n = args.prompts or (16 if cuda else 1)
    plen, new = args.prompt_len or (128 if cuda else 32), args.new or (256 if cuda else 32)
    n = args.n if cuda else min(args.n, 16)
    batch = args.batch or (4096 if cuda else 16)
    bandwidth = copy_bandwidth(device) if cuda else None
    if cuda:
        print(f"device {torch.cuda.get_device_name()}, copy bandwidth {bandwidth / 1e12:.2f} TB/s")
    print(f"{prompts_n} prompts x n={n}, {plen}-token prompts, {new} new tokens, batch {batch}, T 0.6")
    rows = []
    for name in filter(None, args.shapes.split(",")):  # --shapes "": only --real
        model = build(SHAPES[name], device, dtype)
        g = torch.Generator().manual_seed(1)
        base = [torch.randint(100, model.config.vocab_size, (plen,), generator=g).tolist() for _ in range(prompts_n)]
        prompts = [p for p in base for _ in range(n)]
        timed(run_ours, device, model, prompts[:min(batch, 64)], [], 8, 0.95, batch)  # warm-up
        stock = {}
        for top_p in (0.95, 1.0):
            tokens, secs, peak = timed(run_stock, device, model, prompts, [], new, top_p, batch)
            stock[top_p] = tokens / secs
            rows.append(dict(shape=name, sampler=f"stock generate b{batch}", top_p=top_p, tok_s=tokens / secs,
                             compl_s=len(prompts) / secs, peak=peak))
        for top_p in (0.95, 1.0):
            tokens, secs, peak = timed(run_ours, device, model, prompts, [], new, top_p, batch)
            row = dict(shape=name, sampler=f"hf backend b{batch}", top_p=top_p, tok_s=tokens / secs,
                       compl_s=len(prompts) / secs, peak=peak, vs_stock=tokens / secs / stock[top_p])
            if cuda:
                row["vs_bound"] = row["tok_s"] / kv_bound(model, batch, plen, new, bandwidth)
            rows.append(row)
        ours = {r["top_p"]: r["tok_s"] for r in rows if r["shape"] == name and r["sampler"].startswith("hf")}
        print(f"{name}: top-p 0.95 costs {ours[1.0] / ours[0.95]:.2f}x top-p 1.0 (ours); "
              f"stock {stock[1.0] / stock[0.95]:.2f}x")
        del model
    if args.real:
        from boundary.sampling.models import load_model, stop_ids

        model, tok = load_model(args.real, device=str(device))
        stop = stop_ids(model.generation_config, tok)
        questions = ["Natalia sold clips to 48 of her friends in April, and then she sold half as many "
                     "clips in May. How many clips did Natalia sell altogether in April and May?",
                     "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of "
                     "babysitting. How much did she earn?"]
        real = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                        tokenize=False) for q in questions]
        ids = [tok(t, add_special_tokens=False)["input_ids"] for t in real]
        prompts = [p for p in ids * (prompts_n // 2 or 1) for _ in range(n)]
        cap = 512 if cuda else 64
        out = {}
        for label, fn in [("stock", run_stock), ("ours", run_ours)]:
            tokens, secs, peak = timed(fn, device, model, prompts, stop, cap, 0.95, batch)
            out[label] = tokens / secs
            rows.append(dict(shape="real " + model.config.model_type, sampler=f"{label} b{batch} cap{cap}",
                             top_p=0.95, tok_s=tokens / secs, compl_s=len(prompts) / secs, peak=peak,
                             vs_stock=out[label] / out["stock"]))
        if args.vllm:
            from boundary.sampling import SamplingParams, sample

            params = SamplingParams(n=n, temperature=0.6, top_p=0.95, max_new_tokens=cap, seed=0,
                                    batch_size=batch, backend="vllm")
            texts = real * (prompts_n // 2 or 1)
            start = time.perf_counter()
            drawn = sample(args.real, [f"p{i}" for i in range(len(texts))], texts, params)
            secs = time.perf_counter() - start
            rows.append(dict(shape="real " + model.config.model_type, sampler=f"vllm cap{cap} (all-in)",
                             top_p=0.95, tok_s=drawn["n_tokens"].sum() / secs, compl_s=len(drawn) / secs,
                             peak=peak_gib(device), vs_stock=drawn["n_tokens"].sum() / secs / out["stock"]))
    table(rows)


if __name__ == "__main__":
    main()
