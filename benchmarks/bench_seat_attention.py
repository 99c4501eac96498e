"""One decode step's attention over the fixed-seat KV cache (`hf.seat_attention`), one layer,
at SmolLM2-135M's shapes: `hf`'s choices ($BOUNDARY_SEAT_ATTENTION) against each SDPA backend
forced in turn and torch's other public attention APIs.

    PYTHONPATH=workflow python benchmarks/bench_seat_attention.py [--rows 2900 --width 600 --columns 800]
    PYTHONPATH=workflow python benchmarks/bench_seat_attention.py --device cpu --rows 64 --width 100 --columns 160

Key and value are the first `width` columns of a [rows, kv heads, columns, head dim] buffer (a
strided view, as `Seats.update` hands them); row i attends its first lengths[i] columns (random
in 1..width, one row full). A line per variant as it is measured: ms per call (mean of --iters
after warm-up), the largest |difference| from `matmul` (today's) in float32 and its largest
|error| against exact attention (`matmul` on the inputs cast to float32); a variant that
fails or that a backend refuses prints its error and the run goes on. The first line is the
time to copy the KV view once: what reading the cache at copy bandwidth costs.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

from boundary.sampling.hf import DECODE_ATTENTION


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, iters: int, device) -> float:
    """ms per call of fn() over iters calls after 3 warm-up calls."""
    for _ in range(3):
        fn()
    _sync(device)
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync(device)
    return (time.perf_counter() - start) / iters * 1e3


def inputs(rows, width, columns, device, kv=3, heads=9, dim=64, seed=0):
    """query [rows, heads, 1, dim], key/value width-cut views of [rows, kv, columns, dim] bf16
    buffers, the bool mask [rows, 1, 1, width] and the per-row lengths."""
    g = torch.Generator().manual_seed(seed)
    buffers = [torch.randn(rows, kv, columns, dim, generator=g).to(device, torch.bfloat16) for _ in range(2)]
    query = torch.randn(rows, heads, 1, dim, generator=g).to(device, torch.bfloat16)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    lengths[0] = width
    lengths = lengths.to(device)
    mask = (torch.arange(width, device=device)[None, :] < lengths[:, None])[:, None, None, :]
    return dict(query=query, key=buffers[0][:, :, :width], value=buffers[1][:, :, :width], mask=mask,
                scaling=dim ** -0.5, lengths=lengths, buffers=buffers)


def forced(fn, backend):
    """fn under one SDPA backend only (torch raises when that backend refuses the inputs)."""
    from torch.nn.attention import sdpa_kernel

    def run(query, key, value, mask, scaling):
        with sdpa_kernel([backend]):
            return fn(query, key, value, mask, scaling)
    return run


def bias_float32_softmax(query, key, value, mask, scaling):
    """Scores in bf16, the mask as an additive bias, softmax to float32 in one pass."""
    rows, heads, _, dim = query.shape
    q = query.view(rows, key.shape[1], heads // key.shape[1], dim)
    scores = torch.matmul(q, key.transpose(-1, -2)) * scaling
    bias = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores + bias, -1, dtype=torch.float32).to(value.dtype), value)


def flex(x):
    """`flex_attention` compiled, with a block mask built from the per-row lengths. Returns the
    call and a note with the compile and block-mask build times (the mask changes every step)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    lengths, device = x["lengths"], x["query"].device
    rows, width = x["key"].shape[0], x["key"].shape[2]

    def build():
        return create_block_mask(lambda b, h, q, k: k < lengths[b], B=rows, H=None, Q_LEN=1, KV_LEN=width,
                                 device=device)
    start = time.perf_counter()
    block = build()
    mask_first = time.perf_counter() - start
    mask_ms = timed(build, 5, device)
    compiled = torch.compile(flex_attention, dynamic=False)
    call = lambda *_: compiled(x["query"], x["key"], x["value"], block_mask=block, scale=x["scaling"],
                               enable_gqa=True)
    start = time.perf_counter()
    call()
    _sync(device)
    note = (f"compile {time.perf_counter() - start:.1f} s; block mask {mask_first:.1f} s first, "
            f"then {mask_ms:.3f} ms per build (per step in a decode)")
    return call, note


def variants(x, device):
    """(name, builder): a builder returns the call, or (call, note)."""
    from torch.nn.attention import SDPBackend

    out = [(name, lambda fn=fn: fn) for name, fn in DECODE_ATTENTION.items()]
    out.append(("bias_float32_softmax", lambda: bias_float32_softmax))
    for name in ("sdpa_gqa", "sdpa_grouped"):
        for backend in ("EFFICIENT_ATTENTION", "FLASH_ATTENTION", "MATH", "CUDNN_ATTENTION"):
            out.append((f"{name}[{backend}]",
                        lambda fn=DECODE_ATTENTION[name], b=backend: forced(fn, getattr(SDPBackend, b))))
    out.append(("flex_attention(compiled)", lambda: flex(x)))
    return out


def as_heads(out, rows, heads, dim):
    return out.reshape(rows, 1, heads, dim).float()


def measure(name, build, x, refs, iters, device) -> None:
    rows, heads, _, dim = x["query"].shape
    args = (x["query"], x["key"], x["value"], x["mask"], x["scaling"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            built = build()
            fn, note = built if isinstance(built, tuple) else (built, "")
            out = as_heads(fn(*args), rows, heads, dim)
            diff, err = ((out - ref).abs().max().item() for ref in refs)
            ms = timed(lambda: fn(*args), iters, device)
        except Exception as error:  # a refusing backend or a missing API: report, go on
            why = "; ".join(dict.fromkeys(str(w.message).splitlines()[0] for w in caught))
            first = (str(error).strip().splitlines() or [""])[0]
            print(f"{name:<34} failed: {type(error).__name__}: {first[:160]}" + (f" [{why[:300]}]" if why else ""),
                  flush=True)
            return
    print(f"{name:<34} {ms:9.3f} ms  max|diff| {diff:.2e}  max|err| {err:.2e}  {note}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2900)
    parser.add_argument("--width", type=int, default=600)
    parser.add_argument("--columns", type=int, default=800)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch {torch.__version__} on {name}; rows {args.rows}, width {args.width}, columns {args.columns}, "
          f"kv 3, heads 9, dim 64, bf16, {args.iters} iters", flush=True)
    x = inputs(args.rows, args.width, args.columns, device)
    used = int(x["lengths"].sum())
    print(f"columns used {used / (args.rows * args.width):.0%} of rows x width; KV view "
          f"{2 * x['key'].numel() * 2 / 2**20:.0f} MiB", flush=True)
    print(f"{'copy of the KV view (reference)':<34} "
          f"{timed(lambda: (x['key'].clone(), x['value'].clone()), args.iters, device):9.3f} ms", flush=True)
    q, k, v = x["query"], x["key"], x["value"]
    shape = (*q.shape[:2], q.shape[-1])
    refs = [as_heads(DECODE_ATTENTION["matmul"](*t, x["mask"], x["scaling"]), *shape)
            for t in ((q, k, v), (q.float(), k.float(), v.float()))]
    for variant, build in variants(x, device):
        measure(variant, build, x, refs, args.iters, device)


if __name__ == "__main__":
    main()
