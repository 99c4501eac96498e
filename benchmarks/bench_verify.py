"""Verifier throughput on 20,000 mixed (gold, answer) pairs: this tree's against another commit's.

    PYTHONPATH=workflow python benchmarks/bench_verify.py [--items 20000] [--workers 2]
                                                          [--against 8c2e985] [--rounds 2]
    PYTHONPATH=workflow python benchmarks/bench_verify.py --kill 3000

The pairs mix what RL rollouts and evaluations send: integers (right, wrong, leading zeros),
fractions against decimals, LaTeX expressions (roots, pi, powers), tuples and intervals, text
that is no answer, and empty answers; most pairs are distinct (repeats are cache hits for both
verifiers). Each round times a fresh verifier of each version on the same pairs, pool start
included, alternating the order; the median items/s (wall) and items per CPU second (this
process and its workers: the steadier figure on a shared machine) of each and their ratios
are printed, plus how many verdicts the two disagree on (expected 0) and how many the new one
left unverified.
"""

from __future__ import annotations

import argparse
import importlib
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from boundary.tasks.verify import Verifier  # noqa: E402


def mixed_pairs(count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    golds, answers = [], []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.30:  # integers
            g = rng.randint(0, 99_999)
            a = rng.choice([g, g, g + rng.randint(1, 9), rng.randint(0, 99_999)])
            golds.append(str(g))
            answers.append(rng.choice([str(a), f"0{a}", f"{a}.0"]) if a == g else str(a))
        elif kind < 0.50:  # fractions and decimals
            p, q = rng.randint(1, 99), rng.choice([2, 4, 5, 8, 10, 20, 25])
            golds.append(rf"\frac{{{p}}}{{{q}}}")
            answers.append(rng.choice([f"{p / q:g}", rf"\frac{{{2 * p}}}{{{2 * q}}}", f"{p}/{q}",
                                       f"{(p + 1) / q:g}"]))
        elif kind < 0.70:  # expressions
            r, s = rng.randint(2, 30), rng.randint(1, 9)
            golds.append(rng.choice([rf"{s}\sqrt{{{r}}}", rf"{s}\pi", f"{s}^{{{r % 7 + 2}}}",
                                     rf"\frac{{\sqrt{{{r}}}}}{{{s}}}"]))
            answers.append(rng.choice([rf"\sqrt{{{s * s * r}}}", rf"{s} \pi", f"{s ** (r % 7 + 2)}",
                                       rf"{s}\sqrt{{{r + 1}}}", rf"\frac{{{s}}}{{\sqrt{{{r}}}}}"]))
        elif kind < 0.80:  # tuples and intervals
            x, y = rng.randint(-9, 9), rng.randint(10, 99)
            golds.append(rng.choice([f"({x}, {y})", f"[{x}, {y})"]))
            answers.append(rng.choice([f"({x},{y})", f"[{x},{y})", f"({y}, {x})", f"({x}, {y}]"]))
        elif kind < 0.90:  # text that is no answer
            golds.append(str(rng.randint(0, 999)))
            answers.append(rng.choice(["x", "none", r"\text{no solution}", "a+b", "1,2,3,4,5" * rng.randint(1, 4)]))
        else:  # empty extraction
            golds.append(str(rng.randint(0, 999)))
            answers.append("")
    return golds, answers


def load_before(rev: str, folder: Path):
    """verify.py as of `rev`, importable by name so that its spawned workers find it."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:workflow/boundary/verify.py"],
                            check=True, capture_output=True, text=True).stdout
    (folder / "verify_before.py").write_text(source)
    sys.path.insert(0, str(folder))
    return importlib.import_module("verify_before")


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the closed verifiers' workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(make, golds, answers):
    """(items per wall second, items per CPU second, verdicts) of a fresh verifier."""
    cpu = cpu_seconds()
    start = time.perf_counter()
    verifier = make()
    got = verifier.verdicts(golds, answers) if hasattr(verifier, "verdicts") else verifier.check(golds, answers)
    seconds = time.perf_counter() - start
    verifier.close()
    return len(golds) / seconds, len(golds) / (cpu_seconds() - cpu), got


def killed_worker(golds, answers, workers: int, timeout: int):
    """Seconds for one check of the pairs, undisturbed and with a worker SIGKILLed 1 s in (the
    issue's case: 650 s instead of ~15 s for 3,000 items before the per-check bound)."""
    seconds = {}
    for kill in (False, True):
        verifier = Verifier(timeout=timeout, workers=workers)
        verifier.check(["0"], ["0"])  # the pool is up
        if kill:
            threading.Timer(1.0, os.kill, (verifier._workers[0].process.pid, signal.SIGKILL)).start()
        start = time.perf_counter()
        got = verifier.verdicts(golds, answers)
        seconds[kill] = time.perf_counter() - start
        replaced, unverified = verifier.replaced, sum(v is None for v in got)
        verifier.close()
    print(f"{len(golds)} pairs, {workers} workers: {seconds[False]:.1f} s undisturbed, {seconds[True]:.1f} s "
          f"with a worker SIGKILLed 1 s in ({replaced} replaced, {unverified} unverified)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=5)
    ap.add_argument("--against", default="8c2e985", help="commit whose verify.py is the baseline")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kill", type=int, metavar="ITEMS",
                    help="instead: time a check of ITEMS pairs with and without a worker killed mid-way")
    args = ap.parse_args()
    golds, answers = mixed_pairs(args.kill or args.items)
    if args.kill:
        return killed_worker(golds, answers, args.workers, args.timeout)
    print(f"{args.items} pairs, {len(set(zip(golds, answers)))} distinct, {args.workers} workers, "
          f"timeout {args.timeout} s")
    with tempfile.TemporaryDirectory() as tmp:
        before = load_before(args.against, Path(tmp))
        makers = {"new": lambda: Verifier(timeout=args.timeout, workers=args.workers),
                  args.against: lambda: before.Verifier(timeout=args.timeout, workers=args.workers)}
        rates = {name: [] for name in makers}
        per_cpu = {name: [] for name in makers}
        verdicts = {}
        for r in range(args.rounds):
            for name in (list(makers) if r % 2 == 0 else list(makers)[::-1]):
                rate, cpu_rate, verdicts[name] = timed(makers[name], golds, answers)
                rates[name].append(rate)
                per_cpu[name].append(cpu_rate)
                print(f"round {r}: {name:>8} {rate:7.1f} items/s, {cpu_rate:7.1f} items/CPU-s", flush=True)
    new, old = (statistics.median(rates[k]) for k in makers)
    new_cpu, old_cpu = (statistics.median(per_cpu[k]) for k in makers)
    differ = sum((a is True) != b for a, b in zip(verdicts["new"], verdicts[args.against]))
    unverified = sum(v is None for v in verdicts["new"])
    print(f"median wall: new {new:.1f} items/s, {args.against} {old:.1f} items/s, ratio {new / old:.2f}")
    print(f"median CPU: new {new_cpu:.1f} items/CPU-s, {args.against} {old_cpu:.1f} items/CPU-s, "
          f"ratio {new_cpu / old_cpu:.2f} (steadier on a shared machine)")
    print(f"verdicts differing: {differ}; unverified by new: {unverified}")


if __name__ == "__main__":
    main()
