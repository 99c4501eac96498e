"""Adaptive draws: each prompt's samples in rounds, a prompt stopping once its label is settled.

`Adaptive` says how: the draws of the first round and `settle(prompt_id, texts)`, which gets
a prompt's first r completions (sample order) once all r are finished and returns the draws it
should have next, or None to stop. Sample k of a prompt is the full run's sample k (the same
(seed, prompt, k) stream, `streams`), so an adaptive run draws a prefix of each prompt's full
run. `Rounds` keeps the books for the hf decode loop (`hf.generate`'s feed): rows are added
when a prompt's prefix is complete, while other prompts' rows keep every seat busy (no
barrier per round).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Adaptive:
    first: int  # draws of every prompt's first round
    settle: Callable[[str, list[str]], int | None]  # (prompt_id, its first r texts) -> next r or None


class Rounds:
    """The rows of an adaptive run, for `hf.generate(feed=...)`: row j is (prompt, sample index)
    `self.jobs[j]`, in the order rows were queued."""

    def __init__(self, prompt_ids: list[str], prompts: list[list[int]], n: int, adaptive: Adaptive,
                 decode: Callable[[list[list[int]]], list[str]]):
        self.prompt_ids, self.prompts, self.n = prompt_ids, prompts, n
        self.adaptive, self.decode = adaptive, decode
        self.rows: list[list[int]] = [[] for _ in prompts]  # per prompt, its rows by sample index
        self.finished = [0] * len(prompts)
        self.target = [0] * len(prompts)
        self.jobs: list[tuple[int, int]] = []  # row -> (prompt index, sample index)
        self.running = len(prompts)

    def _queue(self, i: int, upto: int) -> list[tuple[list[int], int]]:
        upto = min(upto, self.n)
        new = []
        for k in range(self.target[i], upto):
            self.rows[i].append(len(self.jobs))
            self.jobs.append((i, k))
            new.append((self.prompts[i], k))
        self.target[i] = upto
        return new

    def initial(self) -> list[tuple[list[int], int]]:
        return [row for i in range(len(self.prompts)) for row in self._queue(i, self.adaptive.first)]

    @property
    def capacity(self) -> int:
        """Rows that may still be queued."""
        return sum(self.n - t for t in self.target)

    @property
    def open(self) -> bool:
        return self.running > 0

    def more(self, finished_rows: list[int], results: list) -> list[tuple[list[int], int]]:
        touched = set()
        for row in finished_rows:
            i = self.jobs[row][0]
            self.finished[i] += 1
            touched.add(i)
        new = []
        for i in sorted(touched):
            if self.finished[i] < self.target[i]:
                continue
            texts = self.decode([results[row].tokens for row in self.rows[i]])
            upto = self.adaptive.settle(self.prompt_ids[i], texts) if self.target[i] < self.n else None
            if upto is None or upto <= self.target[i]:
                self.running -= 1
            else:
                new += self._queue(i, upto)
        return new
