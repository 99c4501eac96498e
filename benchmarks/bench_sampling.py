"""Sampling throughput and peak memory: the hf backend against stock `generate` (and vLLM).

    PYTHONPATH=workflow python benchmarks/bench_sampling.py            # GPU: synthetic shapes
    PYTHONPATH=workflow python benchmarks/bench_sampling.py --cpu      # CPU: small sizes
    ... --shapes "" --real MODEL --prompts-file data/gsm8k/test.jsonl  # the real workload
    ... --samplers hf,stock,vllm --profile
    ... --samplers vllm --vllm-max-num-seqs 256,1024,4096                 # vLLM's sequences per step

Synthetic shapes (random bf16 weights, no downloads): SmolLM2-135M (vocab 49,152) and
Qwen2.5-0.5B (vocab 151,936). Each draws n completions for each of `--prompts` random prompts
of `--prompt-len` tokens, `--new` tokens each with no stop id (every row runs to the cap), at
T 0.6, top-p 0.95 and 1.0. Real workload (`--real`, an imported model folder): the first
`--prompts` questions of a JSONL file (`--field`) in the model's chat template (when it has
one), n samples each,
the model's real stop ids, a `--new` cap (512 on a GPU): completions of varying length, as a
calibration stage draws them. vllm rows run the vllm backend end to end (engine start and the
teacher-forced entropy pass reported apart).

Each row is printed as soon as it is measured; a row that fails (out of memory, say) prints
its error and the run goes on. `--batch` defaults to what fits the device (the hf backend's
`batch_size: auto`; for stock `generate`, its own estimate: its cache grows by copying and its
top-p sorts [batch, vocab]). Columns: tok/s, completions/s, peak memory
(torch.cuda.max_memory_allocated; ru_maxrss on a CPU), ratio to stock at the same top-p and,
synthetic on a GPU, to the KV-read bound: every step reads the weights and each row's KV
cache once, at the device-to-device copy bandwidth measured here. `--profile` adds the hf
backend's time per phase (a profiled run syncs the device per phase: time it apart).
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time

import torch

sys.path.insert(0, "workflow")
from boundary.sampling.hf import default_batch_size, generate, kv_bytes_per_token  # noqa: E402

SHAPES = {
    "smollm2-135m": dict(kind="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3),
    "qwen2.5-0.5b": dict(kind="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2),
}
TEMPERATURE = 0.6
COLUMNS = (("shape", 16, "s"), ("sampler", 30, "s"), ("top_p", 6, ""), ("tok_s", 10, ",.0f"),
           ("compl_s", 9, ".1f"), ("peak", 9, ".2f"), ("vs_stock", 9, ".2f"), ("vs_bound", 9, ".3f"))


def build(shape: dict, device, dtype):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    kw = {k: v for k, v in shape.items() if k != "kind"}
    config, cls = ((LlamaConfig, LlamaForCausalLM) if shape["kind"] == "llama" else (Qwen2Config, Qwen2ForCausalLM))
    torch.manual_seed(0)
    return cls(config(tie_word_embeddings=True, **kw)).to(device=device, dtype=dtype).eval()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def free(device):
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def run_ours(model, prompts, stop, pad, new, top_p, batch, profile=None):
    out = generate(model, prompts, stop, pad, max_new=new, temperature=TEMPERATURE, top_p=top_p,
                   batch_size=batch, seed=0, profile=profile)
    return sum(len(c.tokens) for c in out)


@torch.inference_mode()
def run_stock(model, prompts, stop, pad, new, top_p, batch):
    tokens = 0
    for lo in range(0, len(prompts), batch):
        chunk = prompts[lo:lo + batch]
        width = max(map(len, chunk))
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(chunk):
            ids[i, width - len(p):], mask[i, width - len(p):] = torch.tensor(p), 1
        gen = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                             do_sample=True, temperature=TEMPERATURE, top_p=top_p, top_k=0,
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


def stock_batch(model, prompt_len: int, new: int) -> int:
    """Rows stock `generate` fits: its DynamicCache grows by concatenation (two copies at the
    step that grows it), and top-p sorts [rows, vocab] fp32 (values, indices, cumsum, mask)."""
    if model.device.type != "cuda":
        return 16
    per_row = 2 * kv_bytes_per_token(model) * (prompt_len + new) + 6 * 4 * model.config.vocab_size
    free_bytes, _ = torch.cuda.mem_get_info()
    return max(1, min(4096, int(free_bytes * 0.5 / per_row)))


def show(row: dict) -> None:
    cells = []
    for name, width, fmt in COLUMNS:
        value = row.get(name)
        text = "" if value is None else (format(value, fmt) if fmt else str(value))
        cells.append(text.ljust(width) if fmt == "s" else text.rjust(width))
    print("".join(cells) + (f"  {row['note']}" if row.get("note") else ""), flush=True)


def measure(label: dict, device, fn, *args, completions: int, **kwargs) -> dict | None:
    """Time one sampler call and print its row; on failure print the error and return None."""
    free(device)
    sync(device)
    start = time.perf_counter()
    try:
        tokens = fn(*args, **kwargs)
        sync(device)
    except Exception as err:  # out of memory above all: report, free, go on
        show({**label, "note": f"FAILED {type(err).__name__}: {' '.join(str(err).split())[:160]}"})
        del err
        free(device)
        return None
    secs = time.perf_counter() - start
    row = {**label, "tok_s": tokens / secs, "compl_s": completions / secs, "peak": peak_gib(device),
           "tokens": tokens, "seconds": secs}
    return row


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
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    per_token = kv_bytes_per_token(model)
    seconds = sum((weights + batch * per_token * (prompt_len + t)) / bandwidth for t in range(new))
    return batch * new / seconds


def print_profile(profile: dict) -> None:
    total = sum(profile["seconds"].values())
    parts = ", ".join(f"{k} {v:.1f} s ({v / total:.0%}, {profile['counts'][k]:,} calls)"
                      for k, v in sorted(profile["seconds"].items(), key=lambda kv: -kv[1]))
    print(f"  hf profile: {profile['steps']:,} steps, {profile['seats']} seats; {parts}; KV columns read "
          f"{profile['kv_columns_read']:,} of which used {profile['kv_columns_used']:,} "
          f"({profile['kv_columns_used'] / max(1, profile['kv_columns_read']):.0%})", flush=True)
    print("  hf profile json: " + json.dumps(profile), flush=True)


def synthetic(args, device, dtype, cuda, samplers, bandwidth):
    n = args.n if cuda else min(args.n, 16)
    prompts_n = args.prompts or (16 if cuda else 1)
    plen, new = args.prompt_len or (128 if cuda else 32), args.new or (256 if cuda else 32)
    for name in filter(None, args.shapes.split(",")):
        model = build(SHAPES[name], device, dtype)
        g = torch.Generator().manual_seed(1)
        base = [torch.randint(100, model.config.vocab_size, (plen,), generator=g).tolist() for _ in range(prompts_n)]
        prompts = [p for p in base for _ in range(n)]
        ours_b = args.batch or default_batch_size(model, plen, new)
        stock_b = args.batch or stock_batch(model, plen, new)
        run_ours(model, prompts[:min(ours_b, 64)], [], 0, 8, 0.95, ours_b)  # warm-up
        print(f"{name}: {prompts_n} prompts x n={n}, {plen}-token prompts, {new} new tokens, T {TEMPERATURE}",
              flush=True)
        stock = {}
        for top_p in (0.95, 1.0):
            if "stock" in samplers:
                row = measure(dict(shape=name, sampler=f"stock generate b{stock_b}", top_p=top_p), device,
                              run_stock, model, prompts, [], 0, new, top_p, stock_b, completions=len(prompts))
                if row:
                    stock[top_p] = row["tok_s"]
                    show(row)
            if "hf" in samplers:
                row = measure(dict(shape=name, sampler=f"hf backend b{ours_b}", top_p=top_p), device,
                              run_ours, model, prompts, [], 0, new, top_p, ours_b, completions=len(prompts))
                if row:
                    row["vs_stock"] = row["tok_s"] / stock[top_p] if top_p in stock else None
                    if cuda:
                        row["vs_bound"] = row["tok_s"] / kv_bound(model, min(ours_b, len(prompts)), plen, new, bandwidth)
                    show(row)
        del model
        free(device)


def real(args, device, cuda, samplers):
    from boundary.sampling.hf import stop_and_pad
    from boundary.sampling.models import load_model, stop_ids

    model, tok = load_model(args.real, device=str(device))
    stop, pad = stop_and_pad(model, tok)
    with open(args.prompts_file) as fh:
        questions = [json.loads(line)[args.field] for line in fh if line.strip()][:args.prompts or 32]
    chat = bool(getattr(tok, "chat_template", None))  # as the stage renders prompts (prompt.chat)
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
             if chat else q for q in questions]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    n = args.n if cuda else min(args.n, 4)
    cap = args.new or (512 if cuda else 32)
    prompts = [p for p in ids for _ in range(n)]
    longest = max(map(len, ids))
    shape = "real " + model.config.model_type
    print(f"{shape}: {len(ids)} prompts ({min(map(len, ids))}-{longest} tokens) x n={n}, cap {cap}, "
          f"stop ids {stop_ids(model.generation_config, tok)}, T {TEMPERATURE}, top-p {args.top_p}", flush=True)
    stock_tok = None
    if "stock" in samplers:
        stock_b = args.batch or stock_batch(model, longest, cap)
        while True:
            row = measure(dict(shape=shape, sampler=f"stock generate b{stock_b}", top_p=args.top_p), device,
                          run_stock, model, prompts, stop, pad, cap, args.top_p, stock_b, completions=len(prompts))
            if row or stock_b == 1 or args.batch:
                break
            stock_b //= 2  # out of memory at the estimate: half the batch
        if row:
            stock_tok = row["tok_s"]
            show(row)
    if "hf" in samplers:
        batches = [int(b) for b in args.hf_batches.split(",")] if args.hf_batches else [
            args.batch or default_batch_size(model, longest, cap)]
        for b in batches:
            row = measure(dict(shape=shape, sampler=f"hf backend b{b}", top_p=args.top_p), device,
                          run_ours, model, prompts, stop, pad, cap, args.top_p, b, completions=len(prompts))
            if row:
                row["vs_stock"] = row["tok_s"] / stock_tok if stock_tok else None
                show(row)
        if args.profile:
            profile = {}
            row = measure(dict(shape=shape, sampler=f"hf backend b{batches[0]} profiled", top_p=args.top_p),
                          device, run_ours, model, prompts, stop, pad, cap, args.top_p, batches[0], profile,
                          completions=len(prompts))
            if row:
                show(row)
                print_profile(profile)
    if "vllm" in samplers:
        from boundary.sampling import vllm

        del model
        load_model.cache_clear()
        free(device)
        sweep = [int(v) for v in args.vllm_max_num_seqs.split(",")] if args.vllm_max_num_seqs else [None]
        for per_gpu in sweep:  # one engine each, one after another in this process
            seqs = vllm.max_num_seqs(len(prompts), per_gpu) if cuda else "cpu"
            timings = {}
            row = measure(dict(shape=shape, sampler=f"vllm backend s{seqs}, all-in", top_p=args.top_p), device,
                          lambda: sum(len(c.tokens) for cs in vllm.generate(
                              args.real, ids, n=n, max_new=cap, temperature=TEMPERATURE, top_p=args.top_p,
                              seed=0, timings=timings, max_num_seqs_per_gpu=per_gpu) for c in cs),
                          completions=len(prompts))
            if row:
                gen_row = dict(shape=shape, sampler=f"vllm generate alone s{seqs}", top_p=args.top_p,
                               tok_s=row["tokens"] / timings["generate"], compl_s=len(prompts) / timings["generate"],
                               note="engine start {start:.1f} s, entropy pass {entropy:.1f} s".format(**timings))
                row["vs_stock"] = row["tok_s"] / stock_tok if stock_tok else None
                show(gen_row)
                show(row)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="small sizes for a CPU")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated; empty: none")
    ap.add_argument("--samplers", default="hf,stock", help="comma-separated: hf, stock, vllm (vllm: --real only)")
    ap.add_argument("--n", type=int, default=256, help="completions per prompt")
    ap.add_argument("--prompts", type=int)
    ap.add_argument("--prompt-len", type=int, help="synthetic prompts' length")
    ap.add_argument("--new", type=int, help="new tokens (synthetic) or the cap (real)")
    ap.add_argument("--batch", type=int, help="completions in flight, every sampler (default: what fits)")
    ap.add_argument("--hf-batches", help="real: comma-separated hf batch sizes to time")
    ap.add_argument("--real", help="an imported model folder: real weights, prompts and stop ids")
    ap.add_argument("--prompts-file", help="with --real: a JSONL of questions")
    ap.add_argument("--field", default="question", help="with --real: the JSONL field holding the question")
    ap.add_argument("--top-p", type=float, default=0.95, help="with --real")
    ap.add_argument("--profile", action="store_true", help="with --real: the hf backend's time per phase")
    ap.add_argument("--vllm-max-num-seqs", help="with --real: comma-separated sampling.vllm_max_num_seqs "
                    "values, one vllm engine each (default: the schema's)")
    args = ap.parse_args()
    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    samplers = set(args.samplers.split(","))
    bandwidth = copy_bandwidth(device) if cuda else None
    if cuda:
        print(f"device {torch.cuda.get_device_name()}, copy bandwidth {bandwidth / 1e12:.2f} TB/s", flush=True)
    print("".join(name.ljust(w) if fmt == "s" else name.rjust(w) for name, w, fmt in COLUMNS), flush=True)
    synthetic(args, device, dtype, cuda, samplers, bandwidth)
    if args.real:
        if not args.prompts_file:
            ap.error("--real needs --prompts-file")
        real(args, device, cuda, samplers)


if __name__ == "__main__":
    main()
