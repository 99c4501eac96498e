"""`boundary import-base` of a GGUF with one parse of the file against transformers' own four
(its config, its tokenizer and its weights each parse the file afresh, and so did the eos lookup),
in one process, alternating, each variant into its own fresh folder.

    PYTHONPATH=workflow python benchmarks/bench_import_base.py --source models/Qwen2.5-Coder-0.5B-Instruct.gguf

Prints each run's seconds, each variant's median, their ratio, and whether the two variants'
folders hold the same bytes (they must: the reader is shared, not changed).
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import statistics
import tempfile
import time
from pathlib import Path

from boundary.sampling import models


def run(source: str, out: Path, shared: bool) -> float:
    once = models.gguf_parsed_once
    if not shared:
        models.gguf_parsed_once = contextlib.nullcontext
    try:
        start = time.perf_counter()
        models.import_base(source, out)
        return time.perf_counter() - start
    finally:
        models.gguf_parsed_once = once


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True, help="a .gguf file")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for shared in (False, True):
                out = Path(tmp) / f"{'one' if shared else 'four'}{i}"
                times[shared].append(run(args.source, out, shared))
                print(f"run {i}: {'one parse ' if shared else 'four parses'} {times[shared][-1]:6.1f} s", flush=True)
        files = sorted(p.name for p in (Path(tmp) / "one0").iterdir())
        _, mismatch, errors = filecmp.cmpfiles(Path(tmp) / "one0", Path(tmp) / "four0", files, shallow=False)
        same = not mismatch and not errors
    one, four = statistics.median(times[True]), statistics.median(times[False])
    print(f"median: four parses {four:.1f} s, one parse {one:.1f} s: {four / one:.2f}x; "
          f"folders {'byte-identical' if same else 'DIFFER'} ({len(files)} files)")


if __name__ == "__main__":
    main()
