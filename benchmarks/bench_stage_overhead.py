"""Where a sampling stage's time goes before its first token: interpreter start, imports, CUDA
start, tokenizer, weights to the device. Prints one line per phase as it is measured.

    python benchmarks/bench_stage_overhead.py --model results/smollm2/models/base

The stage's own figure is its end-to-end line (`sampling.end_to_end`); this script splits the
part of it that is not sampling or verification. Loads run twice each way, so the second of
each reads the weights from the page cache, as every stage after the first does.
"""

from __future__ import annotations

import argparse
import time

from boundary.sampling import process_seconds


def phase(name: str, start: float) -> float:
    now = time.perf_counter()
    print(f"  {name}: {now - start:.2f} s", flush=True)
    return now


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="an imported model folder (boundary import-base)")
    args = ap.parse_args(argv)
    print(f"  interpreter start to main: {process_seconds() or float('nan'):.2f} s", flush=True)
    t = time.perf_counter()
    import torch
    t = phase(f"import torch {torch.__version__}", t)
    import transformers
    t = phase(f"import transformers {transformers.__version__}", t)
    from transformers import AutoTokenizer

    from boundary.sampling import hf  # noqa: F401 (the backend's own imports)
    from boundary.sampling.models import from_pretrained
    t = phase("import the hf backend", t)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.cuda.init()
        torch.zeros(1, device=device)
        t = phase(f"CUDA start ({torch.cuda.get_device_name(device)})", t)
    AutoTokenizer.from_pretrained(args.model)
    t = phase("tokenizer", t)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    for attempt in (1, 2):
        model = from_pretrained(args.model, dtype=dtype)
        t = phase(f"weights to host memory (load {attempt})", t)
        model = model.to(device).eval().requires_grad_(False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = phase(f"host to {device.type} (load {attempt})", t)
        del model
        if device.type == "cuda":
            model = from_pretrained(args.model, dtype=dtype, device_map=str(device))
            torch.cuda.synchronize(device)
            t = phase(f"weights straight to the device, device_map (load {attempt})", t)
            del model
    print(f"  total since process start: {process_seconds() or float('nan'):.2f} s", flush=True)


if __name__ == "__main__":
    main()
