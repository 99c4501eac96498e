"""Answer extraction and math-verify checking, in worker processes with hard timeouts.

math-verify's own timeout uses SIGALRM, which only works in a main thread and cannot
interrupt C-level sympy work, so every check runs in a worker process that is killed when it
overruns. Checks are deduplicated on (gold, extracted answer) and cached for the process's
life: RL rewards and n=256 evaluations repeat the same pairs many times.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import re
from dataclasses import dataclass
from typing import Callable

EXTRACTORS = ("boxed", "last_number", "boxed_or_last_number")
_NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:/\d+)?")


def last_boxed(text: str) -> str:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces matched; '' if none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return ""
    brace = text.find("{", start)
    if brace < 0:
        return ""
    depth = 0
    for i in range(brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[brace + 1:i]
    return ""


def last_number(text: str) -> str:
    """The last number in the text, thousands separators dropped ('1,234.5' -> '1234.5')."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else ""


def extract_answer(completion: str, style: str) -> str:
    if style == "boxed":
        return normalize_answer(last_boxed(completion))
    if style == "last_number":
        return last_number(completion)
    if style == "boxed_or_last_number":
        return normalize_answer(last_boxed(completion)) or last_number(completion)
    raise ValueError(f"unknown answer extractor {style!r} (one of {EXTRACTORS})")


def normalize_answer(answer: str) -> str:
    """A canonical string for counting distinct answers; correctness is math-verify's job."""
    answer = answer.strip().rstrip(".").strip().strip("$").strip()
    answer = re.sub(r"\\(left|right|!|,|;|:)", "", answer)
    answer = re.sub(r"\s+", "", answer)
    return answer.rstrip(".")


@functools.lru_cache(maxsize=200_000)
def _parsed(text: str, timeout: int):
    """math-verify parse of one string, cached in the worker: parsing is ~40x verify's cost
    and the same gold or answer string recurs across samples and prompts."""
    from math_verify import parse

    # Wrapped so it parses as LaTeX ("1 - \\sqrt{2}" bare parses as 1); timeouts must be
    # ints (a float makes parse() return [] silently).
    return parse(f"${text}$", parsing_timeout=timeout)


def _check(gold: str, answer: str, timeout: int) -> bool:
    from math_verify import verify

    gold_parsed, answer_parsed = _parsed(gold, timeout), _parsed(answer, timeout)
    if not gold_parsed or not answer_parsed:
        return False
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=timeout))


def _check_many(pairs: list[tuple[str, str]], timeout: int) -> list[bool]:
    return [_check(g, a, timeout) for g, a in pairs]


@dataclass
class Verifier:
    """Checks (gold, answer) pairs with math-verify in a pool of worker processes.

    Pairs go to the workers in chunks (one round trip per chunk, not per pair). A chunk that
    overruns its deadline gets the pool killed and is retried pair by pair; a single pair
    that overruns is counted wrong.
    """

    timeout: int = 5
    workers: int = 2
    chunk: int = 64
    check_many: Callable = _check_many  # module-level, so spawned workers can import it

    def __post_init__(self):
        self.timeout = int(self.timeout)
        self._cache: dict[tuple[str, str], bool] = {}
        self._pool = None

    def _start(self):
        if self._pool is None:
            # spawn, not fork: the parent may hold torch threads that fork would copy mid-lock.
            self._pool = mp.get_context("spawn").Pool(self.workers)
        return self._pool

    def close(self):
        if self._pool is not None:
            self._pool.terminate()
            self._pool = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the pool's modules may already be gone
            pass

    def check(self, golds: list[str], answers: list[str]) -> list[bool]:
        for g, a in zip(golds, answers):
            if not a:
                self._cache[(g, a)] = False
        pending = sorted({(g, a) for g, a in zip(golds, answers) if (g, a) not in self._cache})
        chunks = [pending[i:i + self.chunk] for i in range(0, len(pending), self.chunk)]
        while chunks:
            pool = self._start()
            jobs = [(chunk, pool.apply_async(self.check_many, (chunk, self.timeout))) for chunk in chunks]
            chunks = []
            for i, (chunk, job) in enumerate(jobs):
                try:
                    self._cache.update(zip(chunk, job.get(timeout=2 * self.timeout * len(chunk) + 5)))
                except mp.TimeoutError:
                    self.close()  # a check stuck in C code: only killing its process stops it
                    if len(chunk) == 1:
                        self._cache[chunk[0]] = False
                    else:
                        chunks.extend([pair] for pair in chunk)
                    chunks.extend(c for c, _ in jobs[i + 1:])
                    break
        return [self._cache[(g, a)] for g, a in zip(golds, answers)]


def score_samples(samples, golds_by_prompt: dict[str, str], extractor: str,
                  verifier: Verifier):
    """Add `answer` (normalized extraction) and `correct` (math-verify) to a samples frame."""
    samples["answer"] = [extract_answer(t, extractor) for t in samples["completion"]]
    golds = [golds_by_prompt[p] for p in samples["prompt_id"]]
    samples["correct"] = verifier.check(golds, samples["answer"].tolist())
    return samples
